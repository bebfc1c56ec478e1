"""A decision over several conversations (a parent's, its subagents'): which conversation owns
each call or question, what would refuse a part, and what was applied when a later part was
refused."""

from __future__ import annotations

from ..contract import (
    AnswerRequest,
    ConfirmRequest,
    ConversationStatus,
    PendingConfirmation,
    PendingQuestion,
    RejectRequest,
    SignalOutcome,
)
from ..rules.gate import NOBODY
from .checks import Refused, clip

HumanRequest = ConfirmRequest | RejectRequest | AnswerRequest

def pending_call(name: str, pending: list[PendingConfirmation]) -> PendingConfirmation | None:
    """The pending call a name picks: its ref (`call_0`, or a subagent's `call_0/call_0`), or a
    bare call id that only one pending call has. A call id that several subagents use is
    refused with their refs, so a decision never reaches a call its human did not pick."""
    by_ref = [p for p in pending if (p.ref or p.call_id) == name]
    if by_ref:
        return by_ref[0]
    by_id = [p for p in pending if p.call_id == name]
    if len(by_id) > 1:
        which = ", ".join(f"{p.ref} ({p.tool} in {p.conversation_id})" for p in by_id)
        raise Refused(f"{name} names {len(by_id)} pending calls: {which}; name one by its ref")
    return by_id[0] if by_id else None


def answer_owner(workflow_id: str, request: AnswerRequest, q: PendingQuestion | None
                 ) -> tuple[str, AnswerRequest]:
    """Where an answer goes, bound to its question: the one it names (its ref, or the call id
    of this conversation's own question), else the one the status shows. An answer naming a
    question that is not the open one is refused, never given to another question."""
    if q is None:  # let the conversation say why (or take it once its question comes)
        return workflow_id, request
    named = request.call_id
    if named is not None and named != (q.ref or q.call_id) and not (
            q.conversation_id is None and named == q.call_id):
        raise Refused(f"the question of {named} is not the one open ({q.ref or q.call_id}: "
                      f"{clip(q.message, 80)}); nothing was answered")
    return q.conversation_id or workflow_id, request.model_copy(update={"call_id": q.call_id})


def part_refusal(part: HumanRequest, status: ConversationStatus) -> str | None:
    """Why the conversation whose own status this is would refuse this part of a decision, as
    far as its status tells: a call or question no longer open there, arguments other than
    those seen, four eyes. (The conversation checks again, whole.)"""
    if isinstance(part, AnswerRequest):
        q = status.pending_question
        if q is None or q.conversation_id is not None or q.call_id != part.call_id:
            return f"the question of {part.call_id} is no longer open in {status.workflow_id}"
        return None
    own = {p.call_id: p for p in status.pending_confirmations if p.conversation_id is None}
    for call_id in part.call_ids:
        call = own.get(call_id)
        if call is None:
            return f"call {call_id} is no longer waiting in {status.workflow_id}"
        if call_id in part.seen and part.seen[call_id] != call.args_hash:
            return f"the arguments of call {call_id} are not the ones this decision saw"
        if call_id in part.tickets and part.tickets[call_id] != call.ticket:
            return f"call {call_id} is not the call this decision was made for"
        if call.four_eyes and part.approver in {status.owner, *NOBODY}:
            return (f"four eyes: call {call_id} ({call.tool}, {call.risk}) must be decided by "
                    f"someone other than {status.owner}")
    return None


def refused_outcome(part: HumanRequest, reason: str) -> SignalOutcome:
    return SignalOutcome(request_id=part.request_id or "", accepted=False, reason=reason)


def stale_child(target: str, part: HumanRequest) -> str:
    """What a part for a subagent that has finished since the status showed its call is."""
    named = ", ".join(getattr(part, "call_ids", [])) or "the question"
    return f"{named} is stale: subagent {target} has finished"


class PartlyApplied(Refused):
    """A decision of several parts that was refused after some parts were taken: exactly what
    was decided, and what was not, with why."""

    def __init__(self, applied: list[tuple[str, HumanRequest]],
                 refused: tuple[str, HumanRequest], reason: str) -> None:
        done = "; ".join(describe_part(t, p) for t, p in applied)
        super().__init__(f"partly applied: {done}; not applied: "
                         f"{describe_part(*refused)}, refused: {reason}")
        self.applied, self.refused = applied, refused


def describe_part(target: str, part: HumanRequest) -> str:
    if isinstance(part, AnswerRequest):
        return f"the answer to {part.call_id} in {target}"
    verb = "approved" if isinstance(part, ConfirmRequest) else "rejected"
    return f"{verb} {', '.join(part.call_ids)} in {target}"
