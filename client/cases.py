"""Cases from recorded conversations (`agent export` and `fork`): the history of
every run of a conversation, read from Temporal (no worker needed for it), its model calls'
prompts rebuilt as the endpoint received them (`rules.delta`), and the audit trail's decisions
(a worker answers that query). `rules.cases` turns them into a case."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent

from ..contract import (
    LIST_TOOLS_ACTIVITY,
    LLM_CALL_ACTIVITY,
    LLM_STEP_ACTIVITY,
    ConversationInput,
    ForkPoint,
    LLMReply,
    LLMRequest,
    LLMStepRequest,
    ToolOutcome,
    WorkerHandshake,
)
from ..contract.case import Case
from ..contract.memory import RECALL_ACTIVITY
from ..contract.models import (
    JUDGE_CALLS_ACTIVITY,
    KEEP_GRANTS_ACTIVITY,
    MCP_LISTING_ACTIVITY,
    NOTIFY_ACTIVITY,
    REVIEW_CALL_ACTIVITY,
    SUMMARIZE_ACTIVITY,
)
from ..contract.owner import CLOSED_ACTIVITY, LEASE_ACTIVITY
from ..rules import delta
from ..rules.cases import ModelCall, Recording, build_case, prompt_of, steps_of
from .checks import CliError, NotFound, UsageError, clip
from .session import Session

LOCAL_ACTIVITY_MARKER = "core_local_activity"  # how Temporal's core records a local activity
MAX_RUNS = 10_000  # a chain of continue-as-new longer than this is not followed
FORK_LABEL_CHARS = 1000
MAX_FORK_HOPS = 32  # a fork of a fork of ...: how far back `full_result` follows a call
# Activities of the conversation's own machinery: every other activity type is a tool's
INTERNAL_ACTIVITIES = frozenset({
    LLM_CALL_ACTIVITY, LLM_STEP_ACTIVITY, SUMMARIZE_ACTIVITY, LIST_TOOLS_ACTIVITY,
    MCP_LISTING_ACTIVITY, NOTIFY_ACTIVITY, JUDGE_CALLS_ACTIVITY, KEEP_GRANTS_ACTIVITY,
    REVIEW_CALL_ACTIVITY, RECALL_ACTIVITY, LEASE_ACTIVITY, CLOSED_ACTIVITY})


@dataclass(frozen=True)
class ToolResult:
    """A tool call's result as `agent result` gives it (`whole`: False when the model was shown
    all of it, or the worker kept no whole result)."""

    call_id: str
    conversation_id: str
    text: str
    whole: bool


async def recording(session: Session, workflow_id: str, audit: bool = True,
                    whole: bool = True) -> Recording:
    """What the history of every run of a conversation holds (and, with `audit`, what its audit
    trail says, which needs a worker; with `whole`, the whole results of the calls whose results
    the model was shown cut, read from the payload store); `NotFound` for an unknown
    conversation."""
    reader = _Reader(session, whole)
    latest = await session.describe(workflow_id)
    run_id = latest.raw_description.workflow_execution_info.first_run_id or latest.run_id
    for _ in range(MAX_RUNS):
        run_id = await reader.read_run(workflow_id, run_id)
        if run_id is None:
            break
    if reader.start is None:
        raise NotFound(f"no such conversation: {workflow_id}")
    rec = Recording(conversation_id=workflow_id, start=reader.start, calls=reader.calls,
                    tools=reader.tools, ms=reader.ms(), full_results=reader.full_results)
    if audit:
        rec.audit = await session.history(workflow_id)
        rec.status = await session.status(workflow_id)
    return rec


class _Reader:
    """Walks a conversation's runs in order, keeping the last prompt each model call's delta
    refers to."""

    def __init__(self, session: Session, whole: bool = True) -> None:
        self._client = session.client
        self._whole = whole
        self.start: ConversationInput | None = None
        self.calls: list[ModelCall] = []
        self.tools: list[str] = []
        self._wire: list[dict[str, Any]] = []
        self._scheduled: dict[int, tuple[ModelCall, datetime]] = {}
        self._handshake_id: int | None = None  # the handshake, when it ran as an activity
        self._tool_runs: set[int] = set()  # scheduled activities that may be tool runs
        # the whole results of calls the model was shown cut, by call id (read by reference)
        self.full_results: dict[str, str] = {}
        self._first_at: datetime | None = None
        self._last_at: datetime | None = None

    def ms(self) -> int | None:
        if self._first_at is None or self._last_at is None:
            return None
        return int((self._last_at - self._first_at).total_seconds() * 1000)

    async def read_run(self, workflow_id: str, run_id: str) -> str | None:
        """Read one run's events; the next run's id, if it continued as new."""
        handle = self._client.get_workflow_handle(workflow_id, run_id=run_id)
        following = None
        async for event in handle.fetch_history_events():
            following = await self._read(event) or following
        return following

    async def _read(self, event: HistoryEvent) -> str | None:
        kind = event.event_type
        at = event.event_time.ToDatetime(tzinfo=UTC)
        if kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
            if self.start is None:
                attrs = event.workflow_execution_started_event_attributes
                self.start = await self._one(attrs.input.payloads, ConversationInput)
                self._first_at = at
        elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            attrs = event.activity_task_scheduled_event_attributes
            name = attrs.activity_type.name
            if name in (LLM_STEP_ACTIVITY, LLM_CALL_ACTIVITY):
                await self._schedule(event.event_id, name, attrs.input.payloads, at)
            elif name == LIST_TOOLS_ACTIVITY:
                self._handshake_id = event.event_id
            elif self._whole and name not in INTERNAL_ACTIVITIES:
                self._tool_runs.add(event.event_id)
        elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            attrs = event.activity_task_completed_event_attributes
            scheduled = self._scheduled.pop(attrs.scheduled_event_id, None)
            if scheduled is not None:
                call, began = scheduled
                call.reply = await self._one(attrs.result.payloads, LLMReply)
                call.ms = int((at - began).total_seconds() * 1000)
                self._last_at = at
            elif attrs.scheduled_event_id == self._handshake_id:
                await self._handshake(attrs.result.payloads)
            elif attrs.scheduled_event_id in self._tool_runs:
                await self._tool_result(attrs.result.payloads)
        elif kind == EventType.EVENT_TYPE_MARKER_RECORDED:
            await self._marker(event)
        elif kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW:
            return event.workflow_execution_continued_as_new_event_attributes.new_execution_run_id
        return None

    async def _schedule(self, event_id: int, name: str, payloads: Any, at: datetime) -> None:
        if name == LLM_CALL_ACTIVITY:
            request = await self._one(payloads, LLMRequest)
            self._wire = [m.to_openai() for m in request.messages]
        else:
            step = await self._one(payloads, LLMStepRequest)
            previous = self._wire if step.base is not None else []
            try:
                self._wire = delta.rebuild(previous, step.parts)
            except delta.Mismatch as err:
                raise CliError(f"the history's model call (turn {step.turn}, step {step.step}) "
                               f"cannot be rebuilt: {err}") from None
            request = step
        call = ModelCall(turn=request.turn, step=request.step, prompt=self._wire, reply=None)
        self.calls.append(call)
        self._scheduled[event_id] = (call, at)

    async def _marker(self, event: HistoryEvent) -> None:
        """A local activity's marker: the handshake's is read for the tools offered."""
        attrs = event.marker_recorded_event_attributes
        if attrs.marker_name != LOCAL_ACTIVITY_MARKER or "data" not in attrs.details:
            return
        try:
            data = json.loads(attrs.details["data"].payloads[0].data)
        except (ValueError, IndexError):
            return
        kind = data.get("activity_type")
        if "result" not in attrs.details:
            return
        if kind == LIST_TOOLS_ACTIVITY:
            await self._handshake(attrs.details["result"].payloads)
        elif self._whole and kind not in INTERNAL_ACTIVITIES:  # a quick read, run locally
            await self._tool_result(attrs.details["result"].payloads)

    async def _tool_result(self, payloads: Any) -> None:
        """A tool run's outcome: its whole result, where the model was shown it cut."""
        if not payloads:
            return
        outcome = await self._one(payloads, ToolOutcome)
        if outcome.full is not None and outcome.call_id is not None:
            self.full_results[outcome.call_id] = outcome.full

    async def _handshake(self, payloads: Any) -> None:
        if not self.tools:
            handshake = await self._one(payloads, WorkerHandshake)
            self.tools = [t.name for t in handshake.tools]

    async def _one(self, payloads: Any, kind: type) -> Any:
        return (await self._client.data_converter.decode(list(payloads), [kind]))[0]


