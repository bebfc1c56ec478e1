"""The HTTP API and the web console: the client layer (`client.session`) over HTTP.

Every decision goes through the conversation's Update twins, so a refusal is a 409 with the
conversation's reason and the state is untouched. The approver of a decision is the authenticated
principal (the token's name), never a name from the request body.
"""

from __future__ import annotations

import hmac
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Annotated, Any

import structlog
from ag_ui.core import RunAgentInput
from ag_ui.encoder import EventEncoder
from fastapi import Depends, FastAPI, Header, HTTPException, Query, Request, status
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import FileResponse, JSONResponse, StreamingResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from fastapi.sse import EventSourceResponse, ServerSentEvent
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel, ConfigDict, Field
from temporalio.client import Client
from temporalio.service import RPCError

from api.agui import run_agui
from api.settings import ANONYMOUS, ApiSettings
from client.connection import TemporalSettings, connect
from client.session import (
    CliError,
    ConversationRow,
    NotFound,
    NoWorker,
    Refused,
    Session,
    UsageError,
    new_conversation_id,
    targets,
)
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
from workflows.rules.bounds import check_message

log = structlog.get_logger("api")
STATIC = Path(__file__).parent / "static"


# ----- bodies -----

class Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class StartBody(Body):
    prompt: str = Field(description="the first message")
    id: str | None = Field(default=None, min_length=1, max_length=200, pattern=r"^[^\s/?#]+$",
                           description="the conversation id; the same id makes the call "
                                       "idempotent (default: a fresh one)")
    one_shot: bool = Field(default=False, description="complete after the first answer")
    model: str | None = Field(default=None, description="default: the worker's OPENAI_MODEL")
    max_steps: int = Field(default=10, ge=1, description="LLM rounds per turn")
    max_cost_usd: float | None = Field(default=None, gt=0,
                                       description="stop a turn once the conversation has cost "
                                                   "this many dollars")
    system_prompt: str | None = None


class MessageBody(Body):
    text: str = Field(description="the next user message")


class Targets(Body):
    call_ids: list[str] = Field(default=[], description="the pending calls to decide, by ref "
                                "(a call id, or a subagent's `call_0/call_0`)")
    all: bool = Field(default=False, description="every call waiting for a decision")
    seen: dict[str, str] = Field(default={}, description="call ref -> the `args_hash` of the "
                                 "arguments shown to the human: other arguments are refused")

    def targets(self) -> tuple[list[str], bool]:
        return targets(self.call_ids, self.all, "all")


class ConfirmBody(Targets):
    args: dict[str, Any] | None = Field(default=None,
                                        description="edited arguments, for a single call")


class RejectBody(Targets):
    reason: str = Field(default="", description="why; the model reads it")


class AnswerBody(Body):
    values: list[str] = Field(min_length=1, description="text, one option, several, or yes/no")


class EndBody(Body):
    pass


class ConsoleConfig(BaseModel):
    principal: str
    auth_required: bool
    temporal_ui: str
    namespace: str


# ----- who is asking, and the client layer for the request -----

bearer = HTTPBearer(auto_error=False, description="a token of AGENT_API_TOKENS")


def principal(request: Request, credentials: Annotated[HTTPAuthorizationCredentials | None,
                                                        Depends(bearer)]) -> str:
    """The token's name; without AGENT_API_TOKENS (loopback only), `anonymous`."""
    settings: ApiSettings = request.app.state.settings
    if not settings.auth_required:
        return ANONYMOUS
    if credentials is None:
        raise HTTPException(status.HTTP_401_UNAUTHORIZED, "a bearer token is required",
                            headers={"WWW-Authenticate": "Bearer"})
    given = credentials.credentials.encode()
    for token, name in settings.tokens.items():
        if hmac.compare_digest(given, token.encode()):
            return name
    raise HTTPException(status.HTTP_401_UNAUTHORIZED, "unknown token",
                        headers={"WWW-Authenticate": "Bearer"})


Principal = Annotated[str, Depends(principal)]


def session(request: Request) -> Session:
    state = request.app.state
    return Session(state.client, state.temporal, state.settings.timeout_s)


Conversations = Annotated[Session, Depends(session)]


