"""One round of tool calls (the "act" of think-act-observe), through the human gate.

Read then write: safe calls run at once; risky ones then wait for their own decision and run as
soon as approved; questions come last, one at a time. Every call gets exactly one tool message, in
the original order, before the workflow thinks again. Each observation keeps at most its share of
the context budget.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import TimeoutError

from ..contract import (
    AuditAction,
    AuditRecord,
    ChatMessage,
    ConversationInput,
    Decision,
    ElicitAnswer,
    Question,
    SamplingGrant,
    ToolCall,
    ToolDefinition,
    ToolInvocation,
    ToolOutcome,
)
from ..contract.bounds import MAX_TOOLS_USED, keep_last, truncate_observation
from ..contract.policy import Verdict
from ..contract.state import ConversationState
from ..rules import gate, loop, sampling, tracing
from ..rules.links import call_ticket
from ..rules.questions import DECLINED, heard, not_asked, question_from_args
from ..rules.repeats import MAX_RAN_CALLS, ran_call
from ..rules.stopping import CallRecord, call_record
from . import telemetry
from .decisions import Decisions
from .failures import ACTIVITY_FAILURES, cause_of, failure_reason, raise_if_cancelled
from .judge import Judge
from .reporting import Reporter
from .subagents import Subagents

# How soon an activity lost with its worker runs again: a tool's heartbeat timeout (a model
# call's is `LLMOptions.heartbeat_timeout_s`), and the wait before a first retry (a model
# call's too).
TOOL_HEARTBEAT = timedelta(seconds=5)
FIRST_RETRY = timedelta(milliseconds=200)
# A tool's own deadline (an MCP call's, say) must fire before Temporal's, so it can report it.
TOOL_TIMEOUT_MARGIN_S = 5.0
NO_LIMIT = contextlib.nullcontext()  # a call that is not a subagent's: the tools' slots alone
MAX_INPUT_ROUNDS = 3  # how often one tool call may come back asking for input
MAX_APPROVAL_ROUNDS = 2  # a call the worker finds riskier than approved is asked about once more
TRUNCATED_HINT = (
    " Your reply was cut off at the model's output limit (finish_reason=length): send shorter "
    "arguments."
)


@dataclass
class RoundResult:
    records: list[CallRecord]
    actions: list[AuditAction]


class ToolRound:
    """One round: the calls of one assistant message, run through the gate to their results."""

    def __init__(
        self, inp: ConversationInput, state: ConversationState, decisions: Decisions,
        reporter: Reporter, sync_status: Callable[[], None],
    ) -> None:
        self._input = inp
        self._state = state
        self._decisions = decisions
        self._approvals = decisions.approvals
        self._question = decisions.question
        self._reporter = reporter
        self._sync_status = sync_status
        self._subagents: Subagents | None = None  # the round's, once it knows its calls
        self._to_sample: set[str] = set()  # its calls that may sample and have not started
        self._granted: dict[str, SamplingGrant] = {}  # the grants of its calls in flight
        self._rules: dict[str, Verdict] = {}  # the policy's `ask` of the calls it holds
        # its calls running now, with their keys: what a stop or an end reports of them
        self.running: dict[str, tuple[ToolDefinition, str]] = {}
        # the round's tool activities at once (`max_parallel_tools`); the rest wait, in order
        self._slots = asyncio.Semaphore(inp.max_parallel_tools)
        self._agent_slots = asyncio.Semaphore(inp.max_parallel_subagents)  # of those, subagents
        self._judge = Judge(inp, state, decisions, reporter)

    async def run(
        self, calls: list[ToolCall], cut_off: bool, share: int,
        refused: dict[str, str] | None = None,
    ) -> RoundResult:
        """Run the calls; `refused` names calls already refused (with their observation)."""
        catalog = self._state.catalog
        refused = {**loop.over_the_step_limit(calls, self._input.max_calls_per_step),
                   **(refused or {})}
        checked = [
            loop.InvalidCall(c, refused[c.id]) if c.id in refused
            else loop.check_tool_call(c, catalog)
            for c in calls
        ]
        outcomes: dict[int, ToolOutcome] = {}
        safe, gated, asks = [], [], []
        verdicts = await self._judge.judge([c for c in checked
                                            if isinstance(c, loop.ReadyCall) and c.tool.asks is None])
        verdicts.update(await self._judge.reviews([
            (c, verdicts[c.call.id]) for c in checked if isinstance(c, loop.ReadyCall)
            and c.call.id in verdicts and verdicts[c.call.id].effect == "review"
            and c.tool.risk not in self._state.four_eyes]))
        judged: dict[str, Decision] = {}  # calls the policy or a grant decided, without asking
        for i, item in enumerate(checked):
            verdict = verdicts.get(item.call.id) or Verdict(call_id=item.call.id)
            if isinstance(item, loop.InvalidCall):
                hint = TRUNCATED_HINT if cut_off and "not valid JSON" in item.observation else ""
                outcomes[i] = ToolOutcome(status="error", observation=item.observation + hint)
                self._approvals.remember_call(item.call.id, "it was invalid and never ran")
            elif item.tool.asks is not None:
                asks.append(i)
            elif verdict.effect == "deny":
                judged[item.call.id] = self._judge.by_policy(item, verdict, approved=False)
                outcomes[i] = _rejected(judged[item.call.id])
                self._approvals.remember_call(item.call.id, f"it was {judged[item.call.id].reason}")
            elif verdict.effect == "allow" and item.tool.risk not in self._state.four_eyes:
                if item.tool.risk != "safe":
                    judged[item.call.id] = self._judge.by_policy(item, verdict, approved=True)
                safe.append(i)
                self._approvals.remember_call(item.call.id, "a policy rule let it run")
            elif verdict.effect in ("ask", "review") or gate.needs_approval(
                    item.tool, self._input.approval, self._state.four_eyes):
                grant = verdict.grant or self._approvals.grant_for(
                    item.call.id, item.tool, item.arguments, verdict, workflow.now())
                if grant is None:
                    gated.append(i)
                    self._rules[item.call.id] = verdict
                    continue
                judged[item.call.id] = self._approvals.granted(
                    grant, item.call.id, item.tool.name, item.arguments, workflow.now())
                self._reporter.announce([judged[item.call.id]])
                safe.append(i)
                self._approvals.remember_call(item.call.id, f"it was {judged[item.call.id].reason}")
            else:
                safe.append(i)
                self._approvals.remember_call(item.call.id, "it needed no approval")
        keys = {i: str(workflow.uuid4()) for i in safe + gated}
        self._to_sample = {checked[i].call.id for i in safe + gated if checked[i].tool.samples}
        self._approvals.expect({checked[i].call.id for i in gated})
        self._subagents = Subagents(self._input, self._state, self._reporter, self._sync_status,
                                    sum(1 for i in safe + gated
                                        if checked[i].tool.agent is not None))

        ran = await asyncio.gather(*(
            self._execute(checked[i], checked[i].arguments, keys[i],
                          judged.get(checked[i].call.id) or self._policy(checked[i]))
            for i in safe
        ))
        outcomes.update(zip(safe, ran))
        for i in safe:  # the worker refused it: riskier than the conversation knew, say
            if outcomes[i].status == "needs_approval":
                checked[i] = self._regated(checked[i], outcomes[i])
                gated = sorted([*gated, i])
        if gated:
            for i in gated:
                self._hold(checked[i], checked[i].arguments, keys[i])
            self._sync_status()
            self._decisions.settle(workflow.now())  # decisions that came with the reply naming these
            ran = await asyncio.gather(
                *(self._decide_then_execute(checked[i], keys[i]) for i in gated)
            )
            outcomes.update(zip(gated, ran))
        turn = self._state.current
        if safe + gated:  # a tool ran: the questions in a row begin again
            turn.questions_in_a_row = 0
        for i in asks:
            item = checked[i]
            why = not_asked(item.arguments.get("message", ""), turn.questions_in_a_row,
                            heard(self._state.context.messages))
            if why is not None:
                workflow.logger.info("turn %d: %s not asked: %s", turn.number, item.call.id, why)
                outcomes[i] = ToolOutcome(status="error", observation=why)
                continue
            turn.questions_in_a_row += 1
            answer = await self._ask_person(item.call.id, question_from_args(item.tool, item.arguments))
            outcomes[i] = (
                ToolOutcome(observation=answer) if answer is not None
                else ToolOutcome(status="error", observation=self._no_answer())
            )
        decisions_by_call = {**judged,
                             **{c: p.decision for c, p in self._approvals.pending.items()}}
        args_run = {c: p.args for c, p in self._approvals.pending.items()}
        self._approvals.close_round()
        result = RoundResult([], [])
        for i, item in enumerate(checked):
            outcome = outcomes[i]
            call_id, name = item.call.id, item.call.function.name
            observation, full = outcome.observation, outcome.full_bytes
            observation, cut = truncate_observation(observation, share)
            full = full or cut
            self._state.context.messages.append(
                ChatMessage(role="tool", tool_call_id=call_id, content=observation)
            )
            if isinstance(item, loop.ReadyCall):
                args: dict | str = args_run.get(call_id, item.arguments)
                turn.ran = keep_last([*turn.ran, *(ran_call(name, a, call_id) for a in (
                    [item.arguments, args] if args != item.arguments else [args]))],
                    MAX_RAN_CALLS)
            else:
                args = item.call.function.arguments
            result.records.append(call_record(
                name, args if isinstance(args, dict) else {"raw": args}, outcome.observation))
            status = "error" if outcome.status in ("needs_input", "needs_approval") else outcome.status
            telemetry.count_tool_call(tracing.tool_label(name, self._state.catalog), status)
            result.actions.append(AuditAction(
                call_id=call_id, tool=name, input=args, decision=decisions_by_call.get(call_id),
                status=status,
                observation_bytes=len(observation.encode()), full_bytes=full, ms=outcome.ms,
            ))
        return result

    async def _decide_then_execute(self, item: loop.ReadyCall, key: str) -> ToolOutcome:
        """Wait for the call's decision and run it once approved; if the worker then finds the
        tool riskier than it was approved for, put it before the human again (once)."""
        for _ in range(MAX_APPROVAL_ROUNDS):
            decision = await self._decision(item.call.id)
            if not decision.approved:
                return _rejected(decision)
            args = self._approvals.pending[item.call.id].args
            await self._judge.keep_grants()
            outcome = await self._execute(item, args, key, decision)
            if outcome.status != "needs_approval":
                return outcome
            item = self._regated(item, outcome)
            self._hold(item, args, key)
            self._sync_status()
            self._decisions.settle(workflow.now())
        return outcome.model_copy(update={"status": "error"})

    async def _decision(self, call_id: str) -> Decision:
        """The call's decision, once a person (or its timeout) gives it. The wait is begun even
        when a decision that waited for the call took it already: a wait's timer uses up an id
        however soon it ends, and a replay must number timers as the run it replays did, which
        may have held the call before the decision came (`_timed_wait`)."""
        await _timed_wait(lambda: self._approvals.is_decided(call_id) or self._state.end_requested,
                          self._input.decision_timeout_s)
        if not self._approvals.is_decided(call_id):
            reason = "the conversation was ended" if self._state.end_requested else "approval timed out"
            self._reporter.announce([self._approvals.decide_by_system(call_id, reason, workflow.now())])
            self._sync_status()
        decision = self._approvals.pending[call_id].decision
        assert decision is not None
        return decision

    def _hold(self, item: loop.ReadyCall, args: dict, key: str) -> None:
        """Put a call before the human; its ticket, drawn from its idempotency key, tells it
        from any later call that has its id (a one-time link names it)."""
        ticket = call_ticket(key)
        self._approvals.hold(item.call.id, item.tool, args, workflow.now(), ticket,
                             self._rules.get(item.call.id))
        telemetry.approval_requested(item.tool.name)
        self._reporter.emit("approval_requested", call_id=item.call.id, tool=item.tool.name,
                            args=args, risk=item.tool.risk)
        self._reporter.notifier.notify(
            "approval_requested", self._state.current.number, args_hash=gate.args_hash(args),
            ticket=ticket, call_id=item.call.id, tool=item.tool.name, args=args,
            risk=item.tool.risk)

    def _policy(self, item: loop.ReadyCall) -> Decision | None:
        """What lets a call run without a human: nothing for a safe tool, else the policy."""
        if item.tool.risk == "safe":
            return None
        return gate.policy_approval(item.tool, item.arguments, workflow.now())

    def _regated(self, item: loop.ReadyCall, refused: ToolOutcome) -> loop.ReadyCall:
        """The call as the worker sees it now, to be approved by a human: the tool keeps the
        higher of the two risks, in the catalog too."""
        workflow.logger.warning("tool %s refused at execution: %s", item.tool.name,
                                refused.observation)
        risk = max(refused.risk or item.tool.risk, item.tool.risk,
                   key=gate.RISK_ORDER.__getitem__)
        tool = item.tool.model_copy(update={"risk": risk})
        self._state.catalog[tool.name] = tool
        return loop.ReadyCall(item.call, tool, item.arguments)

    async def _execute(
        self, item: loop.ReadyCall, args: dict, key: str, approval: Decision | None
    ) -> ToolOutcome:
        """Run a tool; when it asks for input, ask the human and run it again with the answer.
        An MCP server's elicitation is asked the same way; the call's next run hands every
        answer so far to the server, the one said no to included (`elicited`)."""
        answer: str | None = None
        resume: str | None = None  # where the tool said it was when it asked (`NeedsInput`)
        elicited: list[ElicitAnswer] = []
        for _ in range(MAX_INPUT_ROUNDS):
            async with (self._agent_slots if item.tool.agent is not None else NO_LIMIT,
                        self._slots):  # (it starts, and is said to, once it has its slots)
                started = workflow.now()
                self._reporter.emit("tool_started", call_id=item.call.id, tool=item.tool.name,
                                    args=args)
                self.running[item.call.id] = (item.tool, key)
                outcome = await self._run_activity(item, args, key, answer, approval, elicited,
                                                   resume)
                del self.running[item.call.id]
            self._count_sampled(outcome)
            ms = int((workflow.now() - started).total_seconds() * 1000)
            outcome = outcome.model_copy(update={"ms": ms})
            self._reporter.emit("tool_finished", call_id=item.call.id, tool=item.tool.name,
                                status=outcome.status, ms=ms, text=outcome.observation,
                                observation_bytes=len(outcome.observation.encode()))
            if outcome.status != "needs_input" or outcome.question is None:
                return outcome
            answer, resume = await self._ask_person(item.call.id, outcome.question), outcome.resume
            if outcome.question.kind == "elicitation" and not self._state.end_requested:
                elicited.append(self._elicited(outcome.question, answer))
                answer = None
                continue
            if answer is None:
                return ToolOutcome(status="error", observation=self._no_answer())
        return ToolOutcome(
            status="error",
            observation=f"Error: {item.tool.name} still needed input after {MAX_INPUT_ROUNDS} answers",
        )

    def _elicited(self, question: Question, answer: str | None) -> ElicitAnswer:
        """What the server is told: the accepted content, or decline, or cancel (withdrawn, or
        unanswered in time)."""
        request = question.request or ""
        if answer is not None:
            return ElicitAnswer(request=request, action="accept", content=json.loads(answer))
        declined = self._question.declined and not self._question.cancelled
        return ElicitAnswer(request=request, action="decline" if declined else "cancel")

    async def _run_activity(
        self, item: loop.ReadyCall, args: dict, key: str, answer: str | None,
        approval: Decision | None, elicited: list[ElicitAnswer] | None = None,
        resume: str | None = None,
    ) -> ToolOutcome:
        tool, turn = item.tool, self._state.current
        if tool.name not in turn.tools_used and len(turn.tools_used) < MAX_TOOLS_USED:
            turn.tools_used.append(tool.name)
        if tool.agent is not None:
            assert self._subagents is not None
            with self._decisions.awaiting_results():
                return await self._subagents.run(item, tool.agent, args)
        attempts = tool.max_attempts if tool.retry_safe else 1
        invocation = ToolInvocation(
            call_id=item.call.id, arguments=args, idempotency_key=key, answer=answer,
            max_observation_bytes=self._input.max_observation_bytes, turn=turn.number,
            step=turn.steps, approval=approval, risk=tool.risk, owner=self._input.owner,
            elicited=list(elicited or []), resume=resume,
            sampling=self._grant(item.call.id) if tool.samples else None,
        )
        options = dict(
            result_type=ToolOutcome,
            start_to_close_timeout=timedelta(seconds=tool.timeout_s + TOOL_TIMEOUT_MARGIN_S),
            retry_policy=RetryPolicy(
                initial_interval=FIRST_RETRY,
                backoff_coefficient=2.0,
                maximum_interval=timedelta(seconds=10),
                maximum_attempts=attempts,
            ),
            summary=loop.describe_call(tool.name, args),
        )
        try:
            with self._decisions.awaiting_results():
                if tool.local and tool.risk == "safe" and tool.retry_safe:
                    # in this workflow task, by its worker: no round trip through the server
                    return await workflow.execute_local_activity(tool.name, invocation, **options)
                return await workflow.execute_activity(
                    tool.name, invocation, task_queue=self._state.tool_queue,
                    heartbeat_timeout=TOOL_HEARTBEAT, **options)
        except ACTIVITY_FAILURES as err:
            raise_if_cancelled(err)
            reason = failure_reason(err)
            workflow.logger.warning("tool %s failed: %s", tool.name, reason)
            return ToolOutcome(
                status="timed_out" if isinstance(cause_of(err), TimeoutError) else "error",
                observation=loop.tool_failure_observation(tool, reason, attempts),
            )
        finally:  # its use, if any, is counted as it returns (`_count_sampled`)
            if item.call.id in self._granted:
                del self._granted[item.call.id]

    def _grant(self, call_id: str) -> SamplingGrant:
        """What a call's MCP server may ask of the conversation's model: the call's share of
        what is left of its budgets, held while it runs (each request is then counted as one of
        its model calls)."""
        inp = self._input
        starting = len(self._to_sample - {call_id}) + 1
        self._to_sample.discard(call_id)
        grant = sampling.call_grant(inp.model, inp.max_total_tokens, inp.max_cost_usd,
                                    self._state.usage, self._granted.values(), starting)
        self._granted[call_id] = grant
        return grant

    def _count_sampled(self, outcome: ToolOutcome) -> None:
        """The server's sampling requests the call's run had answered: model calls of the
        conversation, in its usage and budgets, and each in the audit trail."""
        turn = self._state.current
        for sampled in outcome.sampled:
            self._state.count_model_call(sampled.usage, failed=sampled.error is not None)
            said = sampled.asked if sampled.error is None else \
                f"{sampled.asked} [unanswered: {sampled.error}]"
            self._reporter.record(AuditRecord(
                at=workflow.now(), turn=turn.number, step=turn.steps, thought=None,
                tokens=sampled.usage, kind="sampling", by=sampled.server, text=said,
                entry=sampled.entry))

    async def _ask_person(self, call_id: str, question: Question) -> str | None:
        """Ask the human one question (others wait their turn); None if it went unanswered."""
        async with self._question.lock:
            self._question.ask(call_id, question)
            self._reporter.emit("question_asked", call_id=call_id, text=question.message,
                                options=question.options, question_kind=question.kind)
            self._reporter.notifier.notify(  # an MCP server's: its one-time decline link
                "question_asked", self._state.current.number, args_hash=question.request,
                call_id=call_id, question=question.message, kind=question.kind,
                options=question.options, server=question.server, tool=question.tool,
                answer_schema=question.answer_schema)
            self._sync_status()
            self._decisions.settle(workflow.now())  # an answer that came with the result asking it
            # begun even when the answer is in already, as `_decision`'s
            await _timed_wait(lambda: self._question.has_answer() or self._state.end_requested,
                              self._input.decision_timeout_s)
            answer = self._question.take_answer()
            self._sync_status()
            return answer

    def _no_answer(self) -> str:
        if self._question.declined:
            return DECLINED
        if self._state.end_requested:
            return "no answer: the conversation was ended"
        return "no answer: the question timed out"


async def _timed_wait(done: Callable[[], bool], timeout_s: float) -> None:
    """Wait until `done`, for at most `timeout_s`, always with a timer, however soon it is done.

    A timer started and cancelled in one activation leaves no event, but it takes the next
    timer id; and Temporal's replay matches timers by kind, not by id. A run that took a
    person's request and the result it names in two activations waited for it; its replay,
    handed both in one, may find it taken already. Had it not waited, every later timer would
    be numbered one lower than in the history, the replay would pass, and the next timer
    cancelled would name an id the server never saw: every worker's task refused
    (`BadCancelTimerAttributes`), the conversation wedged (`tests/timer_ids.py`)."""
    try:
        await workflow.wait_condition(done, timeout=timedelta(seconds=timeout_s))
    except asyncio.TimeoutError:
        pass


def _rejected(decision: Decision) -> ToolOutcome:
    if decision.approver == gate.POLICY:
        return ToolOutcome(status="rejected", observation=f"rejected: {decision.reason}")
    if decision.approver == "system":
        status = "timed_out" if decision.reason == "approval timed out" else "rejected"
        return ToolOutcome(status=status, observation=f"rejected: {decision.reason}")
    return ToolOutcome(status="rejected", observation=f"rejected by user: {decision.reason}")
