"""What the conversation tells the outside: the live event stream and the audit trail.

The stream is Temporal's Workflow Streams (offset-addressed, durable, carried across
continue-as-new); the audit trail is a tail of per-step records kept in the conversation's state,
with what falls off the tail summarised in the memo. Both are bounded: each event and record is
clipped, the stream keeps its latest items, and what they carry to the next run has a byte budget.
"""

from __future__ import annotations

import base64
import dataclasses
from collections import Counter
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.api.common.v1 import Payload
from temporalio.contrib.workflow_streams import WorkflowStream, WorkflowStreamState
from temporalio.converter import value_to_type

from ..contract import AuditRecord, Decision, StreamEvent, Usage
from ..contract.bounds import (
    MAX_APPROVER_BYTES,
    MAX_AUDIT_RECORD_BYTES,
    MAX_AUDIT_RECORDS,
    MAX_EVENT_TEXT_BYTES,
    MAX_PREVIEW_BYTES,
    MAX_REPLY_TEXT_BYTES,
    MAX_STREAM_ITEMS,
    MAX_THOUGHT_BYTES,
    MAX_TOOL_NAME_BYTES,
    STREAM_CARRY_BYTES,
    TOKEN_ITEM_CHARS,
    Tail,
    clip,
    clip_bytes,
    json_size,
    keep_within,
    preview_args,
)
from ..contract.names import EVENTS_TOPIC, OFFSET_QUERY, TOKENS_TOPIC
from ..contract.state import ConversationState, StreamSnapshot
from ..rules.gate import Refusal
from ..rules.stopping import said_so_far
from .notifier import Notifier

# Who started a conversation (a subagent: its parent's owner): a user's list filters on it.
CARRIED_PUBLISHERS = 16  # dedup state of the latest token publishers (LLM activity attempts)
MAX_OPTIONS, MAX_OPTION_BYTES = 32, 128  # a question's options, as an event shows them
MAX_MEMO_TOOLS, OTHER_TOOLS = 32, "(other tools)"  # tool names the memo counts by name


class Reporter:
    def __init__(self, state: ConversationState, audit_bytes: int | None) -> None:
        # Called from the workflow's @workflow.init, as WorkflowStream requires.
        prior, state.stream = stream_state(state.stream), None  # the stream holds it now; `carry`
        self.stream = WorkflowStream(prior_state=prior)  # gives it back
        self._events = self.stream.topic(EVENTS_TOPIC, type=StreamEvent)
        self._tokens = self.stream.topic(TOKENS_TOPIC, type=StreamEvent)
        self._base = prior.base_offset if prior is not None else 0
        self._state = state
        self._audit = Tail(state.audit, MAX_AUDIT_RECORDS, audit_bytes)
        self.notifier = Notifier(state, self.record)  # events for webhooks

    def emit(self, kind: str, *, turn: int | None = None, step: int | None = None,
             **fields: Any) -> None:
        """Publish an event of the current turn (and step, unless given)."""
        current = self._state.current
        if fields.get("text") is not None:
            fields["text"] = clip(fields["text"], MAX_EVENT_TEXT_BYTES)
        if fields.get("args") is not None:
            fields["args"] = preview_args(fields["args"])
        if fields.get("options"):
            fields["options"] = [clip(o, MAX_OPTION_BYTES) for o in fields["options"][:MAX_OPTIONS]]
        self._events.publish(StreamEvent(  # type: ignore[arg-type]
            kind=kind, turn=current.number if turn is None else turn,
            step=current.steps if step is None else step, **fields,
        ))

    def tokens(self, step: int, text: str) -> None:
        """A model's text that its call did not stream (it came whole in its first batch), on
        the token topic as the call would have put it, within the bound of a reply's text."""
        text = clip_bytes(text, MAX_REPLY_TEXT_BYTES, "reply text")
        for i in range(0, len(text), TOKEN_ITEM_CHARS):
            self._tokens.publish(StreamEvent(kind="token", turn=self._state.current.number,
                                             step=step, attempt=1,
                                             text=text[i:i + TOKEN_ITEM_CHARS]))

    def said(self, turn: int, step: int) -> str:
        """What the model call of `turn`'s `step` had put on the token topic, read back from the
        stream's log (the calls that streamed it are in the history): what a stop keeps."""
        convert = workflow.payload_converter()
        events = [convert.from_payload(Payload.FromString(base64.b64decode(item.data)), StreamEvent)
                  for item in self.stream.get_state().log if item.topic == TOKENS_TOPIC]
        return said_so_far(events, turn, step)

    def announce(self, result: list[Decision] | Refusal) -> None:
        """Put decisions (or a refused decision) on the live stream."""
        if isinstance(result, Refusal):
            self.emit("decision_refused", text=result.reason)
            return
        for d in result:
            self.emit("decision_taken", call_id=d.call_id, tool=d.tool, approver=d.approver,
                      status="approved" if d.approved else "rejected", text=d.reason)

    def record(self, record: AuditRecord) -> None:
        """Keep a step's audit record (clipped), and let the oldest stream items go. A step's
        record is written once its observations are in, after the answers its questions got:
        it goes before them, so that the trail reads in the order things happened."""
        answers = []
        while record.kind == "step" and self._audit.items and \
                self._audit.items[-1].kind == "answer" and self._audit.items[-1].turn == record.turn:
            answers.insert(0, self._audit.pop_last())
        dropped = [gone for r in (_clipped(record), *answers) for gone in self._audit.append(r)]
        if dropped:
            self._state.audit_dropped += len(dropped)
            workflow.upsert_memo({"audit_dropped": _summary(dropped, self._state.audit_dropped)})
        end = workflow.get_query_handler(OFFSET_QUERY)()
        if end - self._base > MAX_STREAM_ITEMS:
            self._base = end - MAX_STREAM_ITEMS
            self.stream.truncate(self._base)

    def record_input(self, kind: str, turn: int | None, by: str | None,
                     text: str | None) -> None:
        """A person's input in the audit trail: who started the conversation, sent a message
        (at the turn that answers it), answered a question or ended it."""
        self.record(AuditRecord(
            at=workflow.now(), turn=turn or self._state.current.number, step=0, thought=None,
            tokens=Usage(), kind=kind, by=by or "unknown", text=text))  # type: ignore[arg-type]

    @property
    def audit(self) -> list[AuditRecord]:
        return self._audit.items

    def carry(self) -> StreamSnapshot:
        """The stream's state for the next run (after `close()` and every handler finished)."""
        carried = carried_stream(self.stream.get_state(publisher_ttl=timedelta(minutes=15)))
        return StreamSnapshot.model_validate(dataclasses.asdict(carried))

    def close(self) -> None:
        """Release waiting subscribers so the workflow can complete; they read the rest by query."""
        self.stream.detach_pollers()


