"""Pure rules of the human gate: who waits, which call a decision names, what an answer means."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from workflows.bounds import json_size
from workflows.decisions import validate_arguments
from workflows.models import ApprovalPolicy, Decision, Question, ToolDefinition

YES = frozenset({"yes", "y", "true"})
NO = frozenset({"no", "n", "false"})


@dataclass
class PendingCall:
    """A non-safe call of the current round, waiting for (or holding) its decision."""

    call_id: str
    tool: ToolDefinition
    args: dict[str, Any]
    decision: Decision | None = None


@dataclass
class Refusal:
    reason: str


@dataclass
class AnswerCheck:
    """A valid answer: `text` is what the tool (or the model) receives."""

    text: str
    values: list[str] = field(default_factory=list)


def needs_approval(tool: ToolDefinition, policy: ApprovalPolicy) -> bool:
    return tool.risk in policy.require_approval_for and tool.name not in policy.auto_approve


def canonical_json(args: dict[str, Any]) -> str:
    return json.dumps(args, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def args_hash(args: dict[str, Any]) -> str:
    return "sha256:" + hashlib.sha256(canonical_json(args).encode()).hexdigest()


def select_calls(
    call_ids: list[str], all_: bool, pending: dict[str, PendingCall], past: dict[str, str]
) -> list[str] | Refusal:
    """The undecided calls a confirm/reject names, or why the request must be refused."""
    if all_ and call_ids:
        return Refusal("name call ids or all, not both")
    if all_:
        undecided = [c for c, p in pending.items() if p.decision is None]
        return undecided or Refusal("no call is waiting for a decision")
    if not call_ids:
        return Refusal("name at least one call id, or all")
    if len(set(call_ids)) != len(call_ids):
        return Refusal("a call id is named twice")
    for call_id in call_ids:
        if call_id in pending:
            decided = pending[call_id].decision
            if decided is not None:
                verdict = "approved" if decided.approved else "rejected"
                return Refusal(f"call {call_id} was already {verdict} by {decided.approver}")
        elif call_id in past:
            return Refusal(f"call {call_id} is stale: {past[call_id]}")
        else:
            return Refusal(f"unknown call id {call_id}")
    return list(call_ids)


def check_edited_args(
    pending: PendingCall, args: Any, named: list[str], max_bytes: int | None = None
) -> Refusal | None:
    """Edited args must name their call explicitly, fit the tool's schema and the size bound."""
    if len(named) != 1:
        return Refusal("edited args apply to exactly one call id, named explicitly")
    if max_bytes is not None and (size := json_size(args)) > max_bytes:
        return Refusal(f"edited args are {size:,} bytes, over the limit of {max_bytes:,} bytes")
    problem = validate_arguments(pending.tool, args)
    if problem is not None:
        return Refusal(f"invalid edited args for {pending.tool.name}: {problem}")
    return None


def check_answer(
    question: Question, values: list[str], max_bytes: int | None = None
) -> AnswerCheck | Refusal:
    values = [v.strip() for v in values]
    if not values or not any(values):
        return Refusal("the answer is empty")
    if max_bytes is not None and (size := json_size(values)) > max_bytes:
        return Refusal(f"the answer is {size:,} bytes, over the limit of {max_bytes:,} bytes")
    if question.kind == "input":
        text = " ".join(values)
        return AnswerCheck(text=text, values=[text])
    if question.kind == "confirm":
        if len(values) != 1 or values[0].lower() not in YES | NO:
            return Refusal("answer yes or no")
        text = "yes" if values[0].lower() in YES else "no"
        return AnswerCheck(text=text, values=[text])
    unknown = [v for v in values if v not in question.options]
    if unknown:
        return Refusal(f"{unknown[0]!r} is not one of the options: {', '.join(question.options)}")
    if question.kind == "choice":
        if len(values) != 1:
            return Refusal("choose exactly one option")
        return AnswerCheck(text=values[0], values=values)
    if len(set(values)) != len(values):
        return Refusal("an option is chosen twice")
    return AnswerCheck(text=json.dumps(values, ensure_ascii=False), values=values)
