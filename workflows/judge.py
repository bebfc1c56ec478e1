"""A round's calls before the gate: the worker's policy judges them (`judge_calls`), the owner's
grants in the workers' store may let run those a person would decide, and the owner grants a
conversation made are kept in that store (`keep_grants`) before a call they let run does. Each
is a local activity whose result the history keeps, so a replay judges nothing again."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy

from ..contract import (
    JUDGE_CALLS_ACTIVITY,
    KEEP_GRANTS_ACTIVITY,
    REVIEW_CALL_ACTIVITY,
    AuditRecord,
    ConversationInput,
    Decision,
    FunctionCall,
    ToolCall,
)
from ..contract.bounds import canonical_json
from ..contract.policy import (
    KeepGrants,
    PolicyCall,
    PolicyFacts,
    PolicyRequest,
    PolicyVerdicts,
    ReviewReply,
    ReviewRequest,
    Verdict,
)
from ..contract.state import ConversationState
from ..rules import context, gate, grants, loop
from .decisions import Decisions
from .failures import ACTIVITY_FAILURES, failure_reason, raise_if_cancelled
from .reporting import Reporter


class Judge:
    """The policy's verdicts on a round's calls, and the owner grants kept."""

    def __init__(self, inp: ConversationInput, state: ConversationState, decisions: Decisions,
                 reporter: Reporter) -> None:
        self._input = inp
        self._state = state
        self._decisions = decisions
        self._approvals = decisions.approvals
        self._reporter = reporter

    async def judge(self, calls: list[loop.ReadyCall]) -> dict[str, Verdict]:
        """The worker's policy on the round's calls, if the conversation has one (its handshake
        said so), and the owner's grants that let run those a person would decide: each
        verdict, its rule and the policy's revision in the history. A judge that fails asks a
        person about every call (closed, never open)."""
        await self.keep_grants()
        state, turn = self._state, self._state.current
        inp, now = self._input, workflow.now()
        if not calls or (state.policy_revision is None
                         and not (state.owner_grants and inp.owner is not None)):
            return {}  # (every round of a conversation with neither: nothing to work out)
        in_force = [*state.grants, *state.grants_to_keep]
        asked = [PolicyCall(
            call_id=c.call.id, tool=c.tool.name, risk=c.tool.risk, args=c.arguments,
            needs_person=gate.needs_approval(c.tool, inp.approval, state.four_eyes),
            use_key=None if grants.covering(in_force, c.tool.name, gate.args_hash(c.arguments),
                                            now)
            else grants.use_key(workflow.info().workflow_id, turn.number, turn.steps, c.call.id))
            for c in calls]
        owner_may_grant = state.owner_grants and inp.owner is not None and any(
            c.needs_person and c.use_key for c in asked)
        if not calls or (state.policy_revision is None and not owner_may_grant):
            return {}
        ran: dict[str, int] = {}
        for done in turn.ran:
            ran[done.tool] = ran.get(done.tool, 0) + 1
        usage = state.usage
        request = PolicyRequest(
            calls=asked,
            facts=PolicyFacts(owner=inp.owner, turn=turn.number, at=now,
                              tokens=usage.total_tokens, calls_of_tool=ran,
                              cost_usd=usage.cost_usd if usage.cost_usd is not None
                              else usage.known_cost_usd))
        try:
            with self._decisions.awaiting_results():
                judged = await workflow.execute_local_activity(
                    JUDGE_CALLS_ACTIVITY, request, result_type=PolicyVerdicts,
                    start_to_close_timeout=timedelta(seconds=10),
                    retry_policy=RetryPolicy(maximum_attempts=3),
                    summary=f"judge {len(calls)} call{'s' if len(calls) > 1 else ''}")
        except ACTIVITY_FAILURES as err:
            raise_if_cancelled(err)
            why = f"the policy could not judge it ({failure_reason(err)}): a person decides"
            workflow.logger.warning("policy: %s", why)
            return {c.call.id: Verdict(call_id=c.call.id, effect="ask", note=why) for c in calls}
        state.policy_revision = judged.revision
        return {v.call_id: v for v in judged.verdicts}

    async def keep_grants(self) -> None:
        """Owner grants made in this conversation, into the store the workers share, before a
        call they let run does (keyed: a retry or a replay keeps nothing twice). One that cannot
        be kept now is kept at the next round."""
        state = self._state
        if not state.grants_to_keep or self._input.owner is None:
            return
        keep = KeepGrants(owner=self._input.owner, conversation_id=workflow.info().workflow_id,
                          grants=state.grants_to_keep, uses=state.kept_uses)
        try:
            with self._decisions.awaiting_results():
                await workflow.execute_local_activity(
                    KEEP_GRANTS_ACTIVITY, keep, start_to_close_timeout=timedelta(seconds=10),
                    retry_policy=RetryPolicy(maximum_attempts=3),
                    summary=f"keep {len(keep.grants)} owner grant(s)")
        except ACTIVITY_FAILURES as err:
            raise_if_cancelled(err)
            workflow.logger.warning("owner grants not kept yet: %s", failure_reason(err))
            return
        kept = {g.id for g in keep.grants}
        state.grants_to_keep = [g for g in state.grants_to_keep if g.id not in kept]
        state.kept_uses = [u for u in state.kept_uses if u[0] not in kept]

    def by_policy(self, item: loop.ReadyCall, verdict: Verdict, approved: bool) -> Decision:
        """A call a rule of the policy decided (or its reviewer allowed), recorded as a decision
        that names the rule."""
        reason = gate.policy_reason(approved, verdict.rule, verdict.note)
        decision = Decision(call_id=item.call.id, tool=item.tool.name, approved=approved,
                            approver=gate.POLICY, at=workflow.now(),
                            args_hash=gate.args_hash(item.arguments), reason=reason,
                            rule=verdict.rule)
        self._approvals.record(decision)
        self._reporter.announce([decision])
        return decision

    async def reviews(self, calls: list[tuple[loop.ReadyCall, Verdict]]) -> dict[str, Verdict]:
        """The calls of `review` rules before the reviewer model, at once: each it allows comes
        back as an `allow` (its reason audited with the decision), each it passes to a person
        as an `ask` that says why (audited, and shown with the pending call). It fails closed:
        no answer, a timeout or a malformed answer passes the call to a person."""
        replies = await asyncio.gather(*(self._review(item, verdict) for item, verdict in calls))
        turn, reviewed = self._state.current, {}
        for (item, verdict), reply in zip(calls, replies, strict=True):
            if reply.allow:
                reviewed[item.call.id] = verdict.model_copy(update={
                    "effect": "allow", "note": f"the reviewer allows it: {reply.reason}"})
                continue
            reviewed[item.call.id] = verdict.model_copy(update={"effect": "ask",
                                                                "note": reply.reason})
            self._reporter.record(AuditRecord(
                at=workflow.now(), turn=turn.number, step=turn.steps, thought=None,
                tokens=reply.usage, kind="review", by="reviewer",
                text=f"{item.tool.name} call {item.call.id} passed to a person: {reply.reason}"))
        return reviewed

    async def _review(self, item: loop.ReadyCall, verdict: Verdict) -> ReviewReply:
        request = ReviewRequest(
            call=PolicyCall(call_id=item.call.id, tool=item.tool.name, risk=item.tool.risk,
                            args=item.arguments),
            rule=verdict.rule or "", asked=context.last_request(self._state.context) or "")
        llm = self._input.llm
        try:
            with self._decisions.awaiting_results():
                reply = await workflow.execute_activity(
                    REVIEW_CALL_ACTIVITY, request, result_type=ReviewReply,
                    task_queue=self._state.models.queue(self._input.model, None),
                    start_to_close_timeout=timedelta(seconds=llm.timeout_s),
                    heartbeat_timeout=timedelta(seconds=llm.heartbeat_timeout_s),
                    retry_policy=RetryPolicy(maximum_attempts=2),
                    summary=f"review {item.tool.name}")
        except ACTIVITY_FAILURES as err:
            raise_if_cancelled(err)
            why = f"the reviewer did not answer ({failure_reason(err)}): a person decides"
            workflow.logger.warning("review of %s: %s", item.call.id, why)
            return ReviewReply(allow=False, reason=why)
        self._state.count_model_call(reply.usage)
        return reply

    async def rejudge(self, revision: str) -> list[Decision]:
        """A worker started with a policy of another revision: the calls waiting for a person
        are judged again under it. A deny rejects one (the model reads the rule), an allow lets
        it run, an `ask` asks as its rule now says; a call decided meanwhile stays decided."""
        if revision == self._state.policy_revision or not self._approvals.waiting():
            return []
        self._state.policy_revision = revision  # the conversation is judged by a policy now
        waiting = [loop.ReadyCall(ToolCall(id=p.call_id, function=FunctionCall(
                       name=p.tool.name, arguments=canonical_json(p.args))), p.tool, p.args)
                   for p in self._approvals.pending.values() if p.decision is None]
        verdicts = await self.judge(waiting)
        taken = []
        for item in waiting:
            verdict = verdicts.get(item.call.id)
            if verdict is None or self._approvals.is_decided(item.call.id):
                continue
            if verdict.effect == "deny" or (verdict.effect == "allow"
                                            and item.tool.risk not in self._state.four_eyes):
                taken.append(self._approvals.decide_by_policy(item.call.id, verdict, workflow.now()))
            elif verdict.grant is not None:  # an owner's grant it used
                taken.append(self._approvals.decide_by_grant(item.call.id, verdict.grant,
                                                      workflow.now()))
            else:
                self._approvals.rejudged(item.call.id, verdict)
        if taken:
            self._reporter.announce(taken)
        workflow.logger.info("waiting calls judged again under policy %s: %d decided",
                             revision[:12], len(taken))
        return taken