def stream_state(snapshot: StreamSnapshot | None) -> WorkflowStreamState | None:
    """Temporal's stream state from the contract's snapshot of it (the same fields)."""
    if snapshot is None:
        return None
    return value_to_type(WorkflowStreamState, snapshot.model_dump(mode="json"))


def carried_stream(state: WorkflowStreamState) -> WorkflowStreamState:
    """The stream's latest items within `STREAM_CARRY_BYTES`, and its latest publishers."""
    size, keep = 0, 0
    for item in reversed(state.log):
        size += json_size(item.data) + json_size(item.topic) + 16
        if size > STREAM_CARRY_BYTES:
            break
        keep += 1
    latest = sorted(state.publishers.items(), key=lambda p: p[1].last_seen)[-CARRIED_PUBLISHERS:]
    return WorkflowStreamState(
        log=state.log[len(state.log) - keep:],
        base_offset=state.base_offset + len(state.log) - keep,
        publishers=dict(latest),
    )


def _clipped(record: AuditRecord) -> AuditRecord:
    """The record within `MAX_AUDIT_RECORD_BYTES`: its thought and inputs clipped, and as many of
    its actions as fit."""
    actions = [
        a.model_copy(update={"input": preview_args(a.input) if isinstance(a.input, dict)
                             else clip(a.input, MAX_PREVIEW_BYTES)})
        for a in record.actions
    ]
    bare = record.model_copy(update={"thought": clip(record.thought, MAX_THOUGHT_BYTES),
                                     "text": clip(record.text, MAX_THOUGHT_BYTES),
                                     "by": clip(record.by, MAX_APPROVER_BYTES), "actions": []})
    kept, left_out = keep_within(actions, MAX_AUDIT_RECORD_BYTES - json_size(bare) - 32)
    return bare.model_copy(update={"actions": kept, "actions_left_out": len(left_out)})


def _summary(dropped: list[AuditRecord], total: int) -> dict[str, Any]:
    previous = workflow.memo_value("audit_dropped", default={}) or {}
    tools: Counter[str] = Counter(previous.get("tools", {}))
    decisions: Counter[str] = Counter(previous.get("decisions", {}))
    for record in dropped:
        for action in record.actions:
            tools[clip(action.tool, MAX_TOOL_NAME_BYTES) or ""] += 1
            if action.decision is not None:
                decisions["approved" if action.decision.approved else "rejected"] += 1
    return {
        "records": total,
        "until_turn": dropped[-1].turn,
        "until_step": dropped[-1].step,
        "tools": counted_tools(tools),
        "decisions": dict(decisions),
    }


def counted_tools(tools: Counter[str]) -> dict[str, int]:
    """The most used tool names, and the rest as one count: a model that calls a new made-up
    name at every step must not grow the memo without bound."""
    named = Counter({name: n for name, n in tools.items() if name != OTHER_TOOLS})
    kept = dict(named.most_common(MAX_MEMO_TOOLS))
    rest = sum(tools.values()) - sum(kept.values())
    return {**kept, OTHER_TOOLS: rest} if rest else kept
