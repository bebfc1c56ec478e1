"""The HTTP API and the web console: the client layer (`client.session`) over HTTP.

Every decision goes through the conversation's Update twins, so a refusal is a 409 with the
conversation's reason and the state is untouched. The approver of a decision is the authenticated
principal (the token's name), never a name from the request body. Who may call is decided by
`api.guard`, what a body may hold by `api.bodies`, and how a failure is answered by `api.errors`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import aclosing, asynccontextmanager
from pathlib import Path as FilePath
from typing import Annotated, Any

import structlog
from ag_ui.core import RunAgentInput
from ag_ui.encoder import EventEncoder
from fastapi import Depends, FastAPI, Header, Path, Query, Request
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import FileResponse, JSONResponse, StreamingResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from fastapi.sse import EventSourceResponse, ServerSentEvent
from fastapi.staticfiles import StaticFiles
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from pydantic import BaseModel, WithJsonSchema
from temporalio.client import Client

from api.access import ROLES, Action, Forbidden, Principal, Role, Verdict
from api.agui import run_agui
from api.bodies import (
    AnswerBody,
    ConfirmBody,
    EndBody,
    MessageBody,
    RejectBody,
    StartBody,
    StrictJsonRoute,
)
from api.errors import (
    RequestIds,
    add_error_handlers,
    document_discriminators,
    document_errors,
    errors,
    request_id,
)
from api.guard import BodyLimit, Gate
from api.links import link_routes
from api.settings import ApiSettings
from client.connection import TemporalSettings, connect
from client.session import (
    ConversationRow,
    NotFound,
    Refused,
    Session,
    UsageError,
    budget_of,
    new_conversation_id,
    unsendable,
)
from client.tree import follow_tree
from workflows.models import (
    AnswerRequest,
    AuditRecord,
    ConfirmRequest,
    ConversationInput,
    ConversationStatus,
    RejectRequest,
    SayRequest,
    SignalOutcome,
    Status,
)

log = structlog.get_logger("api")
STATIC = FilePath(__file__).parent / "static"
W3C_TRACE_CONTEXT = TraceContextTextMapPropagator()


class ConsoleConfig(BaseModel):
    principal: str
    roles: list[Role]
    may_start: bool  # start conversations
    sees_all: bool  # read (and list) every conversation, not only one's own
    decides_all: bool  # decide every conversation's calls, not only one's own
    writes_all: bool  # message and end every conversation (an admin)
    auth_required: bool
    temporal_ui: str
    namespace: str
    trace_url: str | None = None  # a trace viewer's URL, {trace_id} standing for the id


# ----- who is asking, and the client layer for the request -----

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


# The routes of a conversation, linked from its start for clients (and schemathesis) to follow.
OF_A_CONVERSATION = ("conversation", "history", "schemas", "events", "say", "confirm", "reject",
                     "answer", "end")
LINKS = {name: {"operationId": name, "parameters": {"cid": "$response.body#/workflow_id"}}
         for name in OF_A_CONVERSATION}


# ----- the app -----

def create_app(settings: ApiSettings, temporal: TemporalSettings,
               client: Client | None = None) -> FastAPI:
    """The API. Without `client`, it connects to Temporal at start-up."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        app.state.client = client or await connect(temporal)
        log.info("api_ready", temporal=temporal.address, task_queue=temporal.task_queue,
                 auth=settings.auth_required)
        yield

    app = FastAPI(
        title="Durable ReAct agent",
        description="Conversations are Temporal workflows. Approvals, answers and messages go "
                    "through the workflow's Update twins; a refusal is a 409 and changes nothing. "
                    "Every response carries an X-Request-ID header.",
        lifespan=lifespan,
        responses=errors(401, 403),
        generate_unique_id_function=lambda route: route.name,
        redirect_slashes=False,  # an odd path (`/conversations/%2F`) is a 404, not a redirect
    )
    app.router.route_class = StrictJsonRoute
    app.state.settings, app.state.temporal = settings, temporal
    # The last added runs first: request ids around everything, then who may call, the body's
    # size, and CORS.
    if settings.cors_origins:
        app.add_middleware(CORSMiddleware, allow_origins=list(settings.cors_origins),
                           allow_methods=["GET", "POST"],
                           allow_headers=["Authorization", "Content-Type", "Last-Event-ID"],
                           expose_headers=["X-Request-ID"])
    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes)
    app.add_middleware(Gate, settings=settings)
    app.add_middleware(RequestIds)
    add_error_handlers(app)
    document_errors(app)
    document_discriminators(app)

    # ----- conversations -----

    @app.post("/conversations", status_code=201, response_model=ConversationStatus,
              tags=["conversations"],
              responses={201: {"links": LINKS},
                         200: {"model": ConversationStatus, "links": LINKS,
                               "description": "it already existed"},
                         **errors(413, 502, 503)})
    async def start(body: StartBody, s: Conversations, who: Who, request: Request) -> Any:
        """Start a conversation (201), owned by the token's name. With an `id` already in use,
        nothing new starts: the answer is that conversation's status (200), or, if it is not
        the caller's to read, a 409. A W3C `traceparent` header makes the first turn's trace
        a continuation of the caller's."""
        if not who.may_start:
            raise Forbidden(f"{who.describe()} may not start conversations")
        cid = body.id or new_conversation_id()
        inp = ConversationInput(prompt=body.prompt, system_prompt=body.system_prompt,
                                model=body.model, max_steps=body.max_steps,
                                one_shot=body.one_shot, max_message_bytes=s.max_message_bytes,
                                max_cost_usd=body.max_cost_usd, output_schema=body.output_schema,
                                owner=who.name, trace_parent=caller_trace(request),
                                **budget_of(body.context_budget_tokens))
        started = await s.start(inp, cid, source="the HTTP API", existing_ok=True)
        if not started and who.may("read", await s.owner(cid)) is not Verdict.ALLOWED:
            raise Refused(f"the id {cid} is in use")
        current = await s.status(cid)
        return current if started else JSONResponse(current.model_dump(mode="json"), 200)

    @app.get("/conversations", response_model=list[ConversationRow], tags=["conversations"],
             responses=errors(502))
    async def conversations(s: Conversations, who: Who,
                            status: Status | None = None,
                            limit: Annotated[int, Query(ge=1, le=1000)] = 100) -> Any:
        """Conversations, newest first, optionally those in one status; for a `user`, those
        they started."""
        return await s.conversations(status, limit, owner=None if who.sees_all else who.name)

    read = errors(404, 502, 503)

    @app.get("/conversations/{cid}", response_model=ConversationStatus, tags=["conversations"],
             responses=read)
    async def conversation(cid: Cid, s: Conversations, _: Annotated[None, allowed("read")]
                          ) -> Any:
        """The status, with the keys of `python -m client status --json`."""
        return await s.status(cid)

    @app.get("/conversations/{cid}/history", response_model=list[AuditRecord],
             tags=["conversations"], responses=read)
    async def history(cid: Cid, s: Conversations, _: Annotated[None, allowed("read")]
                     ) -> Any:
        """The audit trail: a record per step, with who decided what."""
        return await s.history(cid)

    @app.get("/conversations/{cid}/schemas", response_model=dict[str, dict[str, Any]],
             tags=["conversations"], responses=read)
    async def schemas(cid: Cid, s: Conversations, _: Annotated[None, allowed("read")]
                     ) -> Any:
        """The JSON Schema of each pending call's arguments, by call id: edited args are checked
        against it (and again by the conversation)."""
        return await s.pending_schemas(cid)

    # ----- a human's input -----

    given = errors(404, 409, 413, 502, 503)

    @app.post("/conversations/{cid}/messages", response_model=SignalOutcome, tags=["input"],
              responses=given)
    async def say(cid: Cid, body: MessageBody, s: Conversations, who: Who,
                  _: Annotated[None, allowed("message")], rid: RequestId) -> Any:
        """The next user message; the outcome names the turn that will answer it."""
        return await s.update(cid, SayRequest(text=body.text, request_id=rid, sender=who.name))

    @app.post("/conversations/{cid}/confirm", response_model=SignalOutcome, tags=["input"],
              responses=given)
    async def confirm(cid: Cid, body: ConfirmBody, s: Conversations, who: Who,
                      _: Annotated[None, allowed("decide")], rid: RequestId,
                      request: Request) -> Any:
        """Approve pending call(s), optionally one with edited args. The approver recorded is
        the token's name. Under four eyes (AGENT_FOUR_EYES), a call of those risks is refused
        (409) to the conversation's owner."""
        return await s.decide(cid, ConfirmRequest(request_id=rid, call_ids=body.call_ids,
                                                  all=body.all, args=body.args,
                                                  approver=who.name, seen=body.seen,
                                                  trace_parent=caller_trace(request)),
                              by_update=True)

    @app.post("/conversations/{cid}/reject", response_model=SignalOutcome, tags=["input"],
              responses=given)
    async def reject(cid: Cid, body: RejectBody, s: Conversations, who: Who,
                     _: Annotated[None, allowed("decide")], rid: RequestId,
                     request: Request) -> Any:
        """Reject pending call(s); the model reads `rejected by user: <reason>`."""
        return await s.decide(cid, RejectRequest(request_id=rid, call_ids=body.call_ids,
                                                 all=body.all, reason=body.reason,
                                                 approver=who.name, seen=body.seen,
                                                 trace_parent=caller_trace(request)),
                              by_update=True)

    @app.post("/conversations/{cid}/answer", response_model=SignalOutcome, tags=["input"],
              responses=given)
    async def answer(cid: Cid, body: AnswerBody, s: Conversations, who: Who,
                     _: Annotated[None, allowed("decide")], rid: RequestId) -> Any:
        """Answer the pending question: the one `call_id` names (its ref, as the status shows
        it), refused (409) if another question is open by then."""
        return await s.decide(cid, AnswerRequest(request_id=rid, values=body.values,
                                                 call_id=body.call_id, sender=who.name),
                              by_update=True)

    @app.post("/conversations/{cid}/end", response_model=SignalOutcome, tags=["input"],
              responses=given)
    async def end(cid: Cid, s: Conversations, who: Who, _: Annotated[None, allowed("end")],
                  rid: RequestId, body: EndBody | None = None) -> Any:
        """End the conversation: work in flight is cancelled, stop_reason=ended."""
        outcome = await s.end(cid, rid, sender=who.name)
        if outcome is None:
            raise Refused(f"conversation {cid} finished before it took the end")
        return outcome

    # ----- streams -----

    @app.get("/conversations/{cid}/events", response_class=EventSourceResponse, tags=["streams"],
             responses=read)
    async def events(cid: Cid, s: Conversations, offset: Annotated[int, Depends(stream_start)]
                     ) -> AsyncIterator[ServerSentEvent]:
        """The conversation's durable events as SSE: `id` is the stream offset, `event` the
        kind, `data` the event's JSON. Starts at `from_offset`, else after `Last-Event-ID`,
        else at 0; an offset past the end starts at the end. Follows continue-as-new; while
        nothing happens, a `: ping` comment every 15 s; ends with an `end` event when the
        conversation completes (at once, if it has and nothing is left to send).

        A subagent's events come inline, from its first, after the `child_started` that
        announces it (at any depth): they have no `id` (they never move the resume point), and
        their `data` adds `agent` (its profile path from here: `researcher`, or
        `researcher/writer` for a grandchild) and `conversation_id` (its own id). A stream
        resumed after a subagent's `child_started` does not send that subagent's events, even
        those still to come; one that starts at or before it sends them all again. The `end`
        comes once the subagents' streams have ended too (they end with the conversation)."""
        # The stream is open at once, whatever the first read costs (a finished conversation's
        # is a replay on a worker): a client never waits on a response that has not begun.
        yield ServerSentEvent(comment="open")
        async with aclosing(follow_tree(s.client, cid, offset)) as tree:
            async for agent, owner, event, at in tree:
                data = event.model_dump(mode="json", exclude_none=True)
                if agent is None:
                    yield ServerSentEvent(id=str(at), event=event.kind, data=data)
                else:
                    yield ServerSentEvent(event=event.kind, data={
                        **data, "agent": agent, "conversation_id": owner})
        yield ServerSentEvent(event="end", data={"workflow_id": cid})

    @app.post("/agui", tags=["streams"], response_class=StreamingResponse,
              responses={200: {"content": {"text/event-stream": {}},
                               "description": "AG-UI events"}, **errors(413)})
    async def agui(body: RunAgentInput, s: Conversations, who: Who,
                   request: Request) -> StreamingResponse:
        """An AG-UI run (`threadId` is the conversation id): starts or continues the
        conversation, streams the turn, and ends in an answer or an interrupt. `resume` entries
        answer the interrupts of the previous run. A thread is the conversation: another
        user's answers 404; a run that resumes decides, any other sends a message."""
        # every event names the thread and the run: ids that no event can carry are a 422 now,
        # not a stream that breaks after its 200
        if (reason := unsendable([body.thread_id, body.run_id])) is not None:
            raise UsageError(f"threadId and runId: {reason}")
        try:
            owner = await s.owner(body.thread_id)
        except NotFound:  # a new thread (or a bad id, which the run refuses)
            if not who.may_start and not body.resume:
                raise Forbidden(f"{who.describe()} may not start conversations") from None
        else:
            enforce(who, "decide" if body.resume else "message", body.thread_id, owner)
        encoder = EventEncoder()

        async def encoded() -> AsyncIterator[str]:
            async for event in run_agui(s, body, who, caller_trace(request)):
                yield encoder.encode(event)

        return StreamingResponse(encoded(), media_type=encoder.get_content_type())

    # ----- the console -----

    @app.get("/config", response_model=ConsoleConfig, tags=["console"])
    async def config(who: Who) -> Any:
        """Who you are, what your roles let you do, and where the Temporal UI is."""
        return ConsoleConfig(principal=who.name, roles=[r for r in ROLES if r in who.roles],
                             may_start=who.may_start, sees_all=who.sees_all,
                             decides_all=who.may("decide", None) is Verdict.ALLOWED,
                             writes_all=who.may("message", None) is Verdict.ALLOWED,
                             auth_required=settings.auth_required,
                             temporal_ui=settings.temporal_ui, namespace=temporal.namespace,
                             trace_url=settings.trace_url)

    app.include_router(link_routes(
        settings.link_secret, settings.tokens,
        lambda: Session(app.state.client, temporal, settings.timeout_s)))

    @app.get("/", include_in_schema=False)
    async def console() -> FileResponse:
        return FileResponse(STATIC / "index.html")

    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    return app
