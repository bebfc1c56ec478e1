"""The conversation workflow: one durable ReAct loop per conversation.

Read it as the story of a conversation: load the tools, wait for a message, think (LLM activity),
act (a `ToolRound`), observe, and again until the model answers or a stopping rule ends the turn.
Older turns may fold into a running summary, so the context keeps to its budget. All state is
one `ConversationState`; decisions that are not orchestration are pure functions (`rules`), what
people decide and answer is `Decisions`', and what the outside sees is `Reporter`'s.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ApplicationError

from ..contract import (
    PENDING_PROMPT_QUERY,
    AnswerRequest,
    AuditRecord,
    ChatMessage,
    ChildReport,
    ConversationInput,
    ConversationStatus,
    DecideRequest,
    EndRequest,
    PendingPrompt,
    PushTargets,
    RoutedDecision,
    SayRequest,
    SignalOutcome,
    StopRequest,
    names,
)
from ..contract.bounds import Limits
from ..contract.owner import LEASE_GRANTED_SIGNAL, Lease
from ..contract.policy import Grant, PolicyChanged, RevokeRequest
from ..rules import context, grants, loop
from ..rules.gate import Refusal
from ..rules.start_input import first_state, settled_input
from .approvals import Approvals
from .decisions import DECISIONS, Decisions, Received, decision_signal, decision_update
from .handover import carried, next_input
from .handshake import shake_hands, tools_changed
from .inbox import Inbox
from .judge import Judge
from .model_step import ModelStep
from .question import OpenQuestion
from .reporting import Reporter
from .request_memory import RequestMemory
from .signal_guard import sent
from .status_view import StatusView, moved_here, new_version, running_version
from .turn import Turns


# On a versioned worker (`worker.deployment`) a run is pinned to its version; it moves to a new
# one by continuing as new at a turn boundary. (The worker's default, not this definition's:
# Temporal refuses the workflow tasks of an unversioned worker whose workflow names one.)
@workflow.defn
class ConversationWorkflow:
    @workflow.init
    def __init__(self, inp: ConversationInput) -> None:
        # Signals may arrive before `run` starts (signal-with-start), so all state lives here.
        self._limits = Limits.bounded(inp.max_message_bytes)
        self._input, notices = settled_input(inp, self._limits)
        self._state = first_state(self._input, self._limits, notices)
        self._reporter = Reporter(self._state, self._limits.audit_bytes)
        self._model_step = ModelStep(self._input, self._state, self._limits, self._reporter)
        self._memory = RequestMemory(self._state)
        self._inbox = Inbox(self._state, self._limits, self._memory,
                            too_long=self._model_step.message_refusal, emit=self._reporter.emit)
        self._decisions = Decisions(
            self._state, Approvals(self._state, self._limits, owner=self._input.owner),
            OpenQuestion(self._state, self._limits), self._memory,
            shown=lambda: (self._view.pending_confirmations(), self._view.pending_question()),
            announce=self._announce)
        self._view = StatusView(self._input, self._state, self._decisions, self._reporter,
                                self._model_step)
        self._turns = Turns(
            self._input, self._state, self._decisions, self._reporter, self._model_step,
            self._view, history_full=lambda: self._should_continue_as_new(at_turn_boundary=False),
            hand_over=self._continue_as_new, inbox=self._inbox)
        self._settler: asyncio.Future[None] | None = None  # `Decisions.settle_when_nothing_comes`
        self._listed = False  # the tools were listed since the last turn (`_relist_if_changed`)

    @workflow.run
    async def run(self, inp: ConversationInput) -> ConversationStatus:
        self._settler = asyncio.ensure_future(self._decisions.settle_when_nothing_comes())
        try:
            self._view.sync()
            if inp.state is None and inp.carry is None:
                fork = self._input.fork
                if fork is not None:  # it goes on with the original's turn, from its messages
                    self._reporter.record_input(
                        "start", fork.turn, self._input.owner,
                        f"forked from {fork.conversation_id} at step {fork.at_step}")
                elif self._state.inbox:  # the first message, unless it was refused
                    self._reporter.record_input("start", 1, self._input.owner, self._input.prompt)
                await self._load_tools()
                if self._inbox.take_first(self._input.prompt, inp.request_id):
                    self._state.end_requested = True  # too long for the model: nothing to do
            else:
                self._reporter.notifier.resume()  # what the previous run had not delivered
                if moved_here(self._state):
                    await self._load_tools()  # the tools and rules of the version it moved to
            await self._serve()
        except asyncio.CancelledError:
            self._state.current.stop_reason = "cancelled"
            if self._state.current.in_progress:
                self._turns.trace()
            self._view.set_phase("completed")
            self._reporter.close()
            raise
        self._view.set_phase("completed")
        await self._reporter.notifier.drain()  # the last deliveries (bounded by their window)
        return self.status()

    async def _serve(self) -> None:
        """Take messages one turn at a time until the conversation ends, goes idle too long,
        or hands over to a fresh run. A run that starts mid-turn finishes that turn first."""
        state = self._state
        while True:
            if state.current.in_progress:
                await self._turns.run(None)
            elif state.inbox:
                if new_version():  # a turn about to begin: it runs on the new version
                    await self._continue_as_new(move=True)
                await self._relist_if_changed()
                await self._turns.run(self._inbox.next())
            elif state.end_requested:
                state.current.stop_reason = "ended"
                break
            elif self._input.one_shot:  # its first message was refused: nothing to answer
                break
            else:
                self._decisions.settle(workflow.now())  # what waited for this turn's results
                self._view.set_phase("idle")
                moving = new_version()
                if moving or self._should_continue_as_new(at_turn_boundary=True):
                    await self._continue_as_new(move=moving)
                if not await self._wait_for_message():
                    state.current.stop_reason = "idle_timeout"
                    break
                continue
            if self._input.one_shot or state.current.stop_reason == "ended":
                break
        await self._wind_up()

    async def _wait_for_message(self) -> bool:
        """Wait at a turn boundary for a message or `end`, up to the idle timeout (False: none
        came); on a versioned worker, wake every `version_check_s` too, and return once the
        deployment has a new target version for this conversation, for the caller to move."""
        state = self._state

        def arrived() -> bool:
            return bool(state.inbox) or state.end_requested

        idle = timedelta(seconds=self._input.idle_timeout_s)
        versioned = running_version() is not None
        deadline = workflow.now() + idle
        while True:
            wait = min(deadline - workflow.now(), timedelta(seconds=self._input.version_check_s)
                       ) if versioned else idle
            try:
                await workflow.wait_condition(arrived, timeout=wait)
                return True
            except TimeoutError:
                # A message taken in the same workflow task as the timeout wins over it.
                if arrived():
                    return True
                if not versioned or workflow.now() >= deadline:
                    return False
                if new_version():
                    return True

    async def _wind_up(self) -> None:
        """Before the run ends: answer every request still waiting, close the stream, finish
        every handler, and (a subagent) send its last reports to its parent."""
        self._decisions.settle(workflow.now(), final=True)
        self._reporter.close()
        await workflow.wait_condition(workflow.all_handlers_finished)
        if self._view.reports:
            await asyncio.gather(*self._view.reports, return_exceptions=True)

    # ----- signals, updates and queries -----

    # A signal's request defaults to None: a signal sent without one (any client can send it)
    # is dropped with a warning, where a missing argument would fail the workflow task.

    @workflow.signal
    def say(self, request: SayRequest | None = None) -> None:
        if sent(request, "say"):
            self._take_message(request)

    @workflow.update
    def send_message(self, request: SayRequest) -> SignalOutcome:
        """`say`, answered synchronously: the validator refuses before anything reaches history."""
        return self._take_message(request)

    def _take_message(self, request: SayRequest) -> SignalOutcome:
        repeated = self._memory.outcome(request.request_id) is not None
        outcome = self._inbox.take(request, self._input.one_shot, self._view.phase == "completed")
        if outcome.accepted and not repeated:
            self._reporter.record_input("message", outcome.turn, request.sender, request.text)
        return outcome

    @send_message.validator
    def _check_message(self, request: SayRequest) -> None:
        reason = self._inbox.refusal(request.text, self._input.one_shot,
                                     self._view.phase == "completed")
        if reason is not None:
            raise ValueError(reason)

    @workflow.signal(name=names.CHILD_STATUS_SIGNAL)
    def child_status(self, report: ChildReport | None = None) -> None:
        """A subagent's status and what it waits for (its own subagents' calls and questions
        included), so that this conversation shows them, each named by its path from here."""
        if sent(report, names.CHILD_STATUS_SIGNAL):
            self._view.take_child_report(report)

    @workflow.signal
    def end(self, request: EndRequest | None = None) -> None:
        request = request or EndRequest()  # an end needs no more than its name
        if not self._state.end_requested:
            self._reporter.record_input("end", self._state.current.number, request.sender, None)
        self._state.end_requested = True
        self._memory.accept(request.request_id)
        self._turns.end()

    @workflow.signal(name=names.STOP_SIGNAL)
    def stop(self, request: StopRequest | None = None) -> None:
        """The turn in flight ends, the conversation goes on; a stop sent again does nothing."""
        if sent(request, names.STOP_SIGNAL) and self._memory.outcome(request.request_id) is None:
            self._memory.accept(request.request_id, did=self._turns.stop(request))

    # A person's decisions (`workflows.decisions`): a signal and its Update twin each, and
    # `decide`, which takes several as one.
    confirm, reject, answer = (decision_signal(signal, request)
                               for signal, _, request in DECISIONS)
    decide_confirm, decide_reject, give_answer = (decision_update(update, request)
                                                  for _, update, request in DECISIONS)

    @workflow.update(name=names.DECIDE.name)
    async def decide(self, request: DecideRequest) -> SignalOutcome:
        return await self._decisions.take(request.parts(), request.request_id)

    @decide.validator
    def _check_decide(self, request: DecideRequest) -> None:
        if not request.parts():
            raise ValueError("decide names no decision and no answer")
        self._decisions.check(request.parts(), request.request_id)

    @workflow.query(name=names.GRANTS.name)
    def grants(self) -> list[Grant]:
        """The approvals people remembered that are still in force (`rules.grants`)."""
        state = self._state
        return grants.live([*state.grants, *state.grants_to_keep], workflow.now())

    @workflow.update(name=names.REVOKE_GRANT.name)
    def revoke_grant(self, request: RevokeRequest) -> SignalOutcome:
        """Take a grant back: from now on it lets nothing run."""
        revoked = self._decisions.approvals.revoke(request.grant_id)
        if isinstance(revoked, Refusal):
            return SignalOutcome(request_id="", accepted=False, reason=revoked.reason)
        self._reporter.record_input("revoke", None, request.by, grants.describe(revoked))
        return SignalOutcome(request_id="", accepted=True)

    @revoke_grant.validator
    def _check_revoke(self, request: RevokeRequest) -> None:
        found = self._decisions.approvals.find_grant(request.grant_id)
        if isinstance(found, Refusal):
            raise ValueError(found.reason)

    @workflow.signal(name=names.POLICY_CHANGED_SIGNAL)
    async def policy_changed(self, changed: PolicyChanged | None = None) -> None:
        """A worker's policy (`worker.policy`): the calls waiting for a person, judged again."""
        if sent(changed, names.POLICY_CHANGED_SIGNAL):
            judge = Judge(self._input, self._state, self._decisions, self._reporter)
            if await judge.rejudge(changed.revision):
                self._view.sync()

    @workflow.signal(name=names.PUSH_TARGETS_SIGNAL)
    def push_targets(self, targets: PushTargets | None = None) -> None:
        if sent(targets, names.PUSH_TARGETS_SIGNAL):  # the A2A push configs, as the API has them
            self._state.pushes = targets.targets

    @workflow.signal(name=LEASE_GRANTED_SIGNAL)
    def owner_lease_granted(self, lease: Lease | None = None) -> None:
        """The owner's ledger lets the turn that waited for its share go on."""
        if sent(lease, LEASE_GRANTED_SIGNAL):
            self._turns.share.granted(lease)

    @workflow.signal(name=names.ROUTED_DECISION_SIGNAL)
    async def routed_decision(self, routed: RoutedDecision | None = None) -> None:
        """A part of a decision an ancestor took, for this subagent's own call or question."""
        if sent(routed, names.ROUTED_DECISION_SIGNAL):
            await self._decisions.from_ancestor(routed)

    @workflow.signal(name=names.DECISION_REPLY_SIGNAL)
    def decision_reply(self, outcome: SignalOutcome | None = None) -> None:
        """What a subagent made of a part of a decision this conversation routed to it."""
        if sent(outcome, names.DECISION_REPLY_SIGNAL):
            self._decisions.replied(outcome)

    def _announce(self, received: Received) -> None:
        """Put what became of a person's request on the live stream and in the status."""
        result = received.result
        if isinstance(received.request, AnswerRequest):
            if isinstance(result, Refusal):
                self._reporter.emit("decision_refused", text=result.reason)
            else:
                self._reporter.emit("answered", text=result)
                self._reporter.record_input("answer", None, received.request.sender, result)
        elif isinstance(result, (list, Refusal)):
            self._reporter.announce(result)
        for grant in self._decisions.approvals.made():
            self._reporter.record_input("grant", None, grant.by, grants.describe(grant))
        self._view.sync()

    @workflow.query
    def status(self) -> ConversationStatus:
        return self._view.status()

    @workflow.query
    def signal_outcome(self, request_id: str) -> SignalOutcome | None:
        return self._memory.outcome(request_id)

    @workflow.query
    def messages(self) -> list[ChatMessage]:
        """The context: the system prompt, the running summary, and the latest turns."""
        return context.shown(self._state.context)

    @workflow.query(name=PENDING_PROMPT_QUERY)
    def pending_prompt(self, digest: str) -> PendingPrompt | None:
        """The prompt and tools of the model call this conversation waits on, if it has this
        digest: for a worker that holds no copy of the previous prompt (`rules.delta`)."""
        return self._model_step.pending(digest)

    @workflow.query
    def pending_schemas(self) -> dict[str, dict[str, Any]]:
        """The argument schema of each call waiting for a decision, by call id: what a console
        validates edited args against before sending them (the workflow validates again)."""
        return self._decisions.approvals.pending_schemas()

    @workflow.query
    def history(self) -> list[AuditRecord]:
        """The audit trail: one record per step (the latest ones; older ones are in the memo)."""
        return list(self._reporter.audit)

    def trace_parent(self) -> str | None:
        """The span a model call or tool run now belongs under: the running turn's (read by the
        worker's `TelemetryInterceptor` as it schedules an activity)."""
        return self._turns.trace_parent()

    # ----- tools -----

    async def _relist_if_changed(self) -> None:
        """Before a turn: shake hands again if an MCP server's tools changed since the last
        handshake (`notifications/tools/list_changed`), unless this run just did."""
        listed, self._listed = self._listed, False
        if not listed and await tools_changed(self._state):
            await self._load_tools()
            self._model_step.tools_changed()
            self._listed = False

    async def _load_tools(self) -> None:
        self._listed = True  # the turn about to begin has the tools as listed now
        self._state.handshake_version = running_version()
        with self._decisions.awaiting_results():
            refusal = await shake_hands(self._state, self._limits, self._input.approval,
                                        self._input.profile)
        if refusal is not None:  # the worker holds the floor of what runs without a human
            self._state.notice(f"refused: {refusal}")
            self._view.set_phase("failed")
            raise ApplicationError(f"refused: {refusal}", type="PolicyRefused", non_retryable=True)

    def _should_continue_as_new(self, at_turn_boundary: bool) -> bool:
        info = workflow.info()
        # A step adds little (a delta of the prompt): hand over only when the history is large.
        if loop.history_full(info.get_current_history_length(), info.get_current_history_size(),
                             self._input.continue_as_new_after_events):
            return True
        return at_turn_boundary and self._turns.this_run >= self._input.continue_as_new_after_turns

    async def _continue_as_new(self, move: bool = False) -> None:
        """Hand the conversation to a fresh run (bounded history), after every signal is handled;
        deliveries in flight are carried to it. A run pinned to a Worker Deployment Version hands
        over on the same version, unless it `move`s (at a turn boundary only): then the next run
        starts on the deployment's target version, the carried state being the contract between
        the two (docs/deploy.md, "Deploying a new version")."""
        self._reporter.notifier.hand_over()
        await self._wind_up()
        info = workflow.info()
        workflow.logger.info("continuing as new after %d events%s", info.get_current_history_length(),
                             " onto the deployment's new version" if move else "")
        state = carried(self._state, self._reporter.carry())
        workflow.continue_as_new(next_input(self._input, state), initial_versioning_behavior=(
            workflow.ContinueAsNewVersioningBehavior.AUTO_UPGRADE if move else None))