async def full_result(session: Session, workflow_id: str, call_id: str) -> ToolResult:
    """The result of a conversation's tool call: whole where the model was shown it cut, read
    from the history by reference (in the conversation a fork began from, for a call of the
    fork's prefix); `NotFound` for a call the conversation (or its origin) never made."""
    seen: list[str] = []
    while workflow_id not in seen and len(seen) < MAX_FORK_HOPS:
        seen.append(workflow_id)
        rec = await recording(session, workflow_id, audit=False)
        if call_id in rec.full_results:
            return ToolResult(call_id=call_id, conversation_id=workflow_id,
                              text=rec.full_results[call_id], whole=True)
        case = build_case(rec, workflow_id)
        found = next((c for c in case.calls() if c.id == call_id and c.result is not None), None)
        if found is not None:
            return ToolResult(call_id=call_id, conversation_id=workflow_id, text=found.result,
                              whole=False)
        if rec.start.fork is None:
            break
        workflow_id = rec.start.fork.conversation_id
    raise NotFound(f"{seen[0]} made no tool call {call_id!r} with a result"
                   + (f" (nor did {', '.join(seen[1:])}, which it was forked from)"
                      if len(seen) > 1 else ""))


async def export(session: Session, workflow_id: str, name: str | None = None) -> Case:
    rec = await recording(session, workflow_id)
    return build_case(rec, name or workflow_id, exported_at=datetime.now(UTC))


