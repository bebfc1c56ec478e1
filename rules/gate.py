"""Pure rules of the human gate: who waits, which call a decision names, what an answer means."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from types import MappingProxyType
from typing import Any

from ..contract import (
    ApprovalPolicy,
    Decision,
    Question,
    Risk,
    ToolDefinition,
    ToolInvocation,
)
from ..contract.bounds import canonical_json, json_size
from .loop import validate_arguments
from .schemas import described, value_errors

YES = frozenset({"yes", "y", "true"})
NO = frozenset({"no", "n", "false"})


@dataclass
class PendingCall:
    """A non-safe call of the current round, waiting for (or holding) its decision."""

    call_id: str
    tool: ToolDefinition
    args: dict[str, Any]
    decision: Decision | None = None
    asked_at: datetime | None = None  # when it came to wait (its approval span's start)
    ticket: str | None = None  # no other call has it (`rules.links.call_ticket`)
    rule: str | None = None  # the policy's rule that asks a person, if one does
    grantable: bool | None = None  # that rule says whether its approval may be remembered
    approvers: list[str] = field(default_factory=list)  # its roles that may decide (empty: any)
    quorum: int = 1  # how many distinct people must approve
    votes: list[str] = field(default_factory=list)  # who has approved so far
    note: str | None = None  # why the reviewer model passed it to a person, if one did


@dataclass
class Refusal:
    reason: str
    # False: a result the conversation still awaits may change it (a model reply that names the
    # call, a tool that asks a question), so the request waits for it (`workflows.decisions.Decisions`)
    final: bool = True


@dataclass
class AnswerCheck:
    """A valid answer: `text` is what the tool (or the model) receives."""

    text: str
    values: list[str] = field(default_factory=list)


POLICY = "policy"  # the approver of calls the conversation's policy lets run
# Approvers that name no person: a one-time link without an addressee, a request that said
# nobody, the policy, the system. Under four eyes, they are not "someone other than the owner".
NOBODY = frozenset({"", "unknown", "link", POLICY, "system"})
RISK_ORDER: Mapping[str, int] = MappingProxyType({"safe": 0, "sensitive": 1, "destructive": 2})


def needs_approval(tool: ToolDefinition, policy: ApprovalPolicy,
                   four_eyes: Collection[str] = ()) -> bool:
    """Whether a call waits for a human: the policy asks for one, or (a risk under four eyes)
    a person other than the owner must decide it, which no policy can do for them."""
    if tool.risk in four_eyes:
        return True
    return tool.risk in policy.require_approval_for and tool.name not in policy.auto_approve


def policy_refusal(
    policy: ApprovalPolicy, catalog: Iterable[ToolDefinition], auto_approvable: list[str] | None
) -> str | None:
    """Why a conversation's approval policy asks for more than the worker allows, or None: it
    may let run without a human only the non-safe tools the worker names (None: any)."""
    if auto_approvable is None:
        return None
    beyond = [t.name for t in catalog
              if t.risk != "safe" and not needs_approval(t, policy) and t.name not in auto_approvable]
    if not beyond:
        return None
    allowed = ", ".join(auto_approvable) or "no tool"
    return (f"the approval policy would let {', '.join(beyond)} run without a human; this worker "
            f"lets a policy approve {allowed} (AGENT_AUTO_APPROVE)")


def policy_approval(tool: ToolDefinition, args: dict[str, Any], now: datetime) -> Decision:
    """The approval a call carries when the policy lets it run without a human."""
    return Decision(call_id="", tool=tool.name, approved=True, approver=POLICY, at=now,
                    args_hash=args_hash(args))


def policy_reason(approved: bool, rule: str | None, note: str | None = None) -> str:
    """What a decision a policy's rule took says: the model reads a denial's."""
    return f"{'allowed' if approved else 'denied'} by {rule}" + (f"; {note}" if note else "")


def execution_refusal(
    name: str, risk: Risk, invocation: ToolInvocation, auto_approvable: Collection[str] | None
) -> str | None:
    """Why a tool activity must not run this call, or None. A tool non-safe now runs only with an
    approval of these exact arguments, given for a risk at least this high; one given by a policy
    only if the worker lets its policy approve the tool."""
    if risk == "safe":
        return None
    approval = invocation.approval
    if approval is None or not approval.approved:
        return f"{name} is {risk} and this call carries no approval"
    if RISK_ORDER[risk] > RISK_ORDER[invocation.risk]:
        return f"{name} is {risk} now, not {invocation.risk} as when the call was approved"
    if approval.args_hash != args_hash(invocation.arguments):
        return f"its arguments are not the ones {approval.approver} approved"
    if approval.approver == POLICY and auto_approvable is not None and name not in auto_approvable:
        return f"this worker does not let a policy approve {name}"
    return None


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
        return undecided or Refusal("no call is waiting for a decision", final=False)
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
            return Refusal(f"unknown call id {call_id}", final=False)
    return list(call_ids)


def check_seen(targets: list[str], pending: dict[str, PendingCall], seen: dict[str, str]
               ) -> Refusal | None:
    """A decision that says which arguments its human saw applies only to those: each named
    call must hold them, and every call it decides must be one the human saw."""
    if not seen:
        return None
    for call_id in targets:
        if call_id not in seen:
            return Refusal(f"call {call_id} is waiting too, and this decision did not see it; "
                           "decide it by its id")
        if seen[call_id] != args_hash(pending[call_id].args):
            return Refusal(seen_reason(call_id))
    return None


def check_tickets(targets: list[str], pending: dict[str, PendingCall], tickets: dict[str, str]
                  ) -> Refusal | None:
    """A decision made for particular calls (a one-time link names its call's ticket) applies
    to those only: a call that has the id but not the ticket is another call (the id used
    again), and the decision is stale for it."""
    for call_id in targets:
        if call_id in tickets and tickets[call_id] != pending[call_id].ticket:
            return Refusal(ticket_reason(call_id))
    return None


def four_eyes_refusal(targets: list[str], pending: dict[str, PendingCall], approver: str,
                      owner: str | None, four_eyes: Collection[str]) -> Refusal | None:
    """Why `approver` may not decide these calls: one's risk is under four eyes
    (AGENT_FOUR_EYES) and the approver is the conversation's owner, or names no person at
    all. A conversation with no recorded owner has no one to hold to it."""
    if not owner_or_nobody(approver, owner):
        return None
    for call_id in targets:
        tool = pending[call_id].tool
        if tool.risk in four_eyes:
            return Refusal(four_eyes_reason(call_id, tool.name, tool.risk, owner, approver))
    return None


def may_decide(approvers: Collection[str], roles: Collection[str]) -> bool:
    """Whether a person with `roles` may decide a call whose rule names `approvers` (an admin
    may decide any)."""
    return not approvers or bool(set(roles) & {*approvers, "admin"})


def rule_refusal(targets: list[str], pending: dict[str, PendingCall], approver: str,
                 roles: Collection[str], approving: bool) -> Refusal | None:
    """Why `approver` may not decide these calls as their policy rule asks: the rule names
    roles they do not have; or it asks several people, and they approved it already, or name
    nobody."""
    for call_id in targets:
        p = pending[call_id]
        if not may_decide(p.approvers, roles):
            has = "+".join(sorted(roles)) or "no role"
            return Refusal(f"call {call_id} ({p.tool.name}): {p.rule} asks "
                           f"{' or '.join(p.approvers)} to decide it, and {approver} has {has}")
        if approving and p.quorum > 1:
            if approver.strip() in NOBODY:
                return Refusal(f"call {call_id} ({p.tool.name}): {p.rule} asks {p.quorum} "
                               "different people to approve it, and this decision names none")
            if approver in p.votes:
                return Refusal(f"call {call_id} ({p.tool.name}): {approver} approved it "
                               f"already; {p.rule} asks {p.quorum} different people")
    return None


def owner_or_nobody(approver: str, owner: str | None) -> bool:
    """Whether `approver` may not decide a call under four eyes: it is the conversation's owner,
    or names no person. (A conversation with no recorded owner has no one to hold to it.)"""
    return owner is not None and (approver == owner or approver.strip() in NOBODY)


def seen_reason(call_id: str) -> str:
    return f"the arguments of call {call_id} are not the ones this decision saw"


def ticket_reason(call_id: str) -> str:
    return (f"call {call_id} is not the call this decision was made for (its id was used "
            "again); it is stale")


def four_eyes_reason(call_id: str, tool: str, risk: str, owner: str, approver: str) -> str:
    """Why `approver` may not decide a call under four eyes: they started the conversation,
    or name no person at all."""
    by = ", and by a person: this decision names none" if approver != owner else ""
    return (f"four eyes: call {call_id} ({tool}, {risk}) must be decided by someone other "
            f"than {owner}, who started the conversation{by}; ask an approver (or end the "
            "conversation)")


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


def _elicited(question: Question, text: str) -> AnswerCheck | Refusal:
    """An answer to an MCP server's elicitation: a JSON object that fits the request's schema
    (bounded, as every schema here: RE2 patterns, no `$ref` fetched). Its text is the canonical
    JSON, which the call's next run hands to the server."""
    try:
        content = json.loads(text)
    except ValueError:
        return Refusal("the answer must be a JSON object (decline or cancel to say no)")
    if not isinstance(content, dict):
        return Refusal("the answer must be a JSON object (decline or cancel to say no)")
    problem = described(value_errors(question.answer_schema or {"type": "object"}, content,
                                     "the answer", "the request's schema"))
    if problem is not None:
        return Refusal(f"the answer does not fit the request's schema: {problem}")
    return AnswerCheck(text=canonical_json(content), values=[text])


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
    if question.kind == "elicitation":
        return _elicited(question, " ".join(values))
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
