"""What every route depends on: who is asking (`api.guard` let them in), the client layer for the
request (`client.session`), whether the principal may do an action to a conversation, the
caller's trace, and where a stream starts."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Depends, Header, Path, Query, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from pydantic import WithJsonSchema

from ..client.checks import NotFound
from ..client.session import Session
from .access import Action, Forbidden, Principal, Verdict
from .errors import request_id

W3C_TRACE_CONTEXT = TraceContextTextMapPropagator()

bearer = HTTPBearer(auto_error=False, description="a token of AGENT_API_TOKENS")


def principal(request: Request, _: Annotated[HTTPAuthorizationCredentials | None,
                                              Depends(bearer)]) -> Principal:
    """Whom `api.guard` let in: the token's name and roles; without AGENT_API_TOKENS,
    `anonymous`, an admin."""
    return request.state.principal


Who = Annotated[Principal, Depends(principal)]
# Temporal's own limit on a workflow id (a conversation started here has at most 200 characters)
Cid = Annotated[str, Path(max_length=1000, description="the conversation id")]
RequestId = Annotated[str, Depends(request_id)]


def session(request: Request) -> Session:
    state = request.app.state
    return Session(state.client, state.temporal, state.settings.timeout_s)


Conversations = Annotated[Session, Depends(session)]

DOING = {"read": "read", "message": "send messages to", "decide": "decide the calls of",
         "end": "end"}


async def check_access(action: Action, cid: str, s: Session, who: Principal) -> None:
    """404 for a conversation the principal may not see (its existence is not leaked), 403
    for what the principal may see but not do. The owner is looked up only when it matters."""
    owner = None
    if who.may(action, None) != who.may(action, who.name):
        owner = await s.owner(cid)
    enforce(who, action, cid, owner)


def enforce(who: Principal, action: Action, cid: str, owner: str | None) -> None:
    verdict = who.may(action, owner)
    if verdict is Verdict.HIDDEN:
        raise NotFound(f"no such conversation: {cid}")
    if verdict is Verdict.FORBIDDEN:
        raise Forbidden(f"{who.describe()} may not {DOING[action]} conversation {cid}: only "
                        "its owner" + (", an approver" if action == "decide" else "")
                        + " or an admin may")


def caller_trace(request: Request) -> str | None:
    """The caller's span (a W3C `traceparent` header), when it sent a valid one."""
    return canonical_traceparent(request.headers.get("traceparent"))


def canonical_traceparent(header: str | None) -> str | None:
    """The span a `traceparent` names, as OpenTelemetry's W3C propagator reads it and writes it
    again (`00-<trace id>-<span id>-<flags>`), or None: what the conversation keeps is never
    the caller's own text."""
    if not header:
        return None
    carrier: dict[str, str] = {}
    W3C_TRACE_CONTEXT.inject(carrier, W3C_TRACE_CONTEXT.extract({"traceparent": header}))
    return carrier.get("traceparent")


def allowed(action: Action) -> Any:
    """A route's dependency: the principal may do `action` to the conversation `cid`."""
    async def check(cid: Cid, s: Conversations, who: Who) -> None:
        await check_access(action, cid, s, who)
    return Depends(check)


# A stream offset, when given: not sending one is not sending `null`, so the schema has no null.
Offset = Annotated[int | None, WithJsonSchema({"type": "integer", "minimum": 0})]


def start_offset(
    from_offset: Annotated[Offset, Query(ge=0, description="the first offset to send")] = None,
    last_event_id: Annotated[Offset, Header(ge=0, description="the offset of the last event a "
                                                              "client saw")] = None,
) -> int:
    """Where a stream starts: `from_offset`, else after `Last-Event-ID`, else 0."""
    if from_offset is not None:
        return from_offset
    return 0 if last_event_id is None else last_event_id + 1


async def stream_start(cid: Cid, s: Conversations, _: Annotated[None, allowed("read")],
                       requested: Annotated[int, Depends(start_offset)]) -> int:
    """Where the stream starts, found before it does (so no such conversation is a 404): past
    the end, at the end. A poll past the end would wait for an offset the conversation may never
    reach, and hold one of the conversation's few in-flight Updates while it waits."""
    return min(requested, await s.stream_offset(cid))
