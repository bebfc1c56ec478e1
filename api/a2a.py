"""A2A 1.0 over `agent-api` (DESIGN "A2A"), through the official `a2a-sdk`: its agent card and
JSON-RPC and HTTP+JSON route factories on our app, and a request handler of ours in which a
context is a conversation and a task is one of its turns (`{conversation id}~{turn}`).

- `SendMessage` starts the conversation (the context id, else a fresh one) or sends it the next
  message; to a turn that waits on a question, the message is its answer. It answers once the
  turn settles: completed with the answer, `input-required` saying what waits for a person
  (the call, its arguments and risk, or the question), or at once with
  `configuration.return_immediately`. The message id is the request id: a message sent again
  is the same turn, never a second one.
- `SendStreamingMessage` follows the turn on the conversation's own stream (a status update at
  each tool, the answer as an artifact); `SubscribeToTask` follows it again after a lost
  connection. `GetTask` reads the turn from the conversation's status; `CancelTask` stops it;
  `ListTasks` lists a context's turns, or the caller's conversations' latest.
- Who may do what is the API's (`api.access`), from the same bearer tokens: a write waits for
  whoever the roles allow, through any channel.

Each agent profile (`AGENT_PROFILES`) is an agent of its own, under `/agents/NAME`: its card's
skills are its tools, and its conversations run as the profile. Push notifications are
`api.a2a_push`'s."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncGenerator, Mapping
from typing import Any

from a2a.server.context import ServerCallContext
from a2a.server.request_handlers.request_handler import RequestHandler
from a2a.server.routes import (
    create_agent_card_routes,
    create_jsonrpc_routes,
    create_rest_routes,
)
from a2a.server.routes.common import DefaultServerCallContextBuilder
from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    Artifact,
    CancelTaskRequest,
    DeleteTaskPushNotificationConfigRequest,
    GetTaskPushNotificationConfigRequest,
    GetTaskRequest,
    HTTPAuthSecurityScheme,
    ListTaskPushNotificationConfigsRequest,
    ListTaskPushNotificationConfigsResponse,
    ListTasksRequest,
    ListTasksResponse,
    Message,
    Part,
    Role,
    SecurityRequirement,
    SecurityScheme,
    SendMessageRequest,
    StringList,
    SubscribeToTaskRequest,
    Task,
    TaskArtifactUpdateEvent,
    TaskPushNotificationConfig,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
)
from a2a.utils.errors import (
    InvalidParamsError,
    InvalidRequestError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
)
from fastapi import FastAPI
from starlette.requests import Request
from starlette.routing import Route

from ..activities.a2a_push import TURN_MARK, approval_line, turn_task
from ..activities.profiles import AgentProfile
from ..client.checks import CliError, NotFound, Refused, UsageError, check_conversation_id
from ..client.session import Session
from ..contract import AnswerRequest, ConversationInput, ConversationStatus, SayRequest
from .a2a_push import PushConfigs
from .access import Forbidden, Principal
from .deps import check_access
from .guard import AGENT_CARD, AGENTS

A2A_PATH = "/a2a"  # the JSON-RPC binding, and the HTTP+JSON binding's base
OLD_TURN_MARK = "#"  # what task ids had before `TURN_MARK`: read too
MAX_LISTED, LISTED = 100, 20  # tasks in a ListTasks answer: at most, and unless asked
WAIT_S = 300.0  # how long a blocking SendMessage waits for its turn to settle
# where a turn's stream ends: it waits for a person, or it is over
PAUSED = frozenset({TaskState.TASK_STATE_INPUT_REQUIRED, TaskState.TASK_STATE_COMPLETED,
                    TaskState.TASK_STATE_CANCELED, TaskState.TASK_STATE_FAILED})


def agent_card(url: str, auth_required: bool, name: str | None = None,
               profile: AgentProfile | None = None, pushes: bool = True) -> AgentCard:
    """An agent's card (the default agent's, or a profile's): both bindings at `url`,
    bearer tokens when the API has them, push notifications where it keeps their configs (the
    memory store), and its skills: a profile's tools, each by name."""
    schemes, required = {}, []
    if auth_required:
        schemes = {"bearer": SecurityScheme(http_auth_security_scheme=HTTPAuthSecurityScheme(
            scheme="bearer", description="a token of AGENT_API_TOKENS; its roles apply"))}
        required = [SecurityRequirement(schemes={"bearer": StringList()})]
    skills = [AgentSkill(
        id="converse", name="Converse, with tools",
        description="Answers with its tools (the worker's); a write or a question waits for a "
                    "person: the task is input-required until then.",
        tags=["tools", "approvals"], examples=["What's the weather in Paris?"])]
    if profile is not None:
        skills = [AgentSkill(id=tool, name=tool, tags=["tool"],
                             description=f"{name} uses {tool}; a write waits for a person")
                  for tool in profile.tools] or skills
    return AgentCard(
        name=f"durable-react-agent/{name}" if name else "durable-react-agent",
        description=profile.description if profile is not None else (
            "A ReAct agent whose every conversation is a Temporal workflow: it survives "
            "crashes, and a write waits for a person's approval."),
        supported_interfaces=[AgentInterface(url=url, protocol_binding=binding,
                                             protocol_version="1.0")
                              for binding in ("JSONRPC", "HTTP+JSON")],
        version="1.0",
        capabilities=AgentCapabilities(streaming=True, push_notifications=pushes),
        security_schemes=schemes, security_requirements=required,
        default_input_modes=["text/plain"], default_output_modes=["text/plain"],
        skills=skills)


