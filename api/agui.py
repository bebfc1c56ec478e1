"""AG-UI 1.0 over SSE: one `POST /agui` run of a conversation, in the protocol's own models.

A run is stateless on the server: everything it needs is in the conversation (the workflow) and
in the request. So the run that ends in an interrupt and the run that resumes it can reach two
different API processes.

- `threadId` is the conversation id, checked like any conversation id. A new thread starts a
  conversation with the last user message; on an existing one that message is a `say`. Its AG-UI
  message id makes the request id, so a retried run never sends it twice.
- The run streams what the turn does from the stream offset it started at: tokens as
  `TEXT_MESSAGE_*`, tool calls as `TOOL_CALL_START/ARGS/END/RESULT`.
- When the conversation waits for a human, the run announces every call it waits on and ends with
  `RUN_FINISHED` whose outcome is an interrupt: one per pending confirmation, or one for the
  pending question, each with a `responseSchema`. The next run's `resume` entries become confirm,
  reject or answer, through the workflow's Update twins (`api.interrupts`: checked as a whole
  first).
  An approval's payload may ask for it to be remembered (`remember`, `for_s`, `uses`), as the
  REST confirm may; the confirm carries the principal's roles.
- Every run ends with RUN_FINISHED or RUN_ERROR, whatever fails below it.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

import structlog
from ag_ui.core import (
    PROTOCOL_VERSION,
    BaseEvent,
    RunAgentInput,
    RunErrorEvent,
    RunFinishedEvent,
    RunStartedEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
    UserMessage,
)
from ag_ui.core.events import (
    RunFinishedCancelledOutcome,
    RunFinishedInterruptOutcome,
    RunFinishedSuccessOutcome,
)

from ..client.checks import (
    CliError,
    NotFound,
    NoWorker,
    Refused,
    UsageError,
    check_conversation_id,
)
from ..client.session import Session
from ..contract import (
    CLOSED_STATUSES,
    WAITING_STATUSES,
    ConversationInput,
    ConversationStatus,
    SayRequest,
    StreamEvent,
    names,
)
from .access import Principal, Verdict
from .interrupts import digest, interrupt_id, interrupts, plan_resume

log = structlog.get_logger("api")
ERROR_CODES = {Refused: "refused", UsageError: "bad_request", NotFound: "not_found",
               NoWorker: "no_worker"}
# Events after which the conversation may have come to wait for a human.
MAY_WAIT = frozenset({"approval_requested", "question_asked", "decision_taken", "answered",
                      "decision_refused", "child_waiting"})


def last_user_text(inp: RunAgentInput) -> tuple[str, str] | None:
    """The last user message of the run's input: (its id, its text)."""
    for message in reversed(inp.messages):
        if isinstance(message, UserMessage):
            content = message.content
            if isinstance(content, str):
                text = content
            else:
                text = "\n".join(getattr(part, "text", "") for part in content
                                 if getattr(part, "type", None) == "text")
            return message.id, text
    return None


def message_request_id(message_id: str) -> str:
    """The request id of a user message, by its AG-UI id: a retried run never sends it twice."""
    return f"agui-message:{digest(message_id)}"


# ----- the stream, in AG-UI's events -----

