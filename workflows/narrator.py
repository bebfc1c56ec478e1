"""What the conversation tells the outside: the live event stream and the audit trail.

The stream is Temporal's Workflow Streams (offset-addressed, durable, carried across
continue-as-new); the audit trail is a bounded tail of per-step records kept in workflow state,
with what falls off the tail summarised in the memo.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from temporalio import workflow
from temporalio.contrib.workflow_streams import WorkflowStream, WorkflowStreamState

from workflows.models import AuditRecord, StreamEvent

EVENTS_TOPIC = "events"
TOKENS_TOPIC = "tokens"
MAX_AUDIT_RECORDS = 500
MAX_CARRIED_STREAM_ITEMS = 1000


class Narrator:
    def __init__(
        self, stream_state: WorkflowStreamState | None = None,
        audit: list[AuditRecord] | None = None, audit_dropped: int = 0,
    ) -> None:
        # Called from the workflow's @workflow.init, as WorkflowStream requires.
        self.stream = WorkflowStream(prior_state=stream_state)
        self._events = self.stream.topic(EVENTS_TOPIC, type=StreamEvent)
        self.audit: list[AuditRecord] = list(audit or [])
        self.audit_dropped = audit_dropped

    def emit(self, kind: str, **fields: Any) -> None:
        self._events.publish(StreamEvent(kind=kind, **fields))  # type: ignore[arg-type]

    def record(self, record: AuditRecord) -> None:
        self.audit.append(record)
        overflow = len(self.audit) - MAX_AUDIT_RECORDS
        if overflow > 0:
            dropped, self.audit = self.audit[:overflow], self.audit[overflow:]
            self.audit_dropped += overflow
            workflow.upsert_memo({"audit_dropped": _summary(dropped, self.audit_dropped)})

    def carry(self) -> dict[str, Any]:
        """State for the next run (after `close()` and every handler finished), trimmed."""
        state = self.stream.get_state()
        end = state.base_offset + len(state.log)
        if len(state.log) > MAX_CARRIED_STREAM_ITEMS:
            self.stream.truncate(end - MAX_CARRIED_STREAM_ITEMS)
            state = self.stream.get_state()
        return {"stream": state, "audit": self.audit, "audit_dropped": self.audit_dropped}

    def close(self) -> None:
        """Release waiting subscribers so the workflow can complete; they read the rest by query."""
        self.stream.detach_pollers()


def _summary(dropped: list[AuditRecord], total: int) -> dict[str, Any]:
    previous = workflow.memo_value("audit_dropped", default={}) or {}
    tools: Counter[str] = Counter(previous.get("tools", {}))
    decisions: Counter[str] = Counter(previous.get("decisions", {}))
    for record in dropped:
        for action in record.actions:
            tools[action.tool] += 1
            if action.decision is not None:
                decisions["approved" if action.decision.approved else "rejected"] += 1
    return {
        "records": total,
        "until_turn": dropped[-1].turn,
        "until_step": dropped[-1].step,
        "tools": dict(tools),
        "decisions": dict(decisions),
    }