def context_for(who: Principal, message_id: str) -> str:
    """The conversation a message without a context starts: named by its sender and message
    id, so that the same message sent again finds it, not a second one."""
    digest = hashlib.sha256(f"{who.name}\x00{message_id}".encode()).hexdigest()[:20]
    return f"a2a-{digest}"


def turn_of(task: str) -> tuple[str, int]:
    conversation, mark, turn = task.rpartition(TURN_MARK)
    if not mark:
        conversation, mark, turn = task.rpartition(OLD_TURN_MARK)
    if not mark or not conversation or not turn.isdigit():
        raise TaskNotFoundError(f"no such task: {task[:200]!r} (a task is "
                                f"CONVERSATION{TURN_MARK}TURN)")
    return conversation, int(turn)


def _text(message: Message) -> str:
    return "\n".join(p.text for p in message.parts if p.text)


def _agent_says(text: str, conversation: str, task: str) -> Message:
    return Message(message_id=f"{task}:status", role=Role.ROLE_AGENT, context_id=conversation,
                   task_id=task, parts=[Part(text=text)])


def waiting_text(status: ConversationStatus) -> str:
    """What waits for a person, as the task's status message says it."""
    lines = []
    for p in status.pending_confirmations:
        lines.append(approval_line(p.tool, p.args, p.risk, p.ref or p.call_id))
    q = status.pending_question
    if q is not None:
        options = f" (options: {' | '.join(q.options)})" if q.options else ""
        lines.append(f"question: {q.message}{options}")
    return "\n".join(lines)


def task_of(status: ConversationStatus, turn: int) -> Task:
    """The turn as a task: its state, what waits in it, its answer as an artifact."""
    cid, tid = status.workflow_id, turn_task(status.workflow_id, turn)
    if turn < status.turn:  # an earlier turn: it ended (its answer is in the audit trail)
        return Task(id=tid, context_id=cid, status=TaskStatus(state=TaskState.TASK_STATE_COMPLETED))
    artifacts, message = [], None
    if status.status in ("waiting_for_confirmation", "waiting_for_input"):
        state = TaskState.TASK_STATE_INPUT_REQUIRED
        message = _agent_says(waiting_text(status), cid, tid)
    elif status.status == "failed" or status.stop_reason == "llm_error":
        state = TaskState.TASK_STATE_FAILED
        message = _agent_says(status.error or "the conversation failed", cid, tid)
    elif status.stop_reason in ("stopped", "cancelled", "ended"):
        state = TaskState.TASK_STATE_CANCELED
    elif status.status in ("idle", "completed") and status.stop_reason is not None:
        state = TaskState.TASK_STATE_COMPLETED
        if status.final_answer is not None:
            artifacts = [Artifact(artifact_id=f"{tid}:answer", name="answer",
                                  parts=[Part(text=status.final_answer)])]
    else:
        state = TaskState.TASK_STATE_WORKING
    return Task(id=tid, context_id=cid, artifacts=artifacts,
                status=TaskStatus(state=state, message=message))


