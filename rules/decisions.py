"""A person's decision, planned: which conversation owns each call or question it names (this
one, or a subagent at any depth, whose waiting calls this one holds from its reports), and what
would refuse a subagent's part as far as those reports tell (the subagent checks again, whole,
with `rules.gate`). Pure: the workflow plans with it in an Update's validator and in its
handler alike (`workflows.decisions`)."""

from __future__ import annotations

from dataclasses import dataclass

from ..contract import (
    AnswerRequest,
    ConfirmRequest,
    HumanRequest,
    PendingConfirmation,
    PendingQuestion,
)
from ..contract.bounds import MAX_APPROVER_BYTES, clip
from .gate import Refusal, four_eyes_reason, owner_or_nobody, seen_reason, ticket_reason


@dataclass(frozen=True)
class Part:
    """What one conversation takes of a decision: `owner` None is this conversation; else the
    subagent that owns the calls (or the question) `request` names by its own ids."""

    owner: str | None
    request: HumanRequest


def pending_call(name: str, shown: list[PendingConfirmation]
                 ) -> PendingConfirmation | Refusal | None:
    """The waiting call a name picks: its ref (`call_0`, or a subagent's `call_0/call_0`), or a
    bare call id that only one waiting call has. A call id that several conversations use is
    refused with their refs, so a decision never reaches a call its human did not pick."""
    by_ref = [p for p in shown if (p.ref or p.call_id) == name]
    if by_ref:
        return by_ref[0]
    by_id = [p for p in shown if p.call_id == name]
    if len(by_id) > 1:
        which = ", ".join(f"{p.ref} ({p.tool} in {p.conversation_id or 'this conversation'})"
                          for p in by_id)
        return Refusal(f"{name} names {len(by_id)} waiting calls: {which}; name one by its ref")
    return by_id[0] if by_id else None


def route(request: HumanRequest, shown: list[PendingConfirmation],
          question: PendingQuestion | None) -> list[Part] | Refusal:
    """A request split by the conversations that own what it names, in the order it names
    them. `shown` and `question` are what this conversation's status shows: its own waiting
    calls and question, and those its subagents reported. A subagent's part names its calls by
    their own ids, bound to the arguments shown here (unless the request says which it saw),
    and carries the request id, suffixed `-1`, `-2`... after the first part. A name shown
    nowhere is this conversation's to judge (a call its next reply may bring)."""
    if isinstance(request, AnswerRequest):
        return _route_answer(request, question)
    if not any(p.conversation_id for p in shown):
        return [Part(None, request)]
    if request.all:
        if request.call_ids:
            return Refusal("name call ids or all, not both")
        if isinstance(request, ConfirmRequest) and request.args is not None:
            return Refusal("edited args apply to exactly one call id, named explicitly")
    names = [p.ref or p.call_id for p in shown] if request.all else request.call_ids
    groups: dict[str | None, tuple[list[str], dict[str, str], dict[str, str]]] = {}
    for name in names:
        call = pending_call(name, shown)
        if isinstance(call, Refusal):
            return call
        owner = call.conversation_id if call is not None else None
        ids, seen, tickets = groups.setdefault(owner, ([], {}, {}))
        ids.append(call.call_id if call is not None else name)
        hashed = request.seen.get(name) or (call.args_hash if owner is not None else None)
        if hashed is not None:
            seen[ids[-1]] = hashed
        if (ticket := request.tickets.get(name)) is not None:
            tickets[ids[-1]] = ticket
    rid = request.request_id
    return [Part(owner, request.model_copy(update={
        "call_ids": ids, "all": False, "seen": seen, "tickets": tickets,
        "request_id": rid if n == 0 or rid is None else f"{rid}-{n}"}))
        for n, (owner, (ids, seen, tickets)) in enumerate(groups.items())]


def _route_answer(request: AnswerRequest, question: PendingQuestion | None
                  ) -> list[Part] | Refusal:
    """An answer goes to the question it names (its ref), else to the one shown: a subagent's
    question to that subagent, bound to its call id. One naming another question than the
    subagent's that is open is refused, never given to another question."""
    if question is None or question.conversation_id is None:
        return [Part(None, request)]
    named = request.call_id
    if named is not None and named != question.ref:
        return Refusal(f"the question of {named} is not the one open ({question.ref}: "
                       f"{clip(question.message, 80)})")
    return [Part(question.conversation_id,
                 request.model_copy(update={"call_id": question.call_id}))]


def held_refusal(part: Part, shown: list[PendingConfirmation], owner: str | None
                 ) -> str | None:
    """Why the subagent that owns a part would refuse it, as far as what it reported tells: a
    call no longer waiting there, arguments other than those seen, another call under the id,
    four eyes (`owner`: who started the conversation, and its subagents)."""
    request = part.request
    if isinstance(request, AnswerRequest):
        return None  # routed to the question shown (`route`); the subagent checks the answer
    held = {p.call_id: p for p in shown if p.conversation_id == part.owner}
    approver = clip(request.approver, MAX_APPROVER_BYTES) or ""
    for call_id in request.call_ids:
        call = held.get(call_id)
        if call is None:
            return f"call {call_id} is no longer waiting in {part.owner}"
        if call_id in request.seen and request.seen[call_id] != call.args_hash:
            return seen_reason(call_id)
        if call_id in request.tickets and request.tickets[call_id] != call.ticket:
            return ticket_reason(call_id)
        if call.four_eyes and owner is not None and owner_or_nobody(approver, owner):
            return four_eyes_reason(call_id, call.tool, call.risk, owner, approver)
    return None


def describe(part: Part) -> str:
    """A part as a partly applied decision names it."""
    where = f" in {part.owner}" if part.owner else ""
    request = part.request
    if isinstance(request, AnswerRequest):
        return f"the answer to {request.call_id or 'the question'}{where}"
    verb = "approved" if isinstance(request, ConfirmRequest) else "rejected"
    return f"{verb} {', '.join(request.call_ids) or 'all'}{where}"


def partly_applied(applied: list[Part], refused: list[tuple[Part, str]], parts: int) -> str:
    """Why a decision was refused after it was checked whole (a subagent's call changed
    meanwhile): exactly what was decided, if anything, and what was not, with why."""
    if not applied:
        return whole(refused[0][1], parts)
    done = "; ".join(map(describe, applied))
    not_done = "; ".join(f"{describe(part)}, refused: {reason}" for part, reason in refused)
    return f"partly applied: {done}; not applied: {not_done}"


def whole(reason: str, parts: int) -> str:
    """The refusal of a decision of several parts, which takes none of them."""
    return f"{reason}; nothing was decided" if parts > 1 else reason

