"""AG-UI over SSE: one `POST /agui` run of a conversation, in the protocol's own models.

A run is stateless on the server: everything it needs is in the conversation (the workflow) and
in the request. So the run that ends in an interrupt and the run that resumes it can reach two
different API processes.

- `threadId` is the conversation id. A new thread starts a conversation with the last user
  message; on an existing one that message is a `say`. Its AG-UI message id is the request id, so
  a retried run never sends it twice.
- The run streams what the turn does from the stream offset it started at: tokens as
  `TEXT_MESSAGE_*`, tool calls as `TOOL_CALL_START/ARGS/END/RESULT`.
- When the conversation waits for a human, the run ends with `RUN_FINISHED` whose outcome is an
  interrupt: one per pending confirmation, or one for the pending question, each with a
  `responseSchema`. The next run's `resume` entries become confirm, reject or answer, through the
  workflow's Update twins; a refused one ends that run with `RUN_ERROR` and the reason.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import structlog
from ag_ui.core import (
    BaseEvent,
    Interrupt,
    ResumeEntry,
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
from ag_ui.core.events import RunFinishedInterruptOutcome, RunFinishedSuccessOutcome
from temporalio.service import RPCError

from client.session import CliError, NotFound, Refused, Session, UsageError
from workflows.conversation import ConversationWorkflow
from workflows.models import (
    CLOSED_STATUSES,
    WAITING_STATUSES,
    AnswerRequest,
    ConfirmRequest,
    ConversationInput,
    ConversationStatus,
    PendingQuestion,
    RejectRequest,
    SayRequest,
    StreamEvent,
)

log = structlog.get_logger("api")
ERROR_CODES = {Refused: "refused", UsageError: "bad_request", NotFound: "not_found"}
# Events after which the conversation may have come to wait for a human.
MAY_WAIT = frozenset({"approval_requested", "question_asked", "decision_taken", "answered",
                      "decision_refused"})


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
    return f"agui-message:{message_id}"


# ----- interrupts: what the conversation waits for, and how an answer maps back -----

def confirmation_schema(parameters: dict[str, Any] | None) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "approved": {"type": "boolean", "description": "run the call (true) or not (false)"},
            "reason": {"type": "string", "description": "why not; the model reads it"},
            "args": {**(parameters or {"type": "object"}),
                     "description": "edited arguments to run instead (optional)"},
        },
        "required": ["approved"],
        "additionalProperties": False,
    }


def question_schema(q: PendingQuestion) -> dict[str, Any]:
    answer: dict[str, Any]
    match q.kind:
        case "choice":
            answer = {"type": "string", "enum": q.options}
        case "multi_choice":
            answer = {"type": "array", "items": {"type": "string", "enum": q.options},
                      "uniqueItems": True}
        case "confirm":
            answer = {"type": "boolean"}
        case _:
            answer = {"type": "string", "minLength": 1}
    return {"type": "object", "properties": {"answer": answer}, "required": ["answer"],
            "additionalProperties": False}


def interrupts(status: ConversationStatus, schemas: dict[str, dict[str, Any]]) -> list[Interrupt]:
    found = [
        Interrupt(  # a subagent's call is named by its ref, so that two never share an id
            id=p.ref or p.call_id, reason="tool_approval", tool_call_id=p.ref or p.call_id,
            message=f"{p.tool}({json.dumps(p.args, ensure_ascii=False)}) is {p.risk} and waits "
                    "for approval",
            response_schema=confirmation_schema(schemas.get(p.ref or p.call_id)),
            metadata={"tool": p.tool, "args": p.args, "risk": p.risk,
                      "conversation_id": p.conversation_id or status.workflow_id},
        )
        for p in status.pending_confirmations
    ]
    q = status.pending_question
    if q is not None:
        found.append(Interrupt(
            id=q.ref or q.call_id, reason="input_required", message=q.message,
            response_schema=question_schema(q),
            metadata={"kind": q.kind, "options": q.options,
                      "conversation_id": q.conversation_id or status.workflow_id},
        ))
    return found


def resume_request(entry: ResumeEntry, status: ConversationStatus, principal: str,
                   request_id: str) -> ConfirmRequest | RejectRequest | AnswerRequest:
    """The confirm, reject or answer a resume entry stands for. An entry naming no pending
    interrupt is sent as a confirm, so that the conversation says why it refuses it (already
    decided, by whom, or unknown)."""
    q = status.pending_question
    if q is not None and entry.interrupt_id == (q.ref or q.call_id):
        if entry.status == "cancelled":
            raise UsageError("a question cannot be cancelled: answer it, or end the conversation")
        payload = entry.payload
        value = payload.get("answer") if isinstance(payload, dict) else payload
        if isinstance(value, bool):
            values = ["yes" if value else "no"]
        elif isinstance(value, str):
            values = [value]
        elif isinstance(value, list) and all(isinstance(v, str) for v in value):
            values = value
        else:
            raise UsageError("the answer to a question is {\"answer\": ...}: a string, a list "
                             "of strings, or a boolean")
        return AnswerRequest(request_id=request_id, values=values)
    ids = [entry.interrupt_id]
    if entry.status == "cancelled":
        return RejectRequest(request_id=request_id, call_ids=ids, reason="cancelled",
                             approver=principal)
    payload = entry.payload
    if not isinstance(payload, dict) or not isinstance(payload.get("approved"), bool):
        raise UsageError("a tool approval is resumed with {\"approved\": true|false, "
                         "\"reason\"?: str, \"args\"?: {...}}")
    if not payload["approved"]:
        reason = payload.get("reason")
        return RejectRequest(request_id=request_id, call_ids=ids,
                             reason=reason if isinstance(reason, str) else "", approver=principal)
    args = payload.get("args")
    if args is not None and not isinstance(args, dict):
        raise UsageError("edited args must be a JSON object")
    return ConfirmRequest(request_id=request_id, call_ids=ids, args=args, approver=principal)


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
        call_id = e.call_id or ""
        if call_id in self._announced:
            return []
        self._announced.add(call_id)
        return [
            ToolCallStartEvent(tool_call_id=call_id, tool_call_name=e.tool or "",
                               parent_message_id=self._last_message),
            ToolCallArgsEvent(tool_call_id=call_id,
                              delta=json.dumps(e.args or {}, ensure_ascii=False)),
            ToolCallEndEvent(tool_call_id=call_id),
        ]


async def run_agui(session: Session, inp: RunAgentInput, principal: str,
                   ) -> AsyncIterator[BaseEvent]:
    """One AG-UI run: RUN_STARTED, what the conversation does, then RUN_FINISHED (an answer or
    an interrupt) or RUN_ERROR (a refusal, or a conversation that cannot go on)."""
    thread, run = inp.thread_id, inp.run_id
    yield RunStartedEvent(thread_id=thread, run_id=run)
    try:
        async for event in _run(session, inp, principal):
            yield event
    except (Refused, UsageError, CliError) as err:
        yield RunErrorEvent(message=str(err), code=ERROR_CODES.get(type(err), "error"))
    except RPCError as err:
        log.warning("agui_run_failed", thread=thread, run=run, error=err.message)
        yield RunErrorEvent(message=f"Temporal refused the request: {err.message}",
                            code="temporal_error")


async def _run(session: Session, inp: RunAgentInput, principal: str) -> AsyncIterator[BaseEvent]:
    thread, run = inp.thread_id, inp.run_id
    announced: set[str] = set()
    offset, status = await _position(session, thread)
    if inp.resume:
        if status is None:
            raise NotFound(f"no such conversation: {thread}")
        answer_turn = status.turn  # the run ends when this turn is answered
        for n, entry in enumerate(inp.resume):
            request = resume_request(entry, status, principal, f"agui:{run}:{n}")
            await session.decide(thread, request, by_update=True)
            announced.add(entry.interrupt_id)
    else:
        message = last_user_text(inp)
        started = False
        if status is None:
            if message is None:
                raise UsageError("a new thread starts with a user message")
            started = await session.start(
                ConversationInput(prompt=message[1], request_id=message_request_id(message[0]),
                                  max_message_bytes=session.max_message_bytes),
                thread, source="AG-UI", existing_ok=True)
            if not started:  # another run started it meanwhile
                offset, status = await _position(session, thread)
        if started or status is None:
            offset, answer_turn = 0, 1
        else:
            taken = await _take_message(session, thread, run, status, message)
            if isinstance(taken, RunFinishedEvent):
                yield taken
                return
            answer_turn = taken
    translator = Translator(announced)
    async for item in session.follow(thread, offset):
        for event in translator.translate(item.offset, item.data):
            yield event
        kind = item.data.kind
        if kind == "turn_finished" and item.data.turn >= answer_turn:
            yield _finished(thread, run, item.data.text, item.data.stop_reason)
            return
        if kind in MAY_WAIT:
            status = await session.status(thread)
            if status.status in WAITING_STATUSES:
                for event in translator.close_text():
                    yield event
                yield await _finished_waiting(session, thread, run, status)
                return
    status = await session.status(thread)  # the conversation completed
    yield _finished(thread, run, status.final_answer, status.stop_reason)


def _finished(thread: str, run: str, answer: str | None, stop_reason: str | None
              ) -> RunFinishedEvent:
    return RunFinishedEvent(thread_id=thread, run_id=run, outcome=RunFinishedSuccessOutcome(),
                            result={"answer": answer, "stop_reason": stop_reason})


async def _finished_waiting(session: Session, thread: str, run: str,
                            status: ConversationStatus) -> RunFinishedEvent:
    schemas = await session.pending_schemas(thread, status) if status.pending_confirmations else {}
    return RunFinishedEvent(thread_id=thread, run_id=run,
                            outcome=RunFinishedInterruptOutcome(
                                interrupts=interrupts(status, schemas)))


async def _position(session: Session, thread: str) -> tuple[int, ConversationStatus | None]:
    """The stream's offset, then the status (in this order, so that nothing the status shows as
    done happened after the offset); (0, None) for a conversation that does not exist."""
    try:
        offset = await session.stream_offset(thread)
    except NotFound:
        return 0, None
    return offset, await session.status(thread)


async def _take_message(session: Session, thread: str, run: str, status: ConversationStatus,
                        message: tuple[str, str] | None) -> int | RunFinishedEvent:
    """Send the run's message unless the conversation took it already (a retried run). Returns
    the turn that answers it, or the run's end when there is nothing left to stream."""
    if status.status in CLOSED_STATUSES:
        raise Refused(f"conversation {thread} has ended ({status.stop_reason})")
    taken = None
    if message is not None:
        request_id = message_request_id(message[0])
        taken = await session.query(thread, ConversationWorkflow.signal_outcome, request_id)
        if taken is None:
            if status.status in WAITING_STATUSES:
                raise Refused(f"conversation {thread} waits for a human: resume its "
                              "interrupts before sending a message")
            outcome = await session.update(thread, SayRequest(text=message[1],
                                                              request_id=request_id))
            return outcome.turn or status.turn + 1
    turn = taken.turn if taken is not None and taken.turn else status.turn
    if status.status in WAITING_STATUSES:
        return await _finished_waiting(session, thread, run, status)
    if status.status == "idle" and status.turn >= turn:  # answered already
        return _finished(thread, run, status.final_answer, status.stop_reason)
    return turn