class ConversationTasks(RequestHandler):
    """A2A's requests, answered by the conversations (`client.session`)."""

    def __init__(self, app: FastAPI, profile: str | None = None) -> None:
        self._app = app
        self._profile = profile  # the agent profile its new conversations run as

    def _session(self) -> Session:
        state = self._app.state
        return Session(state.client, state.temporal, state.settings.timeout_s)

    @staticmethod
    def _who(context: ServerCallContext) -> Principal:
        who = context.state.get("principal")
        assert isinstance(who, Principal)  # `api.guard` let the request in
        return who

    async def _allowed(self, action: Any, cid: str, s: Session, who: Principal) -> None:
        try:
            await check_access(action, cid, s, who)
        except NotFound as err:
            raise TaskNotFoundError(str(err)) from None
        except Forbidden as err:
            raise InvalidRequestError(str(err)) from None

    async def on_message_send(self, params: SendMessageRequest, context: ServerCallContext
                              ) -> Task | Message:
        s = self._session()
        cid, turn = await self._send(s, self._who(context), params.message)
        if params.configuration.HasField("task_push_notification_config"):
            pushes, by = await self._pushes(turn_task(cid, turn), context)
            await pushes.set(params.configuration.task_push_notification_config,
                             turn_task(cid, turn), by)
        if params.configuration.return_immediately:
            return task_of(await s.status(cid), turn)
        return task_of(await self._settled(s, cid, turn), turn)

    async def on_message_send_stream(self, params: SendMessageRequest,
                                     context: ServerCallContext) -> AsyncGenerator[Any]:
        """The turn as it goes: the task, then a status update at each tool it runs, until it
        is answered (its answer as an artifact), stopped, failed, or waits for a person."""
        s, who, message = self._session(), self._who(context), params.message
        cid = self._context(who, message)
        offset = await s.stream_offset(cid) if await self._exists(s, cid) else 0
        cid, turn = await self._send(s, who, message)
        async for event in self._turn_events(s, cid, turn, offset):
            yield event

    async def on_subscribe_to_task(self, params: SubscribeToTaskRequest,
                                   context: ServerCallContext) -> AsyncGenerator[Any]:
        """A task followed again (a client that lost its stream): from the turn's state now."""
        cid, turn = turn_of(params.id)
        s = self._session()
        await self._allowed("read", cid, s, self._who(context))
        async for event in self._turn_events(s, cid, turn, await s.stream_offset(cid)):
            yield event

    async def _turn_events(self, s: Session, cid: str, turn: int, offset: int
                           ) -> AsyncGenerator[Any]:
        task = task_of(await s.status(cid), turn)
        yield task
        if task.status.state in PAUSED:
            return
        tid = task.id
        async for item in s.follow(cid, offset):
            event = item.data
            if event.turn != turn:
                continue
            if event.kind == "tool_started":
                yield TaskStatusUpdateEvent(task_id=tid, context_id=cid, status=TaskStatus(
                    state=TaskState.TASK_STATE_WORKING,
                    message=_agent_says(f"running {event.tool}", cid, tid)))
            elif event.kind in ("approval_requested", "question_asked", "turn_finished"):
                task = task_of(await s.status(cid), turn)
                if task.status.state not in PAUSED:
                    continue
                for artifact in task.artifacts:
                    yield TaskArtifactUpdateEvent(task_id=tid, context_id=cid,
                                                  artifact=artifact, last_chunk=True)
                yield TaskStatusUpdateEvent(task_id=tid, context_id=cid, status=task.status)
                return

    @staticmethod
    def _context(who: Principal, message: Message) -> str:
        return (message.context_id or (turn_of(message.task_id)[0] if message.task_id else "")
                or context_for(who, message.message_id))

    async def _send(self, s: Session, who: Principal, message: Message) -> tuple[str, int]:
        """Start the conversation or send it the message: the conversation, and the turn that
        answers it."""
        text = _text(message)
        if not text.strip():
            raise InvalidParamsError("the message has no text part")
        if not message.message_id:
            raise InvalidParamsError("the message has no message_id")
        request_id = f"a2a-{message.message_id}"[:128]
        cid = self._context(who, message)
        if (why := check_conversation_id(cid)) is not None:
            raise InvalidParamsError(f"the context id: {why}")
        try:
            if not await self._exists(s, cid):
                await self._start(s, who, cid, text, request_id)
                return cid, 1
            return cid, await self._continue(s, who, cid, text, request_id)
        except NotFound as err:  # it closed meanwhile
            raise TaskNotFoundError(str(err)) from None
        except (Refused, UsageError, CliError) as err:
            raise InvalidRequestError(str(err)) from None

    @staticmethod
    async def _settled(s: Session, cid: str, turn: int) -> ConversationStatus:
        try:
            return await s.wait_settled(cid, turn, WAIT_S)
        except CliError as err:
            raise InvalidRequestError(str(err)) from None

    async def _exists(self, s: Session, cid: str) -> bool:
        try:
            await s.describe(cid)
        except NotFound:
            return False
        return True

    async def _start(self, s: Session, who: Principal, cid: str, text: str, request_id: str
                     ) -> None:
        try:
            who.check_start()
        except Forbidden as err:
            raise InvalidRequestError(str(err)) from None
        inp = ConversationInput(prompt=text, owner=who.name, request_id=request_id,
                                max_message_bytes=s.max_message_bytes, profile=self._profile)
        await s.start(inp, cid, source="A2A", existing_ok=True)

    async def _continue(self, s: Session, who: Principal, cid: str, text: str,
                        request_id: str) -> int:
        """The next message, or the answer to the question the turn waits on; the turn that
        answers it (a message sent again answers as it did: the same turn)."""
        status = await s.status(cid)
        if status.pending_confirmations:  # a person approves a write, never another agent
            raise InvalidRequestError(
                f"turn {status.turn} of {cid} waits for a person to approve "
                + ", ".join(f"{p.tool} (call {p.ref or p.call_id})"
                            for p in status.pending_confirmations)
                + ": in the console, the CLI or the HTTP API; then read the task again")
        if status.pending_question is not None:
            await self._allowed("decide", cid, s, who)
            outcome = await s.decide(cid, AnswerRequest(
                request_id=request_id, values=[text], sender=who.name,
                call_id=status.pending_question.ref or status.pending_question.call_id),
                by_update=True)
            return outcome.turn or status.turn
        await self._allowed("message", cid, s, who)
        outcome = await s.update(cid, SayRequest(text=text, request_id=request_id,
                                                 sender=who.name))
        if not outcome.accepted:
            raise InvalidRequestError(outcome.reason or "the message was refused")
        return outcome.turn or status.turn + 1

    async def on_get_task(self, params: GetTaskRequest, context: ServerCallContext
                          ) -> Task | None:
        cid, turn = turn_of(params.id)
        s = self._session()
        await self._allowed("read", cid, s, self._who(context))
        status = await s.status(cid)
        if turn > status.turn or turn < 1:
            raise TaskNotFoundError(f"{cid} has no turn {turn} (it is at turn {status.turn})")
        return task_of(status, turn)

    async def on_cancel_task(self, params: CancelTaskRequest, context: ServerCallContext
                             ) -> Task | None:
        cid, turn = turn_of(params.id)
        s, who = self._session(), self._who(context)
        await self._allowed("message", cid, s, who)
        status = await s.status(cid)
        if turn != status.turn or task_of(status, turn).status.state in (
                TaskState.TASK_STATE_COMPLETED, TaskState.TASK_STATE_CANCELED,
                TaskState.TASK_STATE_FAILED):
            raise TaskNotCancelableError(f"turn {turn} of {cid} is not running")
        await s.stop(cid, f"a2a-cancel-{params.id}"[:128], sender=who.name)
        return task_of(await self._settled(s, cid, turn), turn)

    async def on_list_tasks(self, params: ListTasksRequest, context: ServerCallContext
                            ) -> ListTasksResponse:
        """A context's turns, newest first; without one, the latest turn of each conversation
        the caller may read (its own, or all for a role that reads all), newest first (each a
        status query: a closed conversation's is a replay). One page: `page_size` (default 20,
        at most 100), no page token."""
        s, who = self._session(), self._who(context)
        size = min(params.page_size or LISTED, MAX_LISTED)
        if params.context_id:
            await self._allowed("read", params.context_id, s, who)
            status = await s.status(params.context_id)
            tasks = [task_of(status, turn) for turn in range(status.turn, 0, -1)][:size]
        else:
            rows = await s.conversations(limit=size, owner=None if who.sees_all else who.name)
            statuses = await asyncio.gather(*(s.status(r.workflow_id) for r in rows),
                                            return_exceptions=True)
            tasks = [task_of(st, st.turn) for st in statuses
                     if isinstance(st, ConversationStatus) and st.turn > 0]
        if params.status:  # (a state asked for; unspecified is none)
            tasks = [t for t in tasks if t.status.state == params.status]
        return ListTasksResponse(tasks=tasks, page_size=size, total_size=len(tasks))

    async def _pushes(self, task: str, context: ServerCallContext) -> tuple[PushConfigs, str]:
        cid, _ = turn_of(task)
        s, who = self._session(), self._who(context)
        await self._allowed("read", cid, s, who)
        return PushConfigs(self._app.state.settings.memory_url, s, cid), who.name

    async def on_create_task_push_notification_config(
            self, params: TaskPushNotificationConfig, context: ServerCallContext
    ) -> TaskPushNotificationConfig:
        pushes, by = await self._pushes(params.task_id, context)
        return await pushes.set(params, params.task_id, by)

    async def on_get_task_push_notification_config(
            self, params: GetTaskPushNotificationConfigRequest, context: ServerCallContext
    ) -> TaskPushNotificationConfig:
        return await (await self._pushes(params.task_id, context))[0].get(params.id)

    async def on_list_task_push_notification_configs(
            self, params: ListTaskPushNotificationConfigsRequest, context: ServerCallContext
    ) -> ListTaskPushNotificationConfigsResponse:
        pushes, _ = await self._pushes(params.task_id, context)
        return ListTaskPushNotificationConfigsResponse(configs=await pushes.listed())

    async def on_delete_task_push_notification_config(
            self, params: DeleteTaskPushNotificationConfigRequest, context: ServerCallContext
    ) -> None:
        await (await self._pushes(params.task_id, context))[0].drop(params.id)

    async def on_get_extended_agent_card(self, params: Any, context: Any) -> Any:
        raise UnsupportedOperationError("there is no extended card")


