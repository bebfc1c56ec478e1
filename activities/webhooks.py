"""Reaching the human (DESIGN "Reaching the human"): `AGENT_WEBHOOKS` names a JSON file of
endpoints, read by the worker only,

    {"webhooks": [{"url": "https://hooks.example/agent", "secret_env": "AGENT_HOOK_SECRET",
                   "events": ["approval_requested", "question_asked", "turn_finished",
                              "conversation_failed"],
                   "format": "json", "addressee": "carol"}]}

and the `notify` activity delivers one event to one of them: a POST of the JSON body, signed
(`X-Agent-Signature: sha256=<HMAC of the body>`) and keyed (`X-Agent-Delivery`, the same on every
attempt of one delivery, so a receiver can drop a repeat). With `AGENT_LINK_SECRET`, an
approval's delivery carries one-time approve and reject links (`api.links` serves them).
The conversation knows a webhook by its index and host only: its URL's path and its secret stay
here."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

import httpx
import structlog
from pydantic import BaseModel, Field, field_validator
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.config_file import read_config
from workflows.models import NotifyRequest, WebhookRef

log = structlog.get_logger("webhooks")
Event = Literal["approval_requested", "question_asked", "turn_finished", "conversation_failed"]
DEFAULT_PUBLIC_URL = "http://127.0.0.1:8000"
DEFAULT_LINK_TTL_S = 24 * 3600
DELIVERY_TIMEOUT_S = 10.0


class WebhooksError(ValueError):
    """An AGENT_WEBHOOKS file the worker cannot use."""


class Webhook(BaseModel, extra="forbid"):
    url: str
    secret_env: str | None = None  # the variable holding the HMAC secret (None: unsigned)
    events: list[Event] = Field(min_length=1)
    format: Literal["json", "slack"] = "json"
    addressee: str | None = Field(default=None, max_length=64)  # who its links decide as

    @field_validator("url")
    @classmethod
    def _http(cls, url: str) -> str:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"url must be http(s)://host/..., not {url[:100]!r}")
        return url

    @property
    def host(self) -> str:
        return urlsplit(self.url).hostname or "?"


class WebhooksFile(BaseModel, extra="forbid"):
    webhooks: list[Webhook] = Field(min_length=1, max_length=16)


class Webhooks:
    """The endpoints, where the console is, and the link secret."""

    def __init__(self, hooks: list[Webhook], public_url: str = DEFAULT_PUBLIC_URL,
                 link_ttl_s: int = DEFAULT_LINK_TTL_S) -> None:
        self.hooks = hooks
        self.public_url = public_url.rstrip("/")
        self.link_ttl_s = link_ttl_s

    @classmethod
    def load(cls, path: Path, env: Mapping[str, str] = os.environ,
             link_ttl_s: int = DEFAULT_LINK_TTL_S) -> Webhooks:
        """The endpoints of an AGENT_WEBHOOKS file, each secret variable set in `env`."""
        parsed = read_config(path, WebhooksFile, "AGENT_WEBHOOKS", WebhooksError)
        missing = [h.secret_env for h in parsed.webhooks
                   if h.secret_env and not env.get(h.secret_env)]
        if missing:
            raise WebhooksError(f"AGENT_WEBHOOKS names secret variables that are not set: "
                                f"{', '.join(sorted(set(missing)))}")
        return cls(parsed.webhooks, env.get("AGENT_PUBLIC_URL") or DEFAULT_PUBLIC_URL,
                   link_ttl_s)

    def refs(self) -> list[WebhookRef]:
        """What a conversation knows of them: enough to choose and to name, nothing secret."""
        return [WebhookRef(index=i, host=h.host, events=list(h.events))
                for i, h in enumerate(self.hooks)]


# ----- one-time links: signed, bound to the conversation, the call and its args, expiring -----

def sign_link(secret: str, claims: dict[str, Any]) -> str:
    """`<claims as base64url JSON>.<HMAC-SHA256 of them>`."""
    body = base64.urlsafe_b64encode(json.dumps(claims, separators=(",", ":"),
                                               sort_keys=True).encode()).rstrip(b"=")
    mac = hmac.new(secret.encode(), body, hashlib.sha256).digest()
    return f"{body.decode()}.{base64.urlsafe_b64encode(mac).rstrip(b'=').decode()}"


def read_link(secret: str, token: str, now: float | None = None) -> dict[str, Any]:
    """The claims of a link this secret signed; `LinkError` if it is forged, damaged or old."""
    body, _, mac = token.partition(".")
    try:
        given = base64.urlsafe_b64decode(mac + "=" * (-len(mac) % 4))
        expected = hmac.new(secret.encode(), body.encode(), hashlib.sha256).digest()
        if not body or not hmac.compare_digest(given, expected):
            raise LinkError("this link is not valid", 403)
        claims = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    except (ValueError, UnicodeError):
        raise LinkError("this link is not valid", 403) from None
    if not isinstance(claims, dict) or not {"c", "k", "h", "a", "x", "n"} <= claims.keys():
        raise LinkError("this link is not valid", 403)
    if (now or time.time()) > claims["x"]:
        raise LinkError("this link has expired", 410)
    return claims


class LinkError(Exception):
    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


def link_secret(env: Mapping[str, str] = os.environ) -> str | None:
    return env.get("AGENT_LINK_SECRET") or None


# ----- the delivery -----

def body_of(hook: Webhook, request: NotifyRequest, webhooks: Webhooks,
            secret: str | None) -> dict[str, Any]:
    """What a delivery says: the event, the conversation, the call or question, the links."""
    payload = dict(request.payload)
    conversation = payload["conversation_id"]
    payload["console_url"] = f"{webhooks.public_url}/#/c/{conversation}"
    call_id, args_hash = payload.get("call_id"), request.args_hash
    if request.event == "approval_requested" and secret and call_id and args_hash:
        expires = int(time.time()) + webhooks.link_ttl_s
        for action in ("approve", "reject"):
            token = sign_link(secret, {"c": conversation, "k": call_id, "h": args_hash,
                                       "a": action, "x": expires, "n": request.key,
                                       "to": hook.addressee})
            payload[f"{action}_url"] = f"{webhooks.public_url}/links/{token}"
    if hook.format == "slack":
        return {"text": slack_text(payload)}
    return payload


def slack_text(p: dict[str, Any]) -> str:
    where = f"<{p['console_url']}|{p['conversation_id']}>"
    if p["event"] == "approval_requested":
        args = json.dumps(p.get("args"), ensure_ascii=False)[:500]
        text = f"{where} waits for approval: `{p.get('tool')}` ({p.get('risk')}) `{args}`"
        if p.get("approve_url"):
            text += f"\n<{p['approve_url']}|Approve> · <{p['reject_url']}|Reject>"
        return text
    if p["event"] == "question_asked":
        return f"{where} asks: {p.get('question')}"
    if p["event"] == "conversation_failed":
        return f"{where} failed in turn {p.get('turn')}: {p.get('error')}"
    return f"{where} finished turn {p.get('turn')}: {p.get('answer') or p.get('stop_reason')}"


class WebhookActivities:
    def __init__(self, webhooks: Webhooks | None, http: httpx.AsyncClient,
                 env: Mapping[str, str] = os.environ) -> None:
        self._webhooks = webhooks
        self._http = http
        self._env = env

    @activity.defn(name="notify")
    async def notify(self, request: NotifyRequest) -> int:
        """Deliver one event to one webhook; the HTTP status. A refusal (4xx but 408/429) is
        final; anything else is retried by Temporal's policy, with the same delivery key."""
        if self._webhooks is None or request.webhook >= len(self._webhooks.hooks):
            raise ApplicationError(f"this worker has no webhook {request.webhook}",
                                   type="UnknownWebhook", non_retryable=True)
        hook = self._webhooks.hooks[request.webhook]
        secret = self._env.get(hook.secret_env) if hook.secret_env else None
        body = json.dumps(body_of(hook, request, self._webhooks, link_secret(self._env)),
                          ensure_ascii=False, separators=(",", ":")).encode()
        headers = {"Content-Type": "application/json", "X-Agent-Delivery": request.key,
                   "X-Agent-Event": request.event}
        if secret:
            headers["X-Agent-Signature"] = "sha256=" + hmac.new(
                secret.encode(), body, hashlib.sha256).hexdigest()
        try:
            response = await self._http.post(hook.url, content=body, headers=headers,
                                             timeout=DELIVERY_TIMEOUT_S)
        except httpx.HTTPError as err:
            raise ApplicationError(f"{hook.host} unreachable: {type(err).__name__}",
                                   type="WebhookUnreachable") from None
        status = response.status_code
        log.info("webhook delivered" if status < 300 else "webhook refused", kind=request.event,
                 host=hook.host, status=status, key=request.key,
                 attempt=activity.info().attempt)
        if status >= 300:
            final = 400 <= status < 500 and status not in (408, 429)
            raise ApplicationError(f"{hook.host} answered {status}", type="WebhookRefused",
                                   non_retryable=final)
        return status
