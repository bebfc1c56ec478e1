"""The calls of the current round that wait for a person's approval, and the decisions on them.

The rules are in `rules.gate`; this holds what is pending (a run hands over only when nothing
is, so it crosses no continue-as-new) and records each decision in the turn, with its span. Every
plan changes nothing; a refused request leaves the calls as they were."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ..contract import (
    ConfirmRequest,
    Decision,
    PendingConfirmation,
    RejectRequest,
    ToolDefinition,
)
from ..contract.bounds import (
    MAX_APPROVER_BYTES,
    MAX_REASON_BYTES,
    MAX_REMEMBERED_CALLS,
    MAX_TURN_DECISIONS,
    Limits,
    clip,
    keep_last,
)
from ..contract.state import ConversationState
from ..rules import gate, tracing
from ..rules.gate import PendingCall, Refusal
from . import telemetry


class Approvals:
    """The round's calls that wait for (or hold) a person's decision."""

    def __init__(self, state: ConversationState, limits: Limits, owner: str | None) -> None:
        self._state = state
        self._limits = limits
        self.owner = owner  # who started the conversation (four eyes)
        self.pending: dict[str, PendingCall] = {}
        # calls the round will hold once its safe calls have run: a request naming one waits
        # for it, as for a result on its way
        self.coming: set[str] = set()

    # ----- the round -----

    def expect(self, call_ids: set[str]) -> None:
        """The calls this round holds once its safe calls have run: a request that names one
        waits until it is held, not refused while the reads run."""
        self.coming = call_ids

    def hold(self, call_id: str, tool: ToolDefinition, args: dict[str, Any],
             now: datetime | None = None, ticket: str | None = None) -> None:
        self.pending[call_id] = PendingCall(call_id=call_id, tool=tool, args=args, asked_at=now,
                                            ticket=ticket)
        self.coming.discard(call_id)

    def close_round(self) -> None:
        """The round's calls all have results: their ids become stale."""
        for call_id, pending in self.pending.items():
            d = pending.decision
            verdict = "approved" if d and d.approved else "rejected"
            self.remember_call(call_id, f"it was already {verdict} by {d.approver if d else 'nobody'}")
        self.pending = {}

    def abandon_round(self, reason: str, now: datetime) -> None:
        """The round stops half-way: its undecided calls are rejected by the system."""
        for call_id, pending in self.pending.items():
            if pending.decision is None:
                self.decide_by_system(call_id, reason, now)
        self.close_round()

    def remember_call(self, call_id: str, what: str) -> None:
        self._state.past_calls = keep_last([*self._state.past_calls, (call_id, what)],
                                           MAX_REMEMBERED_CALLS)

    def is_decided(self, call_id: str) -> bool:
        return self.pending[call_id].decision is not None

    def waiting(self) -> bool:
        return any(p.decision is None for p in self.pending.values())

    # ----- decisions -----

    def plan(self, request: ConfirmRequest | RejectRequest) -> list[str] | Refusal:
        """The calls a decision would decide, or why it must be refused. Changes nothing."""
        targets = gate.select_calls(request.call_ids, request.all, self.pending,
                                    dict(self._state.past_calls))
        if isinstance(targets, Refusal):
            return targets
        refusal = (gate.check_seen(targets, self.pending, request.seen)
                   or gate.check_tickets(targets, self.pending, request.tickets)
                   or gate.four_eyes_refusal(targets, self.pending,
                                             clip(request.approver, MAX_APPROVER_BYTES) or "",
                                             self.owner, self._state.four_eyes))
        if refusal is None and isinstance(request, ConfirmRequest) and request.args is not None:
            refusal = gate.check_edited_args(self.pending[targets[0]], request.args,
                                             request.call_ids, self._limits.args_bytes)
        return refusal or targets

    def decide(self, request: ConfirmRequest | RejectRequest, now: datetime
               ) -> list[Decision] | Refusal:
        """Approve or reject the calls a request names, or refuse it whole and change nothing."""
        targets = self.plan(request)
        if isinstance(targets, Refusal):
            return targets
        if isinstance(request, ConfirmRequest):
            if request.args is not None:
                self.pending[targets[0]].args = request.args
            approved, reason = True, None
        else:
            approved, reason = False, request.reason.strip() or "no reason given"
        return [self._decide(self.pending[c], approved, request.approver, now, reason,
                             request.trace_parent) for c in targets]

    def decide_by_system(self, call_id: str, reason: str, now: datetime) -> Decision:
        return self._decide(self.pending[call_id], False, "system", now, reason)

    def _decide(
        self, pending: PendingCall, approved: bool, approver: str, now: datetime, reason: str | None,
        decided_in: str | None = None,
    ) -> Decision:
        """Record a decision (`decided_in`: the span of the request that carried it, which the
        approval's span links to)."""
        pending.decision = Decision(
            call_id=pending.call_id, tool=pending.tool.name, approved=approved,
            approver=clip(approver, MAX_APPROVER_BYTES) or "unknown", at=now,
            args_hash=gate.args_hash(pending.args), reason=clip(reason, MAX_REASON_BYTES),
        )
        turn = self._state.current
        turn.decisions = keep_last([*turn.decisions, pending.decision], MAX_TURN_DECISIONS)
        asked = pending.asked_at or now
        outcome, waited = "approved" if approved else "rejected", (now - asked).total_seconds()
        telemetry.emit(f"approval {pending.tool.name}",
                       tracing.child_span(turn.trace, f"approval/{pending.call_id}"),
                       turn.trace, asked, now,
                       {"gen_ai.tool.name": pending.tool.name,
                        "gen_ai.tool.call.id": pending.call_id, "agent.tool.risk": pending.tool.risk,
                        "agent.approval.approver": pending.decision.approver,
                        "agent.approval.outcome": outcome,
                        "agent.approval.reason": pending.decision.reason,
                        "agent.approval.wait_s": waited},
                       links=[decided_in] if decided_in else None)
        telemetry.approval_waited(pending.tool.name, outcome, waited)
        return pending.decision

    # ----- what the status shows -----

    def pending_confirmations(self) -> list[PendingConfirmation]:
        return [
            PendingConfirmation(call_id=p.call_id, tool=p.tool.name, args=p.args, risk=p.tool.risk,
                                ref=p.call_id, args_hash=gate.args_hash(p.args),
                                four_eyes=self.owner is not None
                                and p.tool.risk in self._state.four_eyes, ticket=p.ticket)
            for p in self.pending.values()
            if p.decision is None
        ]

    def pending_schemas(self) -> dict[str, dict[str, Any]]:
        return {call_id: p.tool.parameters for call_id, p in self.pending.items()
                if p.decision is None}
