"""The names a conversation answers to: its workflow type, signals, Updates and queries, and its
stream's topics. Clients call them by these names, with what each answers; the workflow
(`workflows.conversation`) registers them, and `tests/tree/test_layers.py` holds the two together."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .inputs import SignalOutcome
from .policy import Grant
from .status import AuditRecord, ConversationStatus

WORKFLOW_TYPE = "ConversationWorkflow"

EVENTS_TOPIC = "events"
TOKENS_TOPIC = "tokens"
OFFSET_QUERY = "__temporal_workflow_stream_offset"  # registered by Temporal's WorkflowStream

SAY_SIGNAL = "say"
END_SIGNAL = "end"
STOP_SIGNAL = "stop"  # the turn in flight ends now; the conversation goes on
CONFIRM_SIGNAL = "confirm"
REJECT_SIGNAL = "reject"
ANSWER_SIGNAL = "answer"
CHILD_STATUS_SIGNAL = "child_status"  # a subagent's report to its parent
# a part of a decision, from an ancestor to the subagent that owns it, and what became of it
ROUTED_DECISION_SIGNAL = "routed_decision"
DECISION_REPLY_SIGNAL = "decision_reply"
PUSH_TARGETS_SIGNAL = "a2a_push_targets"  # the A2A push configs its turns are delivered to
POLICY_CHANGED_SIGNAL = "policy_changed"  # a worker's policy: waiting calls are judged again


@dataclass(frozen=True)
class Asked:
    """A query or an Update, by name, with the type of what it answers."""

    name: str
    answers: Any


STATUS = Asked("status", ConversationStatus)
HISTORY = Asked("history", list[AuditRecord])
PENDING_SCHEMAS = Asked("pending_schemas", dict[str, dict[str, Any]])
SIGNAL_OUTCOME = Asked("signal_outcome", SignalOutcome | None)

SEND_MESSAGE = Asked("send_message", SignalOutcome)
DECIDE_CONFIRM = Asked("decide_confirm", SignalOutcome)
DECIDE_REJECT = Asked("decide_reject", SignalOutcome)
GIVE_ANSWER = Asked("give_answer", SignalOutcome)
DECIDE = Asked("decide", SignalOutcome)  # several decisions and answers, taken whole
GRANTS = Asked("grants", list[Grant])  # the approvals remembered and in force
REVOKE_GRANT = Asked("revoke_grant", SignalOutcome)


def relative_id(conversation_id: str, ancestor_id: str) -> str:
    """A subagent's id as seen from an ancestor: its path of call ids (`<ancestor>/<call id>`
    is a child's id)."""
    prefix = f"{ancestor_id}/"
    return conversation_id.removeprefix(prefix)


def version_label(version: Any) -> str | None:
    """A Worker Deployment Version (`temporalio.common.WorkerDeploymentVersion`) as status and
    `agent list --version` name it: `NAME:ID`, as Temporal's
    `TemporalWorkerDeploymentVersion` search attribute holds it. None: unversioned (Temporal
    gives an unversioned worker's task a version without a deployment name, and a build id)."""
    if version is None or not version.deployment_name:
        return None
    return f"{version.deployment_name}:{version.build_id}"