class Translator:
    """Turns the conversation's stream events into AG-UI events, for one run."""

    def __init__(self, announced: set[str]):
        self._announced = announced  # tool calls whose START/ARGS/END an earlier run sent
        self._message: str | None = None  # the open text message
        self._last_message: str | None = None

    def close_text(self) -> list[BaseEvent]:
        if self._message is None:
            return []
        closed, self._message = self._message, None
        return [TextMessageEndEvent(message_id=closed)]

    def translate(self, offset: int, e: StreamEvent) -> list[BaseEvent]:
        match e.kind:
            case "token":
                if not e.text:
                    return []
                out: list[BaseEvent] = []
                if self._message is None:
                    self._message = self._last_message = f"msg-{offset}"
                    out.append(TextMessageStartEvent(message_id=self._message, role="assistant"))
                return [*out, TextMessageContentEvent(message_id=self._message, delta=e.text)]
            case "llm_started" | "reset" | "turn_finished":
                return self.close_text()
            case "tool_started" | "approval_requested":
                return [*self.close_text(), *self._announce(e)]
            case "tool_finished":
                return [ToolCallResultEvent(message_id=f"result-{e.call_id}",
                                            tool_call_id=e.call_id or "", role="tool",
                                            content=e.text or f"({e.status})")]
            case "decision_taken" if e.status == "rejected":
                return [ToolCallResultEvent(message_id=f"result-{e.call_id}",
                                            tool_call_id=e.call_id or "", role="tool",
                                            content=f"rejected by user: {e.text or ''}")]
        return []

    def _announce(self, e: StreamEvent) -> list[BaseEvent]:
        return self.announce(e.call_id or "", e.tool or "", e.args or {})

    def announce(self, call_id: str, tool: str, args: dict[str, Any]) -> list[BaseEvent]:
        """A tool call's START/ARGS/END, once per run."""
        if call_id in self._announced:
            return []
        self._announced.add(call_id)
        return [
            ToolCallStartEvent(tool_call_id=call_id, tool_call_name=tool,
                               parent_message_id=self._last_message),
            ToolCallArgsEvent(tool_call_id=call_id, delta=json.dumps(args, ensure_ascii=False)),
            ToolCallEndEvent(tool_call_id=call_id),
        ]

    def waiting(self, status: ConversationStatus) -> list[BaseEvent]:
        """Before a run ends in interrupts: every call they name is announced in this run, so a
        client that missed the run that raised them (a lost response, a retried run) has it."""
        out = self.close_text()
        for p in status.pending_confirmations:
            out += self.announce(interrupt_id(p), p.tool, p.args)
        return out


async def run_agui(session: Session, inp: RunAgentInput, who: Principal,
                   trace_parent: str | None = None) -> AsyncIterator[BaseEvent]:
    """One AG-UI run: RUN_STARTED, what the conversation does, then RUN_FINISHED (an answer or
    an interrupt) or RUN_ERROR (a refusal, or a conversation that cannot go on). Whatever goes
    wrong, the run ends with one of the two: a client never waits on a silent stream."""
    thread, run = inp.thread_id, inp.run_id
    yield RunStartedEvent(thread_id=thread, run_id=run, protocol_version=PROTOCOL_VERSION)
    try:
        async for event in _run(session, inp, who, trace_parent):  # RUN_FINISHED, or raises
            yield event
    except (Refused, UsageError, CliError) as err:
        yield RunErrorEvent(message=str(err), code=ERROR_CODES.get(type(err), "error"))
    except Exception as err:  # a Temporal error, or a bug: logged, never echoed
        error_id = uuid.uuid4().hex[:12]
        log.warning("agui_run_failed", thread=thread[:200], run=run[:200], error_id=error_id,
                    error=f"{type(err).__name__}: {getattr(err, 'message', None) or err}")
        yield RunErrorEvent(message=f"the run failed (error id {error_id}); it is logged",
                            code="internal_error")


async def _run(session: Session, inp: RunAgentInput, who: Principal,
               trace_parent: str | None) -> AsyncIterator[BaseEvent]:
    thread, run, principal = inp.thread_id, inp.run_id, who.name
    reason = check_conversation_id(thread)
    if reason is not None:
        raise UsageError(f"threadId: {reason}")
    offset, status = await _position(session, thread)
    metadata: dict[str, Any] | None = None
    if inp.resume:
        if status is None:
            raise NotFound(f"no such conversation: {thread}")
        plan = plan_resume(inp.resume, status, principal, run, roles=sorted(who.roles))
        if plan.ignored:
            log.warning("agui_resume_ignored", thread=thread, run=run[:200],
                        interrupts=[i["interruptId"][:200] for i in plan.ignored])
            metadata = {"ignoredResume": plan.ignored}
        if plan.requests:  # one Update, taken whole or not at all (`workflows.decisions`)
            await session.decide(thread, plan.request(run), by_update=True)
        translator = Translator(set(plan.requests))  # the run that raised them announced them
        answer_turn, sent = status.turn, bool(plan.requests)
    else:
        translator = Translator(set())
        message = last_user_text(inp)
        if status is None:
            if message is None:
                raise UsageError("a new thread starts with a user message")
            started = await session.start(
                ConversationInput(prompt=message[1], request_id=message_request_id(message[0]),
                                  max_message_bytes=session.max_message_bytes, owner=principal,
                                  trace_parent=trace_parent),
                thread, source="AG-UI", existing_ok=True)
            if not started:  # another run started it meanwhile
                offset, status = await _position(session, thread)
                if status is not None and who.may("message", status.owner) is not Verdict.ALLOWED:
                    raise Refused(f"the thread id {thread} is in use")
        if status is None:
            answer_turn, sent = 1, True
        else:
            answer_turn, sent = await _take_message(session, thread, status, message, principal)
    if not sent and status is not None:  # a retried run, or one that answers nothing new
        end = await _end_now(session, translator, thread, run, status, answer_turn, metadata)
        if end:
            for event in end:
                yield event
            return
    async for item in session.follow(thread, offset):
        for event in translator.translate(item.offset, item.data):
            yield event
        kind = item.data.kind
        if kind == "turn_finished" and item.data.turn >= answer_turn:
            yield _finished(thread, run, item.data.text, item.data.stop_reason, metadata)
            return
        if kind in MAY_WAIT:
            status = await session.status(thread)
            if status.status in WAITING_STATUSES:
                for event in await _interrupted(session, translator, thread, run, status,
                                                metadata):
                    yield event
                return
    status = await session.status(thread)  # the conversation completed
    yield _finished(thread, run, status.final_answer, status.stop_reason, metadata)