class PrincipalContext(DefaultServerCallContextBuilder):
    """The call's context carries whom `api.guard` let in."""

    def build(self, request: Request) -> ServerCallContext:
        context = super().build(request)
        context.state["principal"] = request.scope.get("state", {}).get("principal")
        context.state["headers"] = {k: v for k, v in context.state.get("headers", {}).items()
                                    if k.lower() != "authorization"}  # (the token stays out)
        return context


def add_a2a_routes(app: FastAPI, base_url: str, auth_required: bool,
                   profiles: Mapping[str, AgentProfile], pushes: bool = True) -> None:
    """Each agent's card (public, as `api.guard` lets it be) and bindings (a token's):
    the default agent's at the root, each profile's under `/agents/NAME`."""
    agents: list[tuple[str, str | None, AgentProfile | None]] = [("", None, None)]
    agents += [(f"{AGENTS}/{name}", name, profile) for name, profile in profiles.items()]
    for prefix, name, profile in agents:
        card = agent_card(base_url.rstrip("/") + prefix + A2A_PATH, auth_required, name, profile,
                          pushes)
        app.router.routes.extend(create_agent_card_routes(card, card_url=prefix + AGENT_CARD))
        tasks = ConversationTasks(app, name)
        app.router.routes.extend(create_jsonrpc_routes(tasks, prefix + A2A_PATH,
                                                       context_builder=PrincipalContext()))
        # HTTP+JSON under the same URL (/a2a/message:send, /a2a/tasks/ID...); not its mount of
        # every route under any first segment (`/{tenant}`), which would answer the API's own
        # paths' wrong methods with a 404 instead of a 405
        app.router.routes.extend(
            route for route in create_rest_routes(tasks, context_builder=PrincipalContext(),
                                                  path_prefix=prefix + A2A_PATH)
            if isinstance(route, Route))
