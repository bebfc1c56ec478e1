"""One-time approval links, as pure rules: what a link claims, how it is signed, and how a
signed one is read back. The worker signs them into webhook deliveries; the API reads them
(`api.links`). Both share only `AGENT_LINK_SECRET`.

A link names the exact call it was made for: the conversation that owns the call (`c`, a
subagent's own id for its calls), the call's id there (`k`), the call's ticket (`t`, drawn from
its idempotency key, so a call id used again later is another call), the sha256 of the
arguments it decides (`h`), the action, the expiry, the delivery it came in (`n`) and whom it
decides as (`to`, or nobody). A `decline` link says no to an MCP server's question instead:
`k` is the id of the call that asks, and `h` the request's digest (`Question.request`)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

Action = Literal["approve", "reject", "decline"]
MAX_CLAIM_CHARS = 1000


class LinkClaims(BaseModel):
    """What a signed link says. Anything else in a correctly signed token is not a link."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    c: str = Field(min_length=1, max_length=MAX_CLAIM_CHARS)  # the conversation that owns it
    k: str = Field(min_length=1, max_length=MAX_CLAIM_CHARS)  # the call's id there
    h: str = Field(min_length=1, max_length=MAX_CLAIM_CHARS)  # sha256 of its arguments (or
    # a question's request digest)
    a: Action
    x: int  # expires at (Unix seconds)
    n: str = Field(min_length=1, max_length=MAX_CLAIM_CHARS)  # the delivery's key
    t: str | None = Field(default=None, max_length=MAX_CLAIM_CHARS)  # the call's ticket
    to: str | None = Field(default=None, max_length=64)  # whom it decides as (None: nobody)


class LinkError(Exception):
    """Why a link decides nothing, with the HTTP status to answer."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


def sign_link(secret: str, claims: LinkClaims | dict) -> str:
    """`<claims as base64url JSON>.<HMAC-SHA256 of them>`."""
    data = claims.model_dump(exclude_none=True) if isinstance(claims, LinkClaims) else claims
    body = _b64(json.dumps(data, separators=(",", ":"), sort_keys=True).encode())
    return f"{body}.{_b64(_mac(secret, body))}"


def read_link(secret: str, token: str, now: float) -> LinkClaims:
    """The claims of a link this secret signed; `LinkError` if it is forged, damaged, odd or
    expired."""
    body, _, mac = token.partition(".")
    try:
        given = _unb64(mac)
        if not body or not hmac.compare_digest(given, _mac(secret, body)):
            raise LinkError("this link is not valid", 403)
        claims = LinkClaims.model_validate(json.loads(_unb64(body)))
    except (ValueError, UnicodeError, ValidationError, RecursionError):
        raise LinkError("this link is not valid", 403) from None
    if now > claims.x:
        raise LinkError("this link has expired", 410)
    return claims


def call_ticket(idempotency_key: str) -> str:
    """What tells one call from another that has the same id: drawn from the idempotency key the
    conversation minted for it, which no other call has."""
    return hashlib.sha256(f"ticket|{idempotency_key}".encode()).hexdigest()[:20]


def _mac(secret: str, body: str) -> bytes:
    return hmac.new(secret.encode(), body.encode(), hashlib.sha256).digest()


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
