"""The calls of the current round that wait for a person's approval, and the decisions on them.

The rules are in `rules.gate`; this holds what is pending (a run hands over only when nothing
is, so it crosses no continue-as-new) and records each decision in the turn, with its span. Every
plan changes nothing; a refused request leaves the calls as they were."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from temporalio import workflow

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
from ..contract.policy import Grant, Verdict
from ..contract.state import ConversationState
from ..rules import gate, grants, tracing
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
        self._made: list[Grant] = []  # grants not yet in the audit trail

    # ----- the round -----

    def expect(self, call_ids: set[str]) -> None:
        """The calls this round holds once its safe calls have run: a request that names one
        waits until it is held, not refused while the reads run."""
        self.coming = call_ids

    def hold(self, call_id: str, tool: ToolDefinition, args: dict[str, Any],
             now: datetime | None = None, ticket: str | None = None,
             verdict: Verdict | None = None) -> None:
        verdict = verdict or Verdict(call_id=call_id)
        self.pending[call_id] = PendingCall(
            call_id=call_id, tool=tool, args=args, asked_at=now, ticket=ticket,
            rule=verdict.rule, grantable=verdict.grantable, approvers=list(verdict.approvers),
            quorum=verdict.quorum, note=verdict.note)
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
        approver = clip(request.approver, MAX_APPROVER_BYTES) or ""
        refusal = (gate.check_seen(targets, self.pending, request.seen)
                   or gate.check_tickets(targets, self.pending, request.tickets)
                   or gate.four_eyes_refusal(targets, self.pending, approver, self.owner,
                                             self._state.four_eyes)
                   or gate.rule_refusal(targets, self.pending, approver, request_roles(request),
                                        isinstance(request, ConfirmRequest)))
        if refusal is None and isinstance(request, ConfirmRequest) and request.args is not None:
            refusal = gate.check_edited_args(self.pending[targets[0]], request.args,
                                             request.call_ids, self._limits.args_bytes)
        if refusal is None and isinstance(request, ConfirmRequest):
            refusal = self._remember_refusal(request, targets)
        return refusal or targets

    def _remember_refusal(self, request: ConfirmRequest, targets: list[str]) -> Refusal | None:
        """Why the approval cannot be remembered as the request asks, or None."""
        why = grants.remember_refusal(request.remember, request.for_s, request.uses)
        if why is None and request.remember not in (None, "call"):
            if request.approver.strip() in gate.NOBODY:
                why = "a remembered approval needs a person's name; this decision names none"
            elif request.remember == "owner" and not (self.owner and self._state.owner_grants):
                why = ("an approval is remembered for the owner only in a conversation that has "
                       "one, on workers that keep owner grants (AGENT_MEMORY); remember it for "
                       "the conversation")
            for call_id in targets:
                p = self.pending[call_id]
                why = why or grants.ungrantable(p.tool.name, p.tool.risk, p.grantable,
                                                self._state.four_eyes, self.owner is not None,
                                                p.quorum)
            if why is None and len(self._state.grants) + len(targets) > grants.MAX_GRANTS:
                why = (f"this conversation holds {grants.MAX_GRANTS} grants already; revoke one "
                       "first")
        return None if why is None else Refusal(why)

    def decide(self, request: ConfirmRequest | RejectRequest, now: datetime
               ) -> list[Decision] | Refusal:
        """Approve or reject the calls a request names, or refuse it whole and change nothing."""
        targets = self.plan(request)
        if isinstance(targets, Refusal):
            return targets
        if isinstance(request, ConfirmRequest):
            if request.args is not None:  # what was approved so far was other arguments
                self.pending[targets[0]].args, self.pending[targets[0]].votes = request.args, []
            approved, reason = True, None
        else:
            approved, reason = False, request.reason.strip() or "no reason given"
        taken = []
        for call_id in targets:
            pending, why = self.pending[call_id], reason
            if approved and pending.quorum > 1:
                pending.votes = [*pending.votes, clip(request.approver, MAX_APPROVER_BYTES) or ""]
                if len(pending.votes) < pending.quorum:
                    continue  # it waits for the others
                why = f"approved by {', '.join(pending.votes)} ({pending.rule})"
            taken.append(self._decide(pending, approved, request.approver, now, why,
                                      request.trace_parent))
        if isinstance(request, ConfirmRequest) and request.remember in ("args", "conversation",
                                                                       "owner"):
            for call_id in targets:
                self._remember(self.pending[call_id], request, now)
            taken += self.decide_by_grants(now)
        return taken

    # ----- grants -----

    def _remember(self, pending: PendingCall, request: ConfirmRequest, now: datetime) -> None:
        """A grant of this approval; it replaces the same person's grant of the same reach."""
        self._state.grants_made += 1
        grant = grants.new_grant(self._state.grants_made, pending.tool.name,
                                 request.remember or "", gate.args_hash(pending.args),
                                 clip(request.approver, MAX_APPROVER_BYTES) or "unknown", now,
                                 request.for_s, request.uses, request.roles,
                                 workflow.info().workflow_id)
        if grant.scope == "owner":  # kept in the workers' store before the call runs
            self._state.grants_to_keep = [*self._state.grants_to_keep, grant]
        else:
            kept = [g for g in grants.live(self._state.grants, now)
                    if (g.tool, g.scope, g.args_hash, g.by) != (grant.tool, grant.scope,
                                                                grant.args_hash, grant.by)]
            self._state.grants = [*kept, grant]
        self._made.append(grant)
        workflow.logger.info("grant %s: %s (%s) by %s", grant.id, grant.tool, grant.scope, grant.by)

    def grant_for(self, call_id: str, tool: ToolDefinition, args: dict[str, Any],
                  verdict: Verdict | None, now: datetime) -> Grant | None:
        """The grant that lets this call run without asking, if one does (used: counted): one
        of someone the call's rule would let decide it, where a grant may decide it at all."""
        verdict = verdict or Verdict(call_id="")
        if grants.ungrantable(tool.name, tool.risk, verdict.grantable, self._state.four_eyes,
                              self.owner is not None, verdict.quorum) is not None:
            return None
        grant = grants.covering([g for g in [*self._state.grants, *self._state.grants_to_keep]
                                 if gate.may_decide(verdict.approvers, g.roles)],
                                tool.name, gate.args_hash(args), now)
        if grant is None:
            return None
        state = self._state
        if grant.scope == "owner":  # its use goes to the store with it
            turn = state.current
            key = grants.use_key(workflow.info().workflow_id, turn.number, turn.steps, call_id)
            state.kept_uses = [*state.kept_uses, (grant.id, key)]
            state.grants_to_keep = [grants.used(g) if g.id == grant.id else g
                                    for g in state.grants_to_keep]
        else:
            state.grants = [grants.used(g) if g.id == grant.id else g for g in state.grants]
        return grant

    def granted(self, grant: Grant, call_id: str, tool: str, args: dict[str, Any],
                now: datetime) -> Decision:
        """The approval a grant gives a call: its granter's, naming the grant."""
        return self.record(Decision(
            call_id=call_id, tool=tool, approved=True, approver=grant.by, at=now,
            args_hash=gate.args_hash(args), reason=grants.grant_note(grant), grant=grant.id))

    def record(self, decision: Decision) -> Decision:
        """A decision taken without asking (a grant's, a policy rule's), in the turn's list."""
        turn = self._state.current
        turn.decisions = keep_last([*turn.decisions, decision], MAX_TURN_DECISIONS)
        return decision

    def decide_by_grants(self, now: datetime) -> list[Decision]:
        """The waiting calls a grant now covers, approved by it."""
        taken = []
        for pending in self.pending.values():
            if pending.decision is not None:
                continue
            grant = self.grant_for(pending.call_id, pending.tool, pending.args, Verdict(
                call_id=pending.call_id, grantable=pending.grantable,
                approvers=pending.approvers, quorum=pending.quorum), now)
            if grant is not None:
                taken.append(self.decide_by_grant(pending.call_id, grant, now))
        return taken

    def find_grant(self, grant_id: str) -> Grant | Refusal:
        grant = next((g for g in self._state.grants if g.id == grant_id), None)
        return grant or Refusal(f"no grant {grant_id!r} in this conversation (grants lists "
                                "those in force)")

    def revoke(self, grant_id: str) -> Grant | Refusal:
        """Take a grant back: it decides nothing from now on."""
        grant = self.find_grant(grant_id)
        if not isinstance(grant, Refusal):
            self._state.grants = [g for g in self._state.grants if g.id != grant_id]
        return grant

    def made(self) -> list[Grant]:
        """The grants made since this was last asked (for the audit trail)."""
        made, self._made = self._made, []
        return made

    def decide_by_policy(self, call_id: str, verdict: Verdict, now: datetime) -> Decision:
        """A waiting call a policy judged again decides: allowed or denied by its rule."""
        pending = self.pending[call_id]
        approved = verdict.effect == "allow"
        pending.rule = verdict.rule
        return self._decide(pending, approved, gate.POLICY, now,
                            gate.policy_reason(approved, verdict.rule, verdict.note))

    def decide_by_grant(self, call_id: str, grant: Grant, now: datetime) -> Decision:
        return self._decide(self.pending[call_id], True, grant.by, now,
                            grants.grant_note(grant), grant=grant.id)

    def rejudged(self, call_id: str, verdict: Verdict) -> None:
        """A waiting call a policy judged again still waits, as its rule now asks."""
        pending = self.pending[call_id]
        pending.rule, pending.grantable, pending.note = verdict.rule, verdict.grantable, verdict.note
        pending.approvers, pending.quorum = list(verdict.approvers), verdict.quorum

    def decide_by_system(self, call_id: str, reason: str, now: datetime) -> Decision:
        return self._decide(self.pending[call_id], False, "system", now, reason)

    def _decide(
        self, pending: PendingCall, approved: bool, approver: str, now: datetime, reason: str | None,
        decided_in: str | None = None, grant: str | None = None,
    ) -> Decision:
        """Record a decision (`decided_in`: the span of the request that carried it, which the
        approval's span links to)."""
        pending.decision = Decision(
            call_id=pending.call_id, tool=pending.tool.name, approved=approved,
            approver=clip(approver, MAX_APPROVER_BYTES) or "unknown", at=now,
            args_hash=gate.args_hash(pending.args), reason=clip(reason, MAX_REASON_BYTES),
            rule=pending.rule, grant=grant,
        )
        self.record(pending.decision)
        turn = self._state.current
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
                                and p.tool.risk in self._state.four_eyes, ticket=p.ticket,
                                rule=p.rule, approvers=p.approvers, quorum=p.quorum,
                                approved_by=p.votes, note=p.note,
                                grantable=grants.ungrantable(
                                    p.tool.name, p.tool.risk, p.grantable, self._state.four_eyes,
                                    self.owner is not None, p.quorum) is None)
            for p in self.pending.values()
            if p.decision is None
        ]

    def pending_schemas(self) -> dict[str, dict[str, Any]]:
        return {call_id: p.tool.parameters for call_id, p in self.pending.items()
                if p.decision is None}


def request_roles(request: ConfirmRequest | RejectRequest) -> list[str]:
    return request.roles if isinstance(request, ConfirmRequest) else []
