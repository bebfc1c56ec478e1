"""The conversation workflow: one durable ReAct loop per conversation.

Read it as the story of a conversation: load the tools, wait for a message, think (LLM activity),
act (a `ToolRound`), observe, and again until the model answers or a stopping rule ends the turn.
Before it thinks, older turns may fold into a running summary (the `summarize` activity), so the
context stays within its budget however long the conversation lasts. All state is one
`ConversationState`; decisions that are not orchestration live in pure functions (`decisions`,
`approvals`, `stopping`, `repair`, `context`), the human-facing state in `HumanDesk`, and what the
outside sees in `Narrator`.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any, TypeVar

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError
from temporalio.worker import (
    HandleSignalInput,
    Interceptor,
    WorkflowInboundInterceptor,
    WorkflowInterceptorClassInput,
)

from contract import (
    CLOSED_STATUSES,
    PENDING_PROMPT_QUERY,
    WAITING_STATUSES,
    AnswerRequest,
    AuditAction,
    AuditRecord,
    ChatMessage,
    ChildRef,
    ChildReport,
    ConfirmRequest,
    ConversationInput,
    ConversationStatus,
    EndRequest,
    PendingConfirmation,
    PendingPrompt,
    PendingQuestion,
    RejectRequest,
    SayRequest,
    SignalOutcome,
    Status,
    StopReason,
    TurnSummary,
    Usage,
)
from contract.bounds import (
    MAX_CALLS_PER_REPLY,
    MAX_ERROR_BYTES,
    MAX_MODEL_NAME_BYTES,
    MAX_TOOLS_LISTED,
    MAX_TURN_SUMMARIES,
    Limits,
    clip,
    keep_last,
)
from contract.names import CHILD_STATUS_SIGNAL, relative_id
from contract.state import TurnState
from rules import context, loop, output, tracing
from rules.gate import Refusal
from rules.search_attributes import AGENT_STATUS
from rules.start_input import first_state, settled_input
from rules.stopping import is_looping, over_budget
from workflows import telemetry
from workflows.failures import raise_if_cancelled
from workflows.handover import carried, next_input
from workflows.human_desk import HumanDesk, HumanRequest, Taken
from workflows.model_step import Thinker, is_context_too_long
from workflows.reporting import Narrator
from workflows.tool_discovery import discover_tools
from workflows.tool_round import FAST, Pace, ToolRound

ERROR_STOPS = frozenset({"llm_error", "budget_exceeded", "invalid_output"})  # a turn's span errs
PendingT = TypeVar("PendingT", PendingConfirmation, PendingQuestion)
# Runs with this marker bound their inputs and fold their context; runs begun before it don't.
BOUNDED_CONTEXT_PATCH = "bounded-context"
MESSAGE_BEATS_IDLE_TIMEOUT_PATCH = "message-beats-idle-timeout"
END_INTERRUPTS_PATCH = "end-interrupts-the-turn"
# Runs with this marker send model calls as deltas (`rules.delta`) and, as a step then
# adds little history, hand over to a fresh run for the history's size only well past the
# server's suggestion; runs begun before it don't.
DELTA_CONTEXT_PATCH = "delta-context"
# Runs with this marker take a request id once, and hold the gate at the seams between
# conversations (subagents' budgets and ids); runs begun before it don't.
GATE_SEAMS_PATCH = "gate-at-every-seam"
# Runs with this marker keep who started them, sent a message or ended them in the audit trail.
AUDIT_INPUTS_PATCH = "audit-inputs"
# Runs with this marker meet real models: they read tool calls a model wrote in its text
# (`rules.text_calls`) and remind it once a turn of one written in a shape that could
# not be read; keep prompts within the model's window (its entry's, its server's, or what a
# refusal said), leave out a message too long for it and refuse the next such one; use the
# entry's deadline and heartbeat; and count failed model calls.
REAL_MODELS_PATCH = "real-models"
# Runs with this marker hold the gate at the new seams: calls get ids of a safe alphabet, four
# eyes wants a decision that names a person, and a request that waited for a result is answered
# as soon as nothing more is on its way.
TRUSTED_SEAMS_PATCH = "trust-at-the-seams"


@workflow.defn
class ConversationWorkflow:
    @workflow.init
    def __init__(self, inp: ConversationInput) -> None:
        # Signals may arrive before `run` starts (signal-with-start), so all state lives here.
        self._limits = (
            Limits.bounded(inp.max_message_bytes) if workflow.patched(BOUNDED_CONTEXT_PATCH)
            else Limits()
        )
        self._input, notices = settled_input(inp, self._limits)
        self._state = first_state(self._input, self._limits, notices)
        self._narrator = Narrator(self._state, self._limits.audit_bytes)
        # (the patches asked in the order runs have always asked them)
        self._seams = workflow.patched(GATE_SEAMS_PATCH)
        strict = workflow.patched(TRUSTED_SEAMS_PATCH)
        self._audit_inputs = workflow.patched(AUDIT_INPUTS_PATCH)
        self._delta_context = workflow.patched(DELTA_CONTEXT_PATCH)
        self._pace = FAST if self._delta_context else Pace()
        self._thinker = Thinker(self._input, self._state, self._limits, self._narrator,
                                self._pace, delta_context=self._delta_context, safe_ids=strict,
                                real_models=workflow.patched(REAL_MODELS_PATCH))
        self._desk = HumanDesk(self._state, self._limits, owner=self._input.owner,
                               dedupe=self._seams, strict=strict,
                               on_settled=self._announce_settled,
                               too_long=self._thinker.message_refusal)
        self._trace_ids = workflow.new_random("agent-trace")  # span ids: `workflows.telemetry`
        self._turn_text: str | None = None  # the current turn's message (for traced content)
        if inp.request_id is not None and inp.state is None and inp.carry is None:
            self._desk.accept(inp.request_id, turn=1)  # the first message, taken at the start
        self._phase: Status = "running"  # running | idle | completed; waits come from the desk
        self._published: Status | None = None
        self._turns_this_run = 0
        self._turn_task: asyncio.Future[None] | None = None
        self._ending = False  # `end` cancelled the turn task (not the workflow's cancellation)
        self._reported: ChildReport | None = None  # a subagent's last report to its parent
        self._reports: list[asyncio.Future[None]] = []
        self._settler: asyncio.Future[None] | None = None  # `HumanDesk.settle_when_nothing_comes`

    @workflow.run
    async def run(self, inp: ConversationInput) -> ConversationStatus:
        if self._desk.strict:
            self._settler = asyncio.ensure_future(self._desk.settle_when_nothing_comes())
        try:
            self._sync_status()
            if inp.state is None and inp.carry is None:
                if self._state.inbox:  # the first message, unless it was refused
                    self._audit_input("start", 1, self._input.owner, self._input.prompt)
                await self._load_tools()
            else:
                self._narrator.notifier.resume()  # what the previous run had not delivered
            await self._serve()
        except asyncio.CancelledError:
            self._state.current.stop_reason = "cancelled"
            if self._state.current.in_progress:
                self._trace_turn()
            self._set_phase("completed")
            self._narrator.close()
            raise
        self._set_phase("completed")
        await self._narrator.notifier.drain()  # the last deliveries (bounded by their window)
        return self.status()

    async def _serve(self) -> None:
        """Take messages one turn at a time until the conversation ends, goes idle too long,
        or hands over to a fresh run. A run that starts mid-turn finishes that turn first."""
        state = self._state
        while True:
            if state.current.in_progress:
                await self._run_turn(None)
            elif state.inbox:
                await self._run_turn(self._desk.next_message())
            elif state.end_requested:
                state.current.stop_reason = "ended"
                break
            elif self._input.one_shot:  # its first message was refused: nothing to answer
                break
            else:
                self._desk.settle(workflow.now())  # what waited for this turn's results
                self._set_phase("idle")
                if self._should_continue_as_new(at_turn_boundary=True):
                    await self._continue_as_new()
                try:
                    await workflow.wait_condition(
                        lambda: bool(state.inbox) or state.end_requested,
                        timeout=timedelta(seconds=self._input.idle_timeout_s),
                    )
                except TimeoutError:
                    # A message taken in the same workflow task as the timeout wins over it.
                    if not ((state.inbox or state.end_requested)
                            and workflow.patched(MESSAGE_BEATS_IDLE_TIMEOUT_PATCH)):
                        state.current.stop_reason = "idle_timeout"
                        break
                continue
            if self._input.one_shot or state.current.stop_reason == "ended":
                break
        await self._wind_up()

    async def _wind_up(self) -> None:
        """Before the run ends: answer every request still waiting, close the stream, finish
        every handler, and (a subagent) send its last reports to its parent."""
        self._desk.settle(workflow.now(), final=True)
        self._narrator.close()
        await workflow.wait_condition(workflow.all_handlers_finished)
        if self._reports:
            await asyncio.gather(*self._reports, return_exceptions=True)

    # ----- signals, updates and queries -----

    # A signal's request defaults to None: a signal sent without one (any client can send it)
    # is dropped with a warning, where a missing argument would fail the workflow task.

    @workflow.signal
    def say(self, request: SayRequest | None = None) -> None:
        if _sent(request, "say"):
            self._take_message(request)

    @workflow.update
    def send_message(self, request: SayRequest) -> SignalOutcome:
        """`say`, answered synchronously: the validator refuses before anything reaches history."""
        return self._take_message(request)

    def _take_message(self, request: SayRequest) -> SignalOutcome:
        repeated = self._desk.repeated(request.request_id) is not None
        outcome = self._desk.take_message(request, self._input.one_shot,
                                          self._phase == "completed")
        if outcome.accepted and not repeated:
            self._audit_input("message", outcome.turn, request.sender, request.text)
        return outcome

    @send_message.validator
    def _check_message(self, request: SayRequest) -> None:
        reason = self._desk.message_refusal(request.text, self._input.one_shot,
                                            self._phase == "completed")
        if reason is not None:
            raise ValueError(reason)

    @workflow.signal(name=CHILD_STATUS_SIGNAL)
    def child_status(self, report: ChildReport | None = None) -> None:
        """A subagent's status and what it waits for (its own subagents' calls and questions
        included), so that this conversation shows them, each named by its path from here."""
        if not _sent(report, CHILD_STATUS_SIGNAL):
            return
        for child in self._state.current.children:
            if child.workflow_id == report.workflow_id and child.status not in CLOSED_STATUSES:
                if None not in (report.seq, child.seq) and report.seq <= child.seq:
                    return  # an earlier report, delivered after a later one
                child.seq = report.seq
                waited = (child.pending_confirmations, child.pending_question)
                child.status = report.status
                child.pending_confirmations = [
                    self._owned(p, report.workflow_id)
                    for p in report.pending_confirmations[:MAX_CALLS_PER_REPLY]]
                question = report.pending_question
                child.pending_question = question and self._owned(question, report.workflow_id)
                waits = (child.pending_confirmations, child.pending_question)
                if waits != waited and (waits[0] or waits[1]):  # what this one's watchers wake on
                    self._narrator.emit("child_waiting", text=child.workflow_id,
                                        tool=child.profile, status=child.status)
                self._sync_status()

    def _owned(self, pending: PendingT, child_id: str) -> PendingT:
        """A subagent's pending call or question, with the conversation that owns it and its
        ref from here: the owner's id relative to this one's, then the call id."""
        owner = pending.conversation_id or child_id
        path = relative_id(owner, workflow.info().workflow_id)
        return pending.model_copy(update={"conversation_id": owner,
                                          "ref": f"{path}/{pending.call_id}"})

    @workflow.signal
    def end(self, request: EndRequest | None = None) -> None:
        request = request or EndRequest()  # an end needs no more than its name
        if not self._state.end_requested:
            self._audit_input("end", self._state.current.number, request.sender, None)
        self._state.end_requested = True
        self._desk.accept(request.request_id)
        if self._turn_task is not None and not self._turn_task.done():
            self._ending = True
            self._turn_task.cancel()  # the model call or tools in flight, and waits for a human

    @workflow.signal
    async def confirm(self, request: ConfirmRequest | None = None) -> None:
        if _sent(request, "confirm"):
            await self._human(request)

    @workflow.signal
    async def reject(self, request: RejectRequest | None = None) -> None:
        if _sent(request, "reject"):
            await self._human(request)

    @workflow.signal
    async def answer(self, request: AnswerRequest | None = None) -> None:
        if _sent(request, "answer"):
            await self._human(request)

    # Update twins of the decision signals, for callers that want a synchronous answer: the
    # validator refuses before anything reaches the history; the handler is the signal's.

    @workflow.update
    async def decide_confirm(self, request: ConfirmRequest) -> SignalOutcome:
        return await self._human(request)

    @decide_confirm.validator
    def _check_confirm(self, request: ConfirmRequest) -> None:
        self._check_request(request, self._desk.plan_confirm(request))

    @workflow.update
    async def decide_reject(self, request: RejectRequest) -> SignalOutcome:
        return await self._human(request)

    @decide_reject.validator
    def _check_reject(self, request: RejectRequest) -> None:
        self._check_request(request, self._desk.plan_reject(request))

    @workflow.update
    async def give_answer(self, request: AnswerRequest) -> SignalOutcome:
        return await self._human(request)

    @give_answer.validator
    def _check_answer(self, request: AnswerRequest) -> None:
        self._check_request(request, self._desk.plan_answer(request))

    def _check_request(self, request: HumanRequest, plan: object) -> None:
        """An Update's validator: a request id already taken answers as it did; else what the
        request would do now must be allowed."""
        if self._desk.repeated(request.request_id) is None and isinstance(plan, Refusal):
            raise ValueError(plan.reason)

    async def _human(self, request: HumanRequest) -> SignalOutcome:
        """A decision or an answer: taken or refused now, or, when it names what a result on
        its way may bring, once that result is in (`HumanDesk`). A request id seen before
        answers as it did the first time."""
        seen = self._desk.repeated(request.request_id)
        if isinstance(seen, SignalOutcome):
            return seen
        taken = seen or self._desk.take(request, workflow.now())
        if taken.verdict is None:  # `settle` announces it once its result is in
            await workflow.wait_condition(lambda: taken.verdict is not None)
        else:
            self._announce(taken)
        return _outcome(taken.verdict, request.request_id)

    def _announce_settled(self, settled: list[Taken]) -> None:
        for taken in settled:
            self._announce(taken)

    def _announce(self, taken: Taken) -> None:
        """Put what became of a human request on the live stream and in the status."""
        verdict = taken.verdict
        if isinstance(taken.request, AnswerRequest):
            if isinstance(verdict, Refusal):
                self._narrator.emit("decision_refused", text=verdict.reason)
            else:
                self._narrator.emit("answered", text=verdict)
                self._audit_input("answer", None, taken.request.sender, verdict)
        elif isinstance(verdict, (list, Refusal)):
            self._narrator.announce(verdict)
        self._sync_status()

    @workflow.query
    def status(self) -> ConversationStatus:
        state, turn = self._state, self._state.current
        return ConversationStatus(
            workflow_id=workflow.info().workflow_id, status=self._current_status(),
            turn=turn.number, steps=turn.steps, llm_calls=state.llm_calls,
            tools_used=list(turn.tools_used), stop_reason=turn.stop_reason,
            final_answer=turn.final_answer, final_output=turn.final_output,
            pending_confirmations=self._pending_confirmations(),
            pending_question=self._pending_question(),
            usage=state.usage,
            error=turn.error or ("; ".join(state.notices) or None),
            queued_messages=len(state.inbox), decisions=list(turn.decisions),
            turns=list(state.turns), runs=state.runs, context=self._thinker.context_use(),
            children=[ChildRef(workflow_id=c.workflow_id, profile=c.profile, status=c.status)
                      for c in turn.children],
            owner=self._input.owner, trace_id=tracing.trace_id_of(turn.trace),
        )

    def _pending_confirmations(self) -> list[PendingConfirmation]:
        """The calls waiting for a decision: this conversation's, then its subagents'."""
        children = self._state.current.children
        return [*self._desk.pending_confirmations(),
                *(p for c in children for p in c.pending_confirmations)]

    def _pending_question(self) -> PendingQuestion | None:
        return self._desk.pending_question() or next(
            (c.pending_question for c in self._state.current.children if c.pending_question),
            None)

    @workflow.query
    def signal_outcome(self, request_id: str) -> SignalOutcome | None:
        return self._desk.outcome(request_id)

    @workflow.query
    def messages(self) -> list[ChatMessage]:
        """The context: the system prompt, the running summary, and the latest turns."""
        return context.shown(self._state.context)

    @workflow.query(name=PENDING_PROMPT_QUERY)
    def pending_prompt(self, digest: str) -> PendingPrompt | None:
        """The prompt and tools of the model call this conversation waits on, if it has this
        digest: for a worker that holds no copy of the previous prompt
        (`rules.delta`)."""
        return self._thinker.pending(digest)

    @workflow.query
    def pending_schemas(self) -> dict[str, dict[str, Any]]:
        """The argument schema of each call waiting for a decision, by call id: what a console
        validates edited args against before sending them (the workflow validates again)."""
        return self._desk.pending_schemas()

    @workflow.query
    def history(self) -> list[AuditRecord]:
        """The audit trail: one record per step (the latest ones; older ones are in the memo)."""
        return list(self._narrator.audit)

    # ----- tools -----

    async def _load_tools(self) -> None:
        with self._desk.awaiting_results():
            refusal = await discover_tools(self._state, self._limits, self._input.approval,
                                           self._input.profile)
        if refusal is not None:  # the worker holds the floor of what runs without a human
            self._state.notice(f"refused: {refusal}")
            self._set_phase("failed")
            raise ApplicationError(f"refused: {refusal}", type="PolicyRefused", non_retryable=True)

    # ----- a turn -----

    async def _run_turn(self, text: str | None) -> None:
        """Run a turn to its end; `text` is None when resuming one carried over continue-as-new.
        The turn runs as a task that `end` cancels, with whatever it has in flight."""
        if text is not None:
            self._begin_turn(text)
        if workflow.patched(END_INTERRUPTS_PATCH):
            self._turn_task = asyncio.ensure_future(self._think_and_act())
            try:
                await self._turn_task
            except asyncio.CancelledError:
                if not self._ending:  # the workflow itself is being cancelled
                    raise
                self._interrupted()
            finally:
                self._turn_task = None
        else:  # as runs begun before it did
            await self._think_and_act()
        turn = self._state.current
        turn.in_progress = False
        self._trace_turn()
        if self._input.profile is None:  # a subagent's turns are its parent's business
            failed = turn.stop_reason in ERROR_STOPS
            self._narrator.notifier.notify(
                "conversation_failed" if failed else "turn_finished", turn.number,
                answer=turn.final_answer, stop_reason=turn.stop_reason,
                error=turn.error if failed else None)
        self._narrator.emit("turn_finished", stop_reason=turn.stop_reason, text=turn.final_answer,
                            tokens=turn.usage.total_tokens, cost_usd=turn.usage.cost_usd,
                            error=turn.error)
        self._state.turns = keep_last([*self._state.turns, TurnSummary(
            turn=turn.number, steps_taken=turn.steps, llm_calls=turn.llm_calls,
            tools_used=turn.tools_used[:MAX_TOOLS_LISTED], stop_reason=turn.stop_reason,
            usage=turn.usage, error=turn.error, fallbacks=turn.fallbacks,
        )], MAX_TURN_SUMMARIES)
        workflow.logger.info("turn %d finished: %s after %d step(s)", turn.number,
                             turn.stop_reason, turn.steps)

    def _trace_turn(self) -> None:
        """The turn's `invoke_agent` span, now that it has ended."""
        turn, usage = self._state.current, self._state.current.usage
        agent = self._input.profile or "assistant"
        telemetry.emit(
            f"invoke_agent {agent}", turn.trace, self._turn_parent(turn.number),
            turn.started_at or workflow.now(), workflow.now(),
            {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": agent,
             "gen_ai.conversation.id": workflow.info().workflow_id,
             "gen_ai.request.model": self._input.model,
             "gen_ai.usage.input_tokens": usage.prompt_tokens,
             "gen_ai.usage.output_tokens": usage.completion_tokens,
             "agent.cost_usd": usage.cost_usd, "agent.turn": turn.number,
             "agent.steps": turn.steps, "agent.stop_reason": turn.stop_reason,
             "agent.owner": self._input.owner},
            error=turn.error if turn.stop_reason in ERROR_STOPS else None,
            content={"gen_ai.input.messages": self._turn_text,
                     "gen_ai.output.messages": turn.final_answer})

    def _turn_parent(self, number: int) -> str | None:
        """The span a turn's trace continues: for the first, whoever started the conversation
        (a caller's request, a parent's call of this subagent); the others begin their own."""
        return self._input.trace_parent if number == 1 else None

    def trace_parent(self) -> str | None:
        """The span a model call or tool run now belongs under: the running turn's (read by the
        worker's `TelemetryInterceptor` as it schedules an activity)."""
        turn = self._state.current
        return turn.trace if turn.in_progress else None

    def _interrupted(self) -> None:
        """What `end` leaves of a turn it interrupted: pending calls rejected by the system, and
        every call in the context answered, so the context stays valid."""
        self._desk.abandon_round("the conversation was ended", workflow.now())
        ctx = self._state.context
        ctx.messages = context.answer_open_calls(ctx.messages, "interrupted: the conversation was ended")
        self._state.current.stop_reason = "ended"
        workflow.logger.info("turn %d interrupted by end", self._state.current.number)

    def _begin_turn(self, text: str) -> None:
        self._turns_this_run += 1
        number = self._state.current.number + 1
        trace = tracing.new_span(self._trace_ids, self._turn_parent(number))
        self._state.current = TurnState(number=number, in_progress=True, trace=trace,
                                        started_at=workflow.now())
        self._turn_text = text
        self._state.context.messages.append(ChatMessage(role="user", content=text))
        self._narrator.emit("turn_started", text=text)
        self._set_phase("running")

    async def _think_and_act(self) -> None:
        state, turn = self._state, self._state.current
        while True:
            if state.end_requested:
                turn.stop_reason = "ended"
                return
            if spent := self._over_budget():
                self._stop("budget_exceeded", spent)
                return
            if self._should_continue_as_new(at_turn_boundary=False):
                await self._continue_as_new()
            step = turn.steps + 1
            offered = loop.tools_offered(step, self._input.max_steps) and not turn.forced_reason
            try:
                with self._desk.awaiting_results():
                    reply = await self._thinker.think(step, offered)
            except ActivityError as err:
                raise_if_cancelled(err)
                self._stop("llm_error", self._model_failure(err))
                self._record_step(step, None, Usage())
                return
            turn.steps = step
            message, refused, unread = self._thinker.usable(reply.message, step, offered)
            decision = loop.decide_after_reply(message, offered, turn.forced_reason)
            if isinstance(decision, loop.RunTools) and self._over_budget():
                decision = loop.FinalAnswer(message.content or "", "budget_exceeded")
            if isinstance(decision, loop.FinalAnswer) and unread and decision.stop_reason == \
                    "answered" and turn.reminders < loop.MAX_CALL_REMINDERS:
                self._remind(message, unread)  # a call written in a shape that could not be read
                self._record_step(step, message.content, reply.usage, entry=reply.entry)
                continue
            if isinstance(decision, loop.FinalAnswer):
                self._finish(message, decision, reply.finish_reason)
                if unread:  # the more telling error, of a reply cut off at its limit too
                    turn.error = loop.unread_calls_error(unread, reply.finish_reason == "length")
                again = self._check_output()
                self._record_step(step, message.content, reply.usage, entry=reply.entry)
                if again:
                    continue
                return
            state.context.messages.append(message)
            share = self._thinker.observation_share(message)
            tool_round = ToolRound(self._input, state, self._desk, self._narrator,
                                   self._sync_status, self._pace, self._seams)
            done = await tool_round.run(decision.calls, reply.finish_reason == "length", share,
                                        refused)
            turn.call_records = keep_last([*turn.call_records, *done.records], 2)
            self._record_step(step, message.content, reply.usage, done.actions, reply.entry)
            if is_looping(turn.call_records):
                workflow.logger.warning("loop detected in turn %d", turn.number)
                turn.forced_reason = "loop_detected"

    def _remind(self, message: ChatMessage, unread: list[str]) -> None:
        """Tell the model, once a turn, that a call it wrote in its text did not run and how to
        write one that does; its reply stays in the context, as it wrote it."""
        self._state.current.reminders += 1
        workflow.logger.info("turn %d: a call of %s written but not read; reminding the model",
                             self._state.current.number, ", ".join(unread))
        self._state.context.messages += [
            message, ChatMessage(role="user", content=loop.call_reminder(unread))]

    def _audit_input(self, kind: str, turn: int | None, by: str | None,
                     text: str | None) -> None:
        """A person's input in the audit trail: who started the conversation, sent a message
        (at the turn that answers it) or ended it."""
        if not self._audit_inputs:
            return
        self._narrator.record(AuditRecord(
            at=workflow.now(), turn=turn or self._state.current.number, step=0, thought=None,
            tokens=Usage(), kind=kind, by=by or "unknown", text=text))  # type: ignore[arg-type]

    def _model_failure(self, err: ActivityError) -> str:
        """Why the model call failed, as the turn's error; for a prompt too long even after
        folding harder, what was left out for the conversation to go on, or the sizes."""
        if not is_context_too_long(err):
            return self._thinker.failure(err)
        return self._thinker.leave_out_too_long() or self._thinker.too_long(err)

    def _record_step(self, step: int, thought: str | None, tokens: Usage,
                     actions: list[AuditAction] | None = None, entry: str | None = None) -> None:
        """The audit record of a step, once its observations are in (or the turn has ended);
        `entry`: the model entry that answered."""
        turn = self._state.current
        self._narrator.record(AuditRecord(
            at=workflow.now(), turn=turn.number, step=step, thought=thought,
            actions=actions or [], tokens=tokens, stop_reason=None if actions else turn.stop_reason,
            entry=clip(entry, MAX_MODEL_NAME_BYTES),
        ))

    def _finish(
        self, message: ChatMessage, answer: loop.FinalAnswer, finish_reason: str | None
    ) -> None:
        turn = self._state.current
        # An answer must never leave tool calls without results in the history.
        self._state.context.messages.append(message.model_copy(update={"tool_calls": None}))
        turn.final_answer = answer.text
        turn.stop_reason = answer.stop_reason  # type: ignore[assignment]
        if answer.stop_reason == "budget_exceeded":
            turn.error = self._over_budget()
        elif not answer.text.strip() and message.tool_calls:
            turn.error = "the model called tools when asked for a final answer without them"
        elif finish_reason == "length":
            turn.error = "the answer was cut off at the model's output limit (finish_reason=length)"
        elif not answer.text.strip():
            turn.error = "the model returned an empty reply"

    def _check_output(self) -> bool:
        """With an output schema, the final answer must be JSON that fits it: its value becomes
        `final_output`. A miss is sent back once with the reason (True: ask again); then the
        turn ends as `invalid_output`."""
        schema, turn = self._input.output_schema, self._state.current
        if schema is None or turn.stop_reason not in ("answered", "max_steps"):
            return False
        problem = output.output_schema_problem(schema)
        if problem is None:
            checked = output.check_output(turn.final_answer or "", schema)
            if isinstance(checked, output.Output):
                turn.final_output = checked.value
                return False
            problem = checked
            if turn.corrections < output.MAX_CORRECTIONS:
                turn.corrections += 1
                workflow.logger.info("turn %d: %s; asking again", turn.number, problem)
                self._state.context.messages.append(
                    ChatMessage(role="user", content=output.correction(problem, schema)))
                turn.stop_reason = turn.final_answer = turn.error = None
                return True
        self._stop("invalid_output", problem)
        return False

    def _over_budget(self) -> str | None:
        """Why the conversation's budget is used up, or None."""
        return over_budget(self._state.usage, self._input.max_total_tokens,
                           self._input.max_cost_usd, fail_closed=self._seams)

    def _stop(self, reason: StopReason, error: str) -> None:
        turn = self._state.current
        turn.stop_reason = reason
        turn.error = clip(error, MAX_ERROR_BYTES)
        workflow.logger.warning("turn %d stopped (%s): %s", turn.number, reason, error)

    # ----- continue-as-new -----

    def _should_continue_as_new(self, at_turn_boundary: bool) -> bool:
        info = workflow.info()
        if self._delta_context:  # a step adds little: hand over only when the history is large
            if loop.history_full(info.get_current_history_length(),
                                 info.get_current_history_size(),
                                 self._input.continue_as_new_after_events):
                return True
        elif info.is_continue_as_new_suggested():
            return True
        return at_turn_boundary and self._turns_this_run >= self._input.continue_as_new_after_turns

    async def _continue_as_new(self) -> None:
        """Hand the conversation to a fresh run (bounded history), after every signal is handled;
        deliveries in flight are carried to it."""
        self._narrator.notifier.hand_over()
        await self._wind_up()
        workflow.logger.info(
            "continuing as new after %d events", workflow.info().get_current_history_length()
        )
        state = carried(self._state, self._narrator.carry())
        workflow.continue_as_new(next_input(self._input, state))

    # ----- status -----

    def _current_status(self) -> Status:
        if self._phase == "running":
            return self._desk.waiting_status() or _children_waiting(
                self._state.current.children) or "running"
        return self._phase

    def _set_phase(self, phase: Status) -> None:
        self._phase = phase
        self._sync_status()

    def _sync_status(self) -> None:
        """Publish the status to the `AgentStatus` search attribute and the UI, when it changed
        (and, for a subagent, tell its parent what it waits for)."""
        status = self._current_status()
        self._report_to_parent(status)
        if status == self._published:
            return
        self._published = status
        turn = self._state.current
        workflow.upsert_search_attributes([AGENT_STATUS.value_set(status)])
        workflow.set_current_details(
            self._desk.details_markdown(workflow.info().workflow_id, status, turn.number,
                                        turn.stop_reason, turn.error, turn.children)
        )


    def _report_to_parent(self, status: Status) -> None:
        parent = workflow.info().parent
        if parent is None or self._input.profile is None:
            return
        report = ChildReport(workflow_id=workflow.info().workflow_id, profile=self._input.profile,
                             status=status, pending_confirmations=self._pending_confirmations(),
                             pending_question=self._pending_question())
        if status in CLOSED_STATUSES or report == (self._reported or ChildReport(
                workflow_id=report.workflow_id, profile=report.profile, status="running")):
            return  # the parent learns the end from the child's result
        self._reported = report
        self._state.reported += 1
        report = report.model_copy(update={"seq": self._state.reported})
        handle = workflow.get_external_workflow_handle(parent.workflow_id)
        self._reports.append(asyncio.ensure_future(handle.signal(CHILD_STATUS_SIGNAL, report)))


