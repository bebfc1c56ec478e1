"""Who may call, decided from the headers alone, before any body is read or any work is done:
- without tokens, only a loopback Host is answered: a DNS-rebinding page controls both `Host` and
  `Origin`, so comparing them proves nothing, but the browser sends the page's own host name,
  never `localhost`;
- a browser's cross-site request is refused unless its origin is configured: without tokens, a
  page elsewhere could otherwise approve writes through the user's browser;
- with tokens, every route but the console's page, its static files and the OpenAPI docs needs a
  bearer token (401 before the body is read, so a stranger learns nothing from a 422);
- a token that may write nothing (a viewer's) is refused every write (403, before the body too).
What a role may do to one conversation depends on who owns it: `api.app` asks `api.access`."""

from __future__ import annotations

from fastapi.responses import JSONResponse
from starlette.datastructures import Headers, MutableHeaders
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..contract.owner import ANONYMOUS  # the principal (an admin) without tokens: loopback only
from .access import ADMIN, Principal
from .settings import ApiSettings, is_loopback_host

PUBLIC_PATHS = frozenset({"/", "/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc"})
AGENT_CARD = "/.well-known/agent-card.json"  # an A2A agent's card: what it is, how to reach it
AGENTS = "/agents"  # an agent profile's card and A2A binding: /agents/NAME/...
CONSOLE_FILES = "/static/"
LINKS = "/links/"  # one-time approval links: the signed link is the credential
CODEC_DECODE = "/codec/decode"
CODEC_PATHS = frozenset({"/codec/encode", CODEC_DECODE})  # Temporal's codec endpoints
SHOWN_CHARS = 100  # of a refused header, in the answer


class Gate:
    """Host, then origin, then token: the first that fails answers (403, 403, 401)."""

    def __init__(self, app: ASGIApp, settings: ApiSettings) -> None:
        self.app = app
        self.settings = settings
        # the A2A agents' cards: the default agent's, and each profile's (`api.a2a`)
        self.cards = frozenset({AGENT_CARD, *(f"{AGENTS}/{name}{AGENT_CARD}"
                                              for name in settings.profiles)})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        path = scope["path"]
        # the console's pages and a link's (an Approve button): never framed by another site
        send = _security_headers(send, console=path == "/"
                                 or path.startswith((CONSOLE_FILES, LINKS)))
        refusal = self.refusal(scope, headers)
        if refusal is not None:
            await refusal(scope, receive, send)
            return
        await self.app(scope, receive, send)

    def refusal(self, scope: Scope, headers: Headers) -> JSONResponse | None:
        """The answer to a caller who may not go on, or None (the caller's name is then in the
        request's state as `principal`)."""
        host = headers.get("host", "")
        if not self.settings.auth_required and not is_loopback_host(host):
            return _refused(403, f"host {host[:SHOWN_CHARS]!r} is not loopback: without "
                                 "AGENT_API_TOKENS the API answers localhost, 127.0.0.1 and "
                                 "[::1] only")
        origin = headers.get("origin")
        path = scope["path"]
        # A link's page posts its form with `Origin: null` in a browser that keeps referrers
        # to itself: the signed link is the credential there, not the origin.
        opaque_link = origin == "null" and path.startswith(LINKS)
        allowed = {f"http://{host}", f"https://{host}", *self.settings.cors_origins}
        if path in CODEC_PATHS:  # the Temporal UI's pages read sealed payloads through these
            allowed.add(self.settings.ui_origin)
        if origin and not opaque_link and origin.rstrip("/") not in allowed:
            return _refused(403, f"origin {origin[:SHOWN_CHARS]} is not allowed "
                                 "(AGENT_API_CORS_ORIGINS)")
        principal = self.principal(headers)
        public = (path in PUBLIC_PATHS or path in self.cards
                  or path.startswith((CONSOLE_FILES, LINKS)))
        # A CORS preflight carries no token; the CORS middleware inside answers it.
        preflight = scope["method"] == "OPTIONS" and "access-control-request-method" in headers
        if principal is None and not (public or preflight):
            why = "unknown token" if headers.get("authorization") else "a bearer token is required"
            return _refused(401, why, {"WWW-Authenticate": "Bearer"})
        if (principal is not None and not principal.may_write and scope["method"] == "POST"
                and not public and path != CODEC_DECODE):  # (decoding is reading)
            return _refused(403, f"{principal.describe()} may read, not write")
        scope.setdefault("state", {})["principal"] = principal
        return None

    def principal(self, headers: Headers) -> Principal | None:
        """Whose token it is; without AGENT_API_TOKENS (loopback only), `anonymous`, an admin."""
        if not self.settings.auth_required:
            return Principal(ANONYMOUS, ADMIN)
        scheme, _, given = headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not given:
            return None
        return self.settings.tokens.find(given.strip())


class BodyLimit:
    """Bodies of at most `max_bytes`: a longer Content-Length is a 413 before anything is read, a
    longer chunked body a 413 once its bytes pass the limit. (FastAPI's own `max_body_size` answers
    the first by replacing the app's response and raising through every middleware, which leaves
    no room for a request id and one log line.)"""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.detail = f"the body is over {max_bytes:,} bytes (AGENT_API_MAX_BODY_BYTES)"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = Headers(scope=scope).get("content-length", "")
        if declared.isdigit() and int(declared) > self.max_bytes:
            await _refused(413, self.detail)(scope, receive, send)
            return
        received = 0

        async def counted() -> Message:
            nonlocal received
            message = await receive()
            received += len(message.get("body", b""))
            if received > self.max_bytes:
                raise HTTPException(413, self.detail)
            return message

        await self.app(scope, counted, send)


def _refused(status: int, detail: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"detail": detail}, status, headers=headers)


def _security_headers(send: Send, console: bool) -> Send:
    """No response is sniffed as another type; the console is not framed by another site (a
    click-jacked Approve), and never an old console script."""
    async def with_headers(message: Message) -> None:
        if message["type"] == "http.response.start":
            headers = MutableHeaders(scope=message)
            headers["X-Content-Type-Options"] = "nosniff"
            if console:
                headers["Content-Security-Policy"] = "frame-ancestors 'none'"
                headers["X-Frame-Options"] = "DENY"
                headers.setdefault("Cache-Control", "no-cache")
        await send(message)
    return with_headers
