"""Reaching the human (DESIGN "Reaching the human"): `AGENT_WEBHOOKS` names a JSON file of
endpoints, read by the worker only,

    {"webhooks": [{"url": "https://hooks.example/agent", "secret_env": "AGENT_HOOK_SECRET",
                   "events": ["approval_requested", "question_asked", "turn_finished",
                              "conversation_failed", "turn_held"],
                   "format": "json", "addressee": "carol"}]}

and the `notify` activity delivers one event to one of them: a POST of the JSON body, signed
(`X-Agent-Signature: sha256=<HMAC of the body>`) and keyed (`X-Agent-Delivery`, the same on every
attempt of one delivery, so a receiver can drop a repeat). With `AGENT_LINK_SECRET`, an
approval's delivery carries one-time approve and reject links (`api.links` serves them).
The conversation knows a webhook by its index and host only: its URL's path and its secret stay
here.

The contract's signature covers the body alone, so a captured delivery could be sent again
forever. Beside it each delivery is also signed as Standard Webhooks (standardwebhooks.com)
says, over its id and the time of this attempt: `webhook-id` (the delivery key),
`webhook-timestamp`, `webhook-signature: v1,<base64 HMAC-SHA256 of "{id}.{timestamp}.{body}">`,
keyed by `signing_key`: a `whsec_` secret is base64 after its prefix, as the standard's are;
any other is its UTF-8 bytes, which a receiver gives its library as they are or in base64."""

from __future__ import annotations

import base64
import binascii
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

from ..contract import NOTIFY_ACTIVITY, NotifyRequest, WebhookRef
from ..rules.links import LinkClaims, sign_link
from .a2a_push import push_delivery
from .config_file import read_config
from .heartbeat import heartbeating

log = structlog.get_logger("webhooks")
Event = Literal["approval_requested", "question_asked", "turn_finished", "conversation_failed",
                "turn_held"]
DEFAULT_PUBLIC_URL = "http://127.0.0.1:8000"
DEFAULT_LINK_TTL_S = 24 * 3600
DELIVERY_TIMEOUT_S = 10.0
STANDARD_SECRET_PREFIX = "whsec_"
SLACK_TEXT_CHARS = 1000  # of one outside text (a question, an answer, an error) in a message
SLACK_CODE_CHARS = 500  # of a tool's name or its args


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
        for hook in parsed.webhooks:
            if hook.secret_env:
                signing_key(env[hook.secret_env], hook.secret_env)
        return cls(parsed.webhooks, env.get("AGENT_PUBLIC_URL") or DEFAULT_PUBLIC_URL,
                   link_ttl_s)

    def refs(self) -> list[WebhookRef]:
        """What a conversation knows of them: enough to choose and to name, nothing secret."""
        return [WebhookRef(index=i, host=h.host, events=list(h.events))
                for i, h in enumerate(self.hooks)]


# ----- one-time links (`rules.links`) -----

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
    # an approval's links approve or reject it; an MCP server's question's says no to it
    actions = {"approval_requested": ("approve", "reject"), "question_asked": ("decline",)}
    if secret and call_id and args_hash and request.event in actions:
        expires = int(time.time()) + webhooks.link_ttl_s
        for action in actions[request.event]:
            token = sign_link(secret, LinkClaims(c=conversation, k=call_id, h=args_hash,
                                                 a=action, x=expires, n=request.key,
                                                 t=request.ticket, to=hook.addressee))
            payload[f"{action}_url"] = f"{webhooks.public_url}/links/{token}"
    if hook.format == "slack":
        return {"text": slack_text(payload)}
    return payload


def slack_text(p: dict[str, Any]) -> str:
    """The message in Slack's mrkdwn. The model, a tool or a person wrote everything in it but
    our own links, so all the rest is escaped and clipped: it can make no link, no
    mention, no fake Approve."""
    where = _slack_link(p["console_url"], p["conversation_id"])
    if p["event"] == "approval_requested":
        args = json.dumps(p.get("args"), ensure_ascii=False)
        text = (f"{where} waits for approval: {_slack_code(p.get('tool'))} "
                f"({_slack_plain(p.get('risk'))}) {_slack_code(args)}")
        if p.get("approve_url"):
            text += (f"\n{_slack_link(p['approve_url'], 'Approve')} · "
                     f"{_slack_link(p['reject_url'], 'Reject')}")
        return text
    if p["event"] == "question_asked":
        text = f"{where} asks: {_slack_plain(p.get('question'))}"
        if p.get("server"):
            text += f" (for {_slack_code(p['server'])}'s {_slack_code(p.get('tool'))})"
        if p.get("decline_url"):
            text += (f"\n{_slack_link(p['console_url'], 'Answer in the console')} · "
                     f"{_slack_link(p['decline_url'], 'Decline')}")
        return text
    turn = _slack_plain(p.get("turn"))
    if p["event"] == "conversation_failed":
        return f"{where} failed in turn {turn}: {_slack_plain(p.get('error'))}"
    if p["event"] == "turn_held":
        return f"{where} waits in turn {turn}: {_slack_plain(p.get('message'))}"
    return f"{where} finished turn {turn}: {_slack_plain(p.get('answer') or p.get('stop_reason'))}"