def _finished(thread: str, run: str, answer: str | None, stop_reason: str | None,
              metadata: dict[str, Any] | None) -> RunFinishedEvent:
    """The run's end: `cancelled` when a person stopped its turn (`stop`), else `success`."""
    outcome = RunFinishedCancelledOutcome() if stop_reason == "stopped" \
        else RunFinishedSuccessOutcome()
    return RunFinishedEvent(thread_id=thread, run_id=run, outcome=outcome,
                            result={"answer": answer, "stop_reason": stop_reason},
                            metadata=metadata)


async def _interrupted(session: Session, translator: Translator, thread: str, run: str,
                       status: ConversationStatus, metadata: dict[str, Any] | None,
                       ) -> list[BaseEvent]:
    """The run's end when the conversation waits for a human: the calls it waits on, announced,
    then RUN_FINISHED with an interrupt for each."""
    schemas = await session.pending_schemas(thread, status) if status.pending_confirmations else {}
    return [*translator.waiting(status),
            RunFinishedEvent(thread_id=thread, run_id=run, metadata=metadata,
                             outcome=RunFinishedInterruptOutcome(
                                 interrupts=interrupts(status, schemas)))]


async def _end_now(session: Session, translator: Translator, thread: str, run: str,
                   status: ConversationStatus, answer_turn: int,
                   metadata: dict[str, Any] | None) -> list[BaseEvent]:
    """The run's end from the status alone, when nothing new is on its way: the interrupts the
    conversation waits for, or the answer of `answer_turn`; nothing while that turn runs."""
    if status.status in WAITING_STATUSES:
        return await _interrupted(session, translator, thread, run, status, metadata)
    if status.status in CLOSED_STATUSES or (status.status == "idle"
                                            and status.turn >= answer_turn):
        return [_finished(thread, run, status.final_answer, status.stop_reason, metadata)]
    return []


async def _position(session: Session, thread: str) -> tuple[int, ConversationStatus | None]:
    """The stream's offset, then the status (in this order, so that nothing the status shows as
    done happened after the offset); (0, None) for a conversation that does not exist."""
    try:
        offset = await session.stream_offset(thread)
    except NotFound:
        return 0, None
    return offset, await session.status(thread)


async def _take_message(session: Session, thread: str, status: ConversationStatus,
                        message: tuple[str, str] | None, sender: str) -> tuple[int, bool]:
    """Send the run's message unless the conversation took it already (a retried run): the turn
    that answers it, and whether it was sent now."""
    if status.status in CLOSED_STATUSES:
        raise Refused(f"conversation {thread} has ended ({status.stop_reason})")
    if message is None:
        return status.turn, False
    request_id = message_request_id(message[0])
    taken = await session.query(thread, names.SIGNAL_OUTCOME, request_id)
    if taken is not None:
        return taken.turn or status.turn, False
    if status.status in WAITING_STATUSES:
        raise Refused(f"conversation {thread} waits for a human: resume its interrupts "
                      "before sending a message")
    outcome = await session.update(thread, SayRequest(text=message[1], request_id=request_id,
                                                      sender=sender))
    return outcome.turn or status.turn + 1, True