async def known(cid: str, s: Conversations, _: Principal) -> str:
    """The conversation's id, once it is known to exist (a 404 before any stream starts)."""
    await s.status(cid)
    return cid


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
                    "through the workflow's Update twins; a refusal is a 409 and changes nothing.",
        lifespan=lifespan,
        max_body_size=settings.max_body_bytes,
    )
    app.state.settings, app.state.temporal = settings, temporal
    if settings.cors_origins:
        app.add_middleware(CORSMiddleware, allow_origins=list(settings.cors_origins),
                           allow_methods=["GET", "POST"],
                           allow_headers=["Authorization", "Content-Type", "Last-Event-ID"])

    @app.middleware("http")
    async def same_origin_only(request: Request, call_next: Any) -> Any:
        """A browser's cross-site request is refused unless its origin is configured: without
        tokens, a page elsewhere could otherwise approve writes through the user's browser."""
        origin = request.headers.get("origin")
        if origin and origin.rstrip("/") not in allowed_origins(request):
            return JSONResponse({"detail": f"origin {origin} is not allowed "
                                           "(AGENT_API_CORS_ORIGINS)"}, status_code=403)
        response = await call_next(request)
        if request.url.path == "/" or request.url.path.startswith("/static/"):
            # Not framed by another site (a click-jacked Approve), never an old console.js.
            response.headers["Content-Security-Policy"] = "frame-ancestors 'none'"
            response.headers["X-Frame-Options"] = "DENY"
            response.headers["Cache-Control"] = "no-cache"
        response.headers["X-Content-Type-Options"] = "nosniff"
        return response

    def allowed_origins(request: Request) -> set[str]:
        host = request.headers.get("host", "")
        return {f"http://{host}", f"https://{host}", *settings.cors_origins}

    for error, code in ((NotFound, 404), (NoWorker, 503), (Refused, 409), (UsageError, 422),
                        (CliError, 409)):
        app.add_exception_handler(error, _answer(code))

    @app.exception_handler(RPCError)
    async def temporal_refused(request: Request, err: RPCError) -> JSONResponse:
        return JSONResponse({"detail": f"Temporal refused the request: {err.message}"}, 502)

    @app.exception_handler(RequestValidationError)
    async def malformed(request: Request, err: RequestValidationError) -> JSONResponse:
        errors = err.errors()
        bad_json = next((e for e in errors if e.get("type") == "json_invalid"), None)
        if bad_json is not None:
            why = (bad_json.get("ctx") or {}).get("error", "")
            return JSONResponse({"detail": f"the body is not valid JSON: {why}".rstrip(": ")},
                                422)
        return JSONResponse({"detail": [
            {"loc": e.get("loc"), "msg": e.get("msg"), "type": e.get("type")} for e in errors
        ]}, 422)

    # ----- conversations -----

    @app.post("/conversations", status_code=201, response_model=ConversationStatus,
              tags=["conversations"], responses={200: {"description": "it already existed"}})
    async def start(body: StartBody, s: Conversations, _: Principal) -> Any:
        """Start a conversation (201). With an `id` already in use, nothing new starts: the
        answer is that conversation's status (200)."""
        reason = check_message(body.prompt, s.max_message_bytes)
        if reason is not None:
            raise UsageError(reason)
        cid = body.id or new_conversation_id()
        inp = ConversationInput(prompt=body.prompt, system_prompt=body.system_prompt,
                                model=body.model, max_steps=body.max_steps,
                                one_shot=body.one_shot, max_message_bytes=s.max_message_bytes,
                                max_cost_usd=body.max_cost_usd)
        started = await s.start(inp, cid, source="the HTTP API", existing_ok=True)
        current = await s.status(cid)
        return current if started else JSONResponse(current.model_dump(mode="json"), 200)

    @app.get("/conversations", response_model=list[ConversationRow], tags=["conversations"])
    async def conversations(s: Conversations, _: Principal,
                            status: Status | None = None,
                            limit: Annotated[int, Query(ge=1, le=1000)] = 100) -> Any:
        """Conversations, newest first, optionally those in one status."""
        return await s.conversations(status, limit)

    @app.get("/conversations/{cid}", response_model=ConversationStatus, tags=["conversations"])
    async def conversation(cid: str, s: Conversations, _: Principal) -> Any:
        """The status, with the keys of `python -m client status --json`."""
        return await s.status(cid)

    @app.get("/conversations/{cid}/history", response_model=list[AuditRecord],
             tags=["conversations"])
    async def history(cid: str, s: Conversations, _: Principal) -> Any:
        """The audit trail: a record per step, with who decided what."""
        return await s.history(cid)

    @app.get("/conversations/{cid}/schemas", response_model=dict[str, dict[str, Any]],
             tags=["conversations"])
    async def schemas(cid: str, s: Conversations, _: Principal) -> Any:
        """The JSON Schema of each pending call's arguments, by call id: edited args are checked
        against it (and again by the conversation)."""
        return await s.pending_schemas(cid)

    # ----- a human's input -----

    @app.post("/conversations/{cid}/messages", response_model=SignalOutcome, tags=["input"],
              responses={409: {"description": "refused: the reason"}})
    async def say(cid: str, body: MessageBody, s: Conversations, _: Principal) -> Any:
        """The next user message; the outcome names the turn that will answer it."""
        return await s.update(cid, SayRequest(text=body.text, request_id=_request_id()))

    @app.post("/conversations/{cid}/confirm", response_model=SignalOutcome, tags=["input"],
              responses={409: {"description": "refused: the reason"}})
    async def confirm(cid: str, body: ConfirmBody, s: Conversations, who: Principal) -> Any:
        """Approve pending call(s), optionally one with edited args. The approver recorded is
        the token's name."""
        call_ids, all_ = body.targets()
        return await s.decide(cid, ConfirmRequest(request_id=_request_id(), call_ids=call_ids,
                                                  all=all_, args=body.args, approver=who,
                                                  seen=body.seen), by_update=True)

    @app.post("/conversations/{cid}/reject", response_model=SignalOutcome, tags=["input"],
              responses={409: {"description": "refused: the reason"}})
    async def reject(cid: str, body: RejectBody, s: Conversations, who: Principal) -> Any:
        """Reject pending call(s); the model reads `rejected by user: <reason>`."""
        call_ids, all_ = body.targets()
        return await s.decide(cid, RejectRequest(request_id=_request_id(), call_ids=call_ids,
                                                 all=all_, reason=body.reason, approver=who,
                                                 seen=body.seen), by_update=True)

    @app.post("/conversations/{cid}/answer", response_model=SignalOutcome, tags=["input"],
              responses={409: {"description": "refused: the reason"}})
    async def answer(cid: str, body: AnswerBody, s: Conversations, _: Principal) -> Any:
        """Answer the pending question."""
        return await s.decide(cid, AnswerRequest(request_id=_request_id(), values=body.values),
                              by_update=True)

    @app.post("/conversations/{cid}/end", response_model=SignalOutcome, tags=["input"])
    async def end(cid: str, s: Conversations, _: Principal, body: EndBody | None = None) -> Any:
        """End the conversation: work in flight is cancelled, stop_reason=ended."""
        request_id = _request_id()
        outcome = await s.end(cid, request_id)
        if outcome is None:
            raise Refused(f"conversation {cid} finished before it took the end")
        return outcome

    # ----- streams -----

    @app.get("/conversations/{cid}/events", response_class=EventSourceResponse, tags=["streams"])
    async def events(cid: Annotated[str, Depends(known)], s: Conversations,
                     offset: Annotated[int, Depends(start_offset)]
                     ) -> AsyncIterator[ServerSentEvent]:
        """The conversation's durable events as SSE: `id` is the stream offset, `event` the
        kind, `data` the event's JSON. Resumes after `Last-Event-ID` (or from `from_offset`),
        follows continue-as-new, and ends with an `end` event when the conversation completes."""
        async for item in s.follow(cid, offset):
            yield ServerSentEvent(id=str(item.offset), event=item.data.kind,
                                  data=item.data.model_dump(mode="json", exclude_none=True))
        yield ServerSentEvent(event="end", data={"workflow_id": cid})

    @app.post("/agui", tags=["streams"], response_class=StreamingResponse,
              responses={200: {"content": {"text/event-stream": {}},
                               "description": "AG-UI events"}})
    async def agui(body: RunAgentInput, s: Conversations, who: Principal) -> StreamingResponse:
        """An AG-UI run (`threadId` is the conversation id): starts or continues the
        conversation, streams the turn, and ends in an answer or an interrupt. `resume` entries
        answer the interrupts of the previous run."""
        encoder = EventEncoder()

        async def encoded() -> AsyncIterator[str]:
            async for event in run_agui(s, body, who):
                yield encoder.encode(event)

        return StreamingResponse(encoded(), media_type=encoder.get_content_type())

    # ----- the console -----

    @app.get("/config", response_model=ConsoleConfig, tags=["console"])
    async def config(who: Principal) -> Any:
        """Who you are, and where the Temporal UI is."""
        return ConsoleConfig(principal=who, auth_required=settings.auth_required,
                             temporal_ui=settings.temporal_ui, namespace=temporal.namespace)

    @app.get("/", include_in_schema=False)
    async def console() -> FileResponse:
        return FileResponse(STATIC / "index.html")

    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    return app


def _answer(code: int) -> Any:
    async def handler(request: Request, err: Exception) -> JSONResponse:
        return JSONResponse({"detail": str(err)}, status_code=code)
    return handler


def _request_id() -> str:
    return uuid.uuid4().hex


def start_offset(from_offset: Annotated[int | None, Query(ge=0)] = None,
                 last_event_id: Annotated[str | None, Header()] = None) -> int:
    """Where a stream starts: `from_offset`, else after the last event a client saw
    (`Last-Event-ID`), else 0."""
    if from_offset is not None:
        return from_offset
    if last_event_id is None:
        return 0
    try:
        return max(int(last_event_id) + 1, 0)
    except ValueError:
        raise UsageError(f"Last-Event-ID must be a stream offset, not {last_event_id!r}") from None
