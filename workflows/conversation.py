"""The conversation workflow: one durable ReAct loop per conversation.

Read it as the story of a conversation: load the tools, wait for a message, think (LLM activity),
act (tool rounds, see `workflows.acting`), observe, and again until the model answers or a stopping
rule ends the turn. Decisions that are not orchestration live in pure functions (`decisions`,
`approvals`, `stopping`, `repair`, `compaction`); the human-facing state lives in `HumanDesk`.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy, SearchAttributeKey
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from workflows import decisions
    from workflows.acting import ToolRounds, failure_reason, raise_if_cancelled
    from workflows.compaction import compact
    from workflows.desk import HumanDesk
    from workflows.handover import Handover
    from workflows.approvals import Refusal
    from workflows.models import (
        AnswerRequest,
        AuditRecord,
        Decision,
        ChatMessage,
        ConfirmRequest,
        ConversationInput,
        ConversationStatus,
        EndRequest,
        LLMReply,
        LLMRequest,
        RejectRequest,
        SayRequest,
        SignalOutcome,
        Status,
        StopReason,
        ToolCatalog,
        ToolDefinition,
        TurnSummary,
        Usage,
    )
    from workflows.narrator import Narrator
    from workflows.prompts import DEFAULT_SYSTEM_PROMPT
    from workflows.questions import ASK_TOOLS
    from workflows.repair import recover_tool_calls, unique_call_ids
    from workflows.stopping import CallRecord, is_looping, over_budget

AGENT_STATUS = SearchAttributeKey.for_keyword("AgentStatus")
LLM_ACTIVITY = "llm_call"
LIST_TOOLS_ACTIVITY = "list_tools"
MAX_TURN_SUMMARIES = 20
MAX_SEEN_CALL_IDS = 2000


@workflow.defn
class ConversationWorkflow(ToolRounds, Handover):
    @workflow.init
    def __init__(self, inp: ConversationInput) -> None:
        # Signals may arrive before `run` starts (signal-with-start), so all state lives here.
        self._input = inp
        self._desk = HumanDesk()
        self._phase: Status = "running"  # running | idle | completed; waits come from the desk
        self._published: Status | None = None
        self._turns_this_run = 0
        carry = inp.carry
        if carry is not None:
            self._narrator = Narrator(carry.stream, carry.audit, carry.audit_dropped)
            self._restore(carry)
            return
        self._narrator = Narrator()
        self._messages = [
            ChatMessage(role="system", content=inp.system_prompt or DEFAULT_SYSTEM_PROMPT)
        ]
        self._inbox: list[str] = [inp.prompt]
        self._catalog: dict[str, ToolDefinition] = {}
        self._setup_errors: list[str] = []  # tool sources that failed to load; the chat goes on
        self._turn = 0
        self._steps = 0
        self._llm_calls = 0
        self._turn_llm_calls = 0
        self._tools_used: list[str] = []
        self._stop_reason: StopReason | None = None
        self._final_answer: str | None = None
        self._error: str | None = None
        self._usage = Usage()
        self._turn_usage = Usage()
        self._turns: list[TurnSummary] = []
        self._in_turn = False
        self._forced_reason: StopReason | None = None
        self._call_records: list[CallRecord] = []
        self._seen_call_ids: list[str] = []
        self._end_requested = False
        self._runs = 1

    @workflow.run
    async def run(self, inp: ConversationInput) -> ConversationStatus:
        try:
            self._sync_status()
            if inp.carry is None:
                await self._load_tools()
            await self._serve()
        except asyncio.CancelledError:
            self._stop_reason = "cancelled"
            self._set_phase("completed")
            self._narrator.close()
            raise
        self._set_phase("completed")
        return self.status()

    async def _serve(self) -> None:
        """Take messages one turn at a time until the conversation ends, goes idle too long,
        or hands over to a fresh run. A run that starts mid-turn finishes that turn first."""
        while True:
            if self._in_turn:
                await self._run_turn(None)
            elif self._inbox:
                await self._run_turn(self._inbox.pop(0))
            elif self._end_requested:
                self._stop_reason = "ended"
                break
            else:
                self._set_phase("idle")
                if self._should_continue_as_new(at_turn_boundary=True):
                    await self._continue_as_new()
                try:
                    await workflow.wait_condition(
                        lambda: bool(self._inbox) or self._end_requested,
                        timeout=timedelta(seconds=self._input.idle_timeout_s),
                    )
                except asyncio.TimeoutError:
                    self._stop_reason = "idle_timeout"
                    break
                continue
            if self._input.one_shot or self._stop_reason == "ended":
                break
        self._narrator.close()
        await workflow.wait_condition(workflow.all_handlers_finished)

    # ----- signals and queries -----

    @workflow.signal
    def say(self, request: SayRequest) -> None:
        if self._input.one_shot:
            self._desk.refuse(request.request_id, "a one-shot conversation takes no more messages")
        elif self._end_requested or self._phase == "completed":
            self._desk.refuse(request.request_id, "the conversation is ending")
        elif not request.text.strip():
            self._desk.refuse(request.request_id, "the message is empty")
        else:
            self._inbox.append(request.text)
            self._desk.accept(request.request_id, turn=self._turn + len(self._inbox))

    @workflow.signal
    def end(self, request: EndRequest) -> None:
        self._end_requested = True
        self._desk.accept(request.request_id)

    @workflow.signal
    def confirm(self, request: ConfirmRequest) -> None:
        self._after_decision(self._desk.confirm(request, workflow.now()), request.request_id)

    @workflow.signal
    def reject(self, request: RejectRequest) -> None:
        self._after_decision(self._desk.reject(request, workflow.now()), request.request_id)

    @workflow.signal
    def answer(self, request: AnswerRequest) -> None:
        self._after_answer(self._desk.answer(request), request.request_id)

    # Update twins of the decision signals, for callers that want a synchronous answer: the
    # validator refuses before anything reaches the history; the handler is the signal's.

    @workflow.update
    def decide_confirm(self, request: ConfirmRequest) -> SignalOutcome:
        return self._after_decision(self._desk.confirm(request, workflow.now()), request.request_id)

    @decide_confirm.validator
    def _check_confirm(self, request: ConfirmRequest) -> None:
        _raise_refusal(self._desk.plan_confirm(request))

    @workflow.update
    def decide_reject(self, request: RejectRequest) -> SignalOutcome:
        return self._after_decision(self._desk.reject(request, workflow.now()), request.request_id)

    @decide_reject.validator
    def _check_reject(self, request: RejectRequest) -> None:
        _raise_refusal(self._desk.plan_reject(request))

    @workflow.update
    def give_answer(self, request: AnswerRequest) -> SignalOutcome:
        return self._after_answer(self._desk.answer(request), request.request_id)

    @give_answer.validator
    def _check_answer(self, request: AnswerRequest) -> None:
        _raise_refusal(self._desk.plan_answer(request))

    def _after_decision(
        self, result: list[Decision] | Refusal, request_id: str | None
    ) -> SignalOutcome:
        self._announce(result)
        self._sync_status()
        return _outcome(result, request_id)

    def _after_answer(self, result: str | Refusal, request_id: str | None) -> SignalOutcome:
        if isinstance(result, Refusal):
            self._emit("decision_refused", text=result.reason)
        else:
            self._emit("answered", text=result)
        self._sync_status()
        return _outcome(result, request_id)

    @workflow.query
    def status(self) -> ConversationStatus:
        return ConversationStatus(
            workflow_id=workflow.info().workflow_id,
            status=self._current_status(),
            turn=self._turn,
            steps=self._steps,
            llm_calls=self._llm_calls,
            tools_used=list(self._tools_used),
            stop_reason=self._stop_reason,
            final_answer=self._final_answer,
            pending_confirmations=self._desk.pending_confirmations(),
            pending_question=self._desk.pending_question(),
            usage=self._usage,
            error=self._error or ("; ".join(self._setup_errors) or None),
            queued_messages=len(self._inbox),
            decisions=list(self._desk.decisions),
            turns=list(self._turns),
            runs=self._runs,
        )

    @workflow.query
    def signal_outcome(self, request_id: str) -> SignalOutcome | None:
        return self._desk.outcomes.get(request_id)

    @workflow.query
    def messages(self) -> list[ChatMessage]:
        return list(self._messages)

    @workflow.query
    def history(self) -> list[AuditRecord]:
        """The audit trail: one record per step (the latest ones; older ones are in the memo)."""
        return list(self._narrator.audit)

    # ----- thinking -----

    async def _load_tools(self) -> None:
        self._catalog = {t.name: t for t in ASK_TOOLS}
        try:
            catalog = await workflow.execute_activity(
                LIST_TOOLS_ACTIVITY,
                result_type=ToolCatalog,
                start_to_close_timeout=timedelta(seconds=60),
                retry_policy=RetryPolicy(maximum_attempts=5, maximum_interval=timedelta(seconds=10)),
                summary="list tools",
            )
        except ActivityError as err:
            self._setup_errors = [f"tools unavailable: {failure_reason(err)}"]
            workflow.logger.warning("tool discovery failed: %s", self._setup_errors[0])
            return
        self._setup_errors = list(catalog.errors)
        for error in catalog.errors:
            workflow.logger.warning("tool source unavailable: %s", error)
        self._catalog.update({t.name: t for t in catalog.tools if t.name not in self._catalog})

    async def _run_turn(self, text: str | None) -> None:
        """Run a turn to its end; `text` is None when resuming one carried over continue-as-new."""
        if text is not None:
            self._begin_turn(text)
        await self._think_and_act()
        self._in_turn = False
        self._emit("turn_finished", stop_reason=self._stop_reason, text=self._final_answer)
        self._turns = [*self._turns, TurnSummary(
            turn=self._turn, steps_taken=self._steps, llm_calls=self._turn_llm_calls,
            tools_used=list(self._tools_used), stop_reason=self._stop_reason,
            usage=self._turn_usage, error=self._error,
        )][-MAX_TURN_SUMMARIES:]
        workflow.logger.info("turn %d finished: %s after %d step(s)", self._turn,
                             self._stop_reason, self._steps)

    def _begin_turn(self, text: str) -> None:
        self._turn += 1
        self._turns_this_run += 1
        self._steps = 0
        self._turn_llm_calls = 0
        self._turn_usage = Usage()
        self._tools_used = []
        self._stop_reason = None
        self._final_answer = None
        self._error = None
        self._forced_reason = None
        self._call_records = []
        self._in_turn = True
        self._desk.start_turn()
        self._messages.append(ChatMessage(role="user", content=text))
        self._emit("turn_started", text=text)
        self._set_phase("running")

    async def _think_and_act(self) -> None:
        while True:
            if self._end_requested:
                self._stop_reason = "ended"
                return
            if over_budget(self._usage, self._input.max_total_tokens):
                self._stop("budget_exceeded", self._budget_error())
                return
            if self._should_continue_as_new(at_turn_boundary=False):
                await self._continue_as_new()
            step = self._steps + 1
            offered = (
                decisions.tools_offered(step, self._input.max_steps) and not self._forced_reason
            )
            self._narrator.emit("llm_started", turn=self._turn, step=step)
            try:
                reply = await self._call_llm(step, offered)
            except ActivityError as err:
                raise_if_cancelled(err)
                self._stop("llm_error", f"model call failed: {failure_reason(err)}")
                self._record_step(step, None, Usage())
                return
            self._steps = step
            self._llm_calls += 1
            self._turn_llm_calls += 1
            self._usage = self._usage + reply.usage
            self._turn_usage = self._turn_usage + reply.usage
            message = self._repair(reply.message, step)
            decision = decisions.decide_after_reply(message, offered, self._forced_reason)
            if isinstance(decision, decisions.RunTools) and over_budget(
                self._usage, self._input.max_total_tokens
            ):
                decision = decisions.FinalAnswer(message.content or "", "budget_exceeded")
            if isinstance(decision, decisions.FinalAnswer):
                self._finish(message, decision, reply.finish_reason)
                self._record_step(step, message.content, reply.usage)
                return
            self._messages.append(message)
            cut_off = reply.finish_reason == "length"
            records, actions = await self._run_tools(decision.calls, cut_off)
            self._call_records += records
            self._record_step(step, message.content, reply.usage, actions)
            if is_looping(self._call_records):
                workflow.logger.warning("loop detected in turn %d", self._turn)
                self._forced_reason = "loop_detected"

    def _record_step(self, step: int, thought: str | None, tokens: Usage, actions=()) -> None:
        """The audit record of a step, once its observations are in (or the turn has ended)."""
        ended = not actions
        self._narrator.record(AuditRecord(
            at=workflow.now(), turn=self._turn, step=step, thought=thought,
            actions=list(actions), tokens=tokens, stop_reason=self._stop_reason if ended else None,
        ))

    def _repair(self, message: ChatMessage, step: int) -> ChatMessage:
        message = recover_tool_calls(message, self._catalog.keys())
        if message.tool_calls:
            calls = unique_call_ids(message.tool_calls, self._seen_call_ids, self._turn, step)
            self._seen_call_ids = [*self._seen_call_ids, *(c.id for c in calls)][-MAX_SEEN_CALL_IDS:]
            message = message.model_copy(update={"tool_calls": calls})
        return message

    def _finish(
        self, message: ChatMessage, answer: decisions.FinalAnswer, finish_reason: str | None
    ) -> None:
        # An answer must never leave tool calls without results in the history.
        self._messages.append(message.model_copy(update={"tool_calls": None}))
        self._final_answer = answer.text
        self._stop_reason = answer.stop_reason  # type: ignore[assignment]
        if answer.stop_reason == "budget_exceeded":
            self._error = self._budget_error()
        elif finish_reason == "length":
            self._error = "the answer was cut off at the model's output limit (finish_reason=length)"
        elif not answer.text.strip():
            self._error = "the model returned an empty reply"

    def _budget_error(self) -> str:
        return f"the conversation used its token budget ({self._input.max_total_tokens} tokens)"

    def _stop(self, reason: StopReason, error: str) -> None:
        self._stop_reason = reason
        self._error = error
        workflow.logger.warning("turn %d stopped (%s): %s", self._turn, reason, error)

    async def _call_llm(self, step: int, offered_tools: bool) -> LLMReply:
        opts = self._input.llm
        request = LLMRequest(
            model=self._input.model,
            messages=compact(self._messages, self._input.context_budget_tokens),
            tools=[t.openai_schema() for t in self._catalog.values()],
            tool_choice="auto" if offered_tools else "none",
            turn=self._turn,
            step=step,
        )
        return await workflow.execute_activity(
            LLM_ACTIVITY,
            request,
            result_type=LLMReply,
            start_to_close_timeout=timedelta(seconds=opts.timeout_s),
            heartbeat_timeout=timedelta(seconds=opts.heartbeat_timeout_s),
            retry_policy=RetryPolicy(
                initial_interval=timedelta(seconds=1),
                backoff_coefficient=2.0,
                maximum_interval=timedelta(seconds=opts.max_retry_interval_s),
                maximum_attempts=opts.max_attempts,
            ),
            summary=f"llm turn {self._turn} step {step}",
        )

    # ----- status -----

    def _current_status(self) -> Status:
        if self._phase == "running":
            return self._desk.waiting_status() or "running"
        return self._phase

    def _set_phase(self, phase: Status) -> None:
        self._phase = phase
        self._sync_status()

    def _sync_status(self) -> None:
        """Publish the status to the `AgentStatus` search attribute and the UI, when it changed."""
        status = self._current_status()
        if status == self._published:
            return
        self._published = status
        workflow.upsert_search_attributes([AGENT_STATUS.value_set(status)])
        workflow.set_current_details(
            self._desk.details_markdown(workflow.info().workflow_id, status, self._turn,
                                        self._stop_reason, self._error)
        )


def _raise_refusal(plan: object) -> None:
    if isinstance(plan, Refusal):
        raise ValueError(plan.reason)


def _outcome(result: object, request_id: str | None) -> SignalOutcome:
    if isinstance(result, Refusal):
        return SignalOutcome(request_id=request_id or "", accepted=False, reason=result.reason)
    return SignalOutcome(request_id=request_id or "", accepted=True)