def _slack_escaped(text: str) -> str:
    """Slack's three control characters as the entities it shows as text."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _slack_plain(value: object, limit: int = SLACK_TEXT_CHARS) -> str:
    text = str(value)
    return _slack_escaped(text if len(text) <= limit else text[:limit - 1] + "…")


def _slack_code(value: object) -> str:
    """An inline code span its text cannot close: a backtick becomes a look-alike (ˋ), a line
    break a space."""
    text = str(value).replace("`", "ˋ").replace("\r", " ").replace("\n", " ")
    return f"`{_slack_plain(text, SLACK_CODE_CHARS)}`"


def _slack_link(url: str, label: str) -> str:
    """One of our links; a `|` would end its URL early."""
    return f"<{_slack_escaped(url.replace('|', '%7C'))}|{_slack_plain(label, 200)}>"


def signing_key(secret: str, name: str = "the secret") -> bytes:
    """The Standard Webhooks HMAC key of a webhook's secret (`name`: its variable, for the
    error): base64 after a `whsec_` prefix, else the secret's UTF-8 bytes."""
    if not secret.startswith(STANDARD_SECRET_PREFIX):
        return secret.encode()
    encoded = secret.removeprefix(STANDARD_SECRET_PREFIX)
    try:
        key = base64.b64decode(encoded + "=" * (-len(encoded) % 4), validate=True)
    except binascii.Error:
        key = b""
    if not key:
        raise WebhooksError(f"{name} starts with {STANDARD_SECRET_PREFIX} but is not base64 "
                            f"after it")
    return key


def signatures(secret: str, delivery: str, timestamp: str, body: bytes) -> dict[str, str]:
    """The contract's signature of the body, and the Standard Webhooks one of the delivery's
    id, this attempt's time and the body."""
    signed = f"{delivery}.{timestamp}.".encode() + body
    standard = hmac.new(signing_key(secret), signed, hashlib.sha256).digest()
    return {"X-Agent-Signature": "sha256=" + hmac.new(secret.encode(), body,
                                                      hashlib.sha256).hexdigest(),
            "webhook-signature": "v1," + base64.b64encode(standard).decode()}


class WebhookActivities:
    def __init__(self, webhooks: Webhooks | None, http: httpx.AsyncClient,
                 env: Mapping[str, str] = os.environ, push_store: str | None = None) -> None:
        self._webhooks = webhooks
        self._http = http
        self._env = env
        self._push_store = push_store  # where A2A push configs are kept (the memory store)

    @activity.defn(name=NOTIFY_ACTIVITY)
    async def notify(self, request: NotifyRequest) -> int:
        """Deliver one event to one webhook; the HTTP status. A refusal (4xx but 408/429) is
        final; anything else is retried by Temporal's policy, with the same delivery key and
        `webhook-id`, and a `webhook-timestamp` (and so a signature) of its own. An A2A
        client's push config (`request.push`) is delivered to as `activities.a2a_push` says."""
        if request.push is not None:
            found = await push_delivery(self._push_store, request)
            if found is None:
                return 0  # the client removed it since
            return await self._post(request, request.host, *found)
        if self._webhooks is None or request.webhook >= len(self._webhooks.hooks):
            raise ApplicationError(f"this worker has no webhook {request.webhook}",
                                   type="UnknownWebhook", non_retryable=True)
        hook = self._webhooks.hooks[request.webhook]
        secret = self._env.get(hook.secret_env) if hook.secret_env else None
        body = json.dumps(body_of(hook, request, self._webhooks, link_secret(self._env)),
                          ensure_ascii=False, separators=(",", ":")).encode()
        headers = {"Content-Type": "application/json", "X-Agent-Delivery": request.key,
                   "X-Agent-Event": request.event, "webhook-id": request.key,
                   "webhook-timestamp": str(int(time.time()))}
        if secret:
            try:
                headers |= signatures(secret, request.key, headers["webhook-timestamp"], body)
            except WebhooksError as err:
                raise ApplicationError(f"{hook.secret_env}: {err}", type="BadWebhookSecret",
                                       non_retryable=True) from None
        return await self._post(request, hook.host, hook.url, body, headers)

    async def _post(self, request: NotifyRequest, host: str, url: str, body: bytes,
                    headers: dict[str, str]) -> int:
        """POST one delivery; the HTTP status. A refusal (4xx but 408/429) is final; anything
        else is for Temporal's policy to retry."""
        try:
            response = await heartbeating(self._http.post(url, content=body, headers=headers,
                                                          timeout=DELIVERY_TIMEOUT_S))
        except httpx.HTTPError as err:
            raise ApplicationError(f"{host} unreachable: {type(err).__name__}",
                                   type="WebhookUnreachable") from None
        status = response.status_code
        log.info("webhook delivered" if status < 300 else "webhook refused", kind=request.event,
                 host=host, status=status, key=request.key, push=request.push,
                 attempt=activity.info().attempt)
        if status >= 300:
            final = 400 <= status < 500 and status not in (408, 429)
            raise ApplicationError(f"{host} answered {status}", type="WebhookRefused",
                                   non_retryable=final)
        return status