def _children_waiting(children: list[ChildReport]) -> Status | None:
    statuses = {c.status for c in children}
    return next((waiting for waiting in WAITING_STATUSES if waiting in statuses), None)


def _outcome(result: object, request_id: str | None) -> SignalOutcome:
    if isinstance(result, Refusal):
        return SignalOutcome(request_id=request_id or "", accepted=False, reason=result.reason)
    return SignalOutcome(request_id=request_id or "", accepted=True)


def _sent(request: object, signal: str) -> bool:
    """Whether a signal came with its request; one without is dropped, with a warning."""
    if request is None:
        workflow.logger.warning("signal %s came without its request; dropped", signal)
        return False
    return True


class SignalGuard(Interceptor):
    """Drops a signal sent with more than the one request every signal here takes: the SDK
    would call its handler with all of them, and the TypeError would fail the workflow task
    (a signal without its request is `_sent`'s to drop). The worker and every replayer run it."""

    def workflow_interceptor_class(
        self, input: WorkflowInterceptorClassInput
    ) -> type[WorkflowInboundInterceptor]:
        return _OneRequestPerSignal


class _OneRequestPerSignal(WorkflowInboundInterceptor):
    async def handle_signal(self, input: HandleSignalInput) -> None:
        if len(input.args) > 1:
            workflow.logger.warning("signal %s came with %d arguments, not one; dropped",
                                    input.signal, len(input.args))
            return
        await super().handle_signal(input)