async def fork(session: Session, workflow_id: str, at_step: int, new_id: str, owner: str | None,
               model: str | None = None, system_prompt: str | None = None,
               turn: int | None = None) -> None:
    """Start a fork of a conversation at one of its steps (with `turn`, a step of that turn):
    the original's messages before it, its own id and owner, and the given model or system
    prompt. Nothing of the prefix runs again. `UsageError` for a step it does not have."""
    rec = await recording(session, workflow_id, audit=False, whole=False)
    steps = steps_of(rec, turn)
    if not 1 <= at_step <= len(steps):
        where = f"{workflow_id}" + (f"'s turn {turn}" if turn is not None else "")
        raise UsageError(f"{where} has {len(steps)} step(s): the step must be from 1 to "
                         f"{len(steps)}" if steps else f"{where} has no steps to fork from")
    at, first = steps[at_step - 1]
    messages = prompt_of(first)
    said = next((m.content for m in reversed(messages) if m.role == "user" and m.content), "")
    inp = rec.start.model_copy(update={
        "prompt": clip(f"fork of {workflow_id} at step {at}: {said}", FORK_LABEL_CHARS),
        "model": model or rec.start.model, "system_prompt": system_prompt,
        "owner": owner, "request_id": None, "trace_parent": None, "state": None, "carry": None,
        "one_shot": False,
        "fork": ForkPoint(conversation_id=workflow_id, at_step=at, turn=first.turn,
                          messages=messages)})
    await session.start(inp, new_id, source=f"a fork of {workflow_id}")
