"""The conversation workflow: one durable ReAct loop per conversation.

Read it as the story of a conversation: load the tools, wait for a message, think (LLM activity),
act (tool activities, each risky one only after a human decision), observe (tool messages), and
again until the model answers. Decisions that are not orchestration live in pure functions
(`workflows.decisions`, `workflows.approvals`); the human-facing state lives in `HumanDesk`.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy, SearchAttributeKey
from temporalio.exceptions import ActivityError, ApplicationError, TimeoutError

with workflow.unsafe.imports_passed_through():
    from workflows import approvals, decisions
    from workflows.desk import HumanDesk
    from workflows.models import (
        AnswerRequest,
        ChatMessage,
        ConfirmRequest,
        ConversationInput,
        ConversationStatus,
        EndRequest,
        LLMReply,
        LLMRequest,
        Question,
        RejectRequest,
        SayRequest,
        SignalOutcome,
        Status,
        StopReason,
        ToolCall,
        ToolCatalog,
        ToolDefinition,
        ToolInvocation,
        ToolOutcome,
        Usage,
    )
    from workflows.prompts import DEFAULT_SYSTEM_PROMPT
    from workflows.questions import ASK_TOOLS, question_from_args

AGENT_STATUS = SearchAttributeKey.for_keyword("AgentStatus")
LLM_ACTIVITY = "llm_call"
LIST_TOOLS_ACTIVITY = "list_tools"
TOOL_HEARTBEAT_TIMEOUT = timedelta(seconds=10)
MAX_INPUT_ROUNDS = 3  # how often one tool call may come back asking for input


@workflow.defn
class ConversationWorkflow:
    @workflow.init
    def __init__(self, inp: ConversationInput) -> None:
        # Signals may arrive before `run` starts (signal-with-start), so all state lives here.
        self._input = inp
        self._messages: list[ChatMessage] = [
            ChatMessage(role="system", content=inp.system_prompt or DEFAULT_SYSTEM_PROMPT)
        ]
        self._inbox: list[str] = [inp.prompt]
        self._catalog: dict[str, ToolDefinition] = {}
        self._desk = HumanDesk()
        self._phase: Status = "running"  # running | idle | completed; waits come from the desk
        self._published: Status | None = None
        self._turn = 0
        self._steps = 0
        self._llm_calls = 0
        self._tools_used: list[str] = []
        self._stop_reason: StopReason | None = None
        self._final_answer: str | None = None
        self._error: str | None = None
        self._setup_errors: list[str] = []  # tool sources that failed to load; the chat goes on
        self._usage = Usage()
        self._end_requested = False

    @workflow.run
    async def run(self, inp: ConversationInput) -> ConversationStatus:
        self._sync_status()
        await self._load_tools()
        while True:
            if not self._inbox and not self._end_requested:
                self._set_phase("idle")
                try:
                    await workflow.wait_condition(
                        lambda: bool(self._inbox) or self._end_requested,
                        timeout=timedelta(seconds=inp.idle_timeout_s),
                    )
                except asyncio.TimeoutError:
                    self._stop_reason = "idle_timeout"
                    break
            if self._inbox:
                await self._run_turn(self._inbox.pop(0))
                if inp.one_shot or (self._end_requested and self._stop_reason == "ended"):
                    break
                continue
            self._stop_reason = "ended"
            break
        await workflow.wait_condition(workflow.all_handlers_finished)
        self._set_phase("completed")
        return self.status()

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
        self._desk.confirm(request, workflow.now())
        self._sync_status()

    @workflow.signal
    def reject(self, request: RejectRequest) -> None:
        self._desk.reject(request, workflow.now())
        self._sync_status()

    @workflow.signal
    def answer(self, request: AnswerRequest) -> None:
        self._desk.answer(request)
        self._sync_status()

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
        )

    @workflow.query
    def signal_outcome(self, request_id: str) -> SignalOutcome | None:
        return self._desk.outcomes.get(request_id)

    @workflow.query
    def messages(self) -> list[ChatMessage]:
        return list(self._messages)

    # ----- the loop -----

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

    async def _run_turn(self, text: str) -> None:
        self._turn += 1
        self._steps = 0
        self._tools_used = []
        self._stop_reason = None
        self._final_answer = None
        self._error = None
        self._desk.start_turn()
        self._messages.append(ChatMessage(role="user", content=text))
        self._set_phase("running")
        max_steps = self._input.max_steps
        while True:
            if self._end_requested:
                self._stop_reason = "ended"
                return
            step = self._steps + 1
            offered = decisions.tools_offered(step, max_steps)
            try:
                reply = await self._call_llm(step, offered)
            except ActivityError as err:
                self._error = f"model call failed: {failure_reason(err)}"
                self._stop_reason = "llm_error"
                workflow.logger.warning("turn %d ended by LLM error: %s", self._turn, self._error)
                return
            self._steps = step
            self._llm_calls += 1
            self._usage = self._usage + reply.usage
            decision = decisions.decide_after_reply(reply, offered)
            if isinstance(decision, decisions.FinalAnswer):
                # An answer must never leave tool calls without results in the history.
                self._messages.append(reply.message.model_copy(update={"tool_calls": None}))
                self._final_answer = decision.text
                self._stop_reason = decision.stop_reason  # type: ignore[assignment]
                return
            self._messages.append(reply.message)
            await self._run_tools(decision.calls)

    async def _call_llm(self, step: int, offered_tools: bool) -> LLMReply:
        opts = self._input.llm
        request = LLMRequest(
            model=self._input.model,
            messages=self._messages,
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

    async def _run_tools(self, calls: list[ToolCall]) -> None:
        """Read then write: safe calls run at once, then risky ones wait for their own decision,
        then questions are asked one at a time. One tool message per call, in the original order."""
        checked = [decisions.check_tool_call(c, self._catalog) for c in calls]
        outcomes: dict[int, ToolOutcome] = {}
        safe, gated, asks = [], [], []
        for i, item in enumerate(checked):
            if isinstance(item, decisions.InvalidCall):
                outcomes[i] = ToolOutcome(status="error", observation=item.observation)
                self._desk.remember_call(item.call.id, "it was invalid and never ran")
            elif item.tool.asks is not None:
                asks.append(i)
            elif approvals.needs_approval(item.tool, self._input.approval):
                gated.append(i)
            else:
                safe.append(i)
                self._desk.remember_call(item.call.id, "it needed no approval")
        keys = {i: str(workflow.uuid4()) for i in safe + gated}

        ran = await asyncio.gather(*(self._execute(checked[i], checked[i].arguments, keys[i]) for i in safe))
        outcomes.update(zip(safe, ran))
        if gated:
            for i in gated:
                self._desk.hold(checked[i].call.id, checked[i].tool, checked[i].arguments)
            self._sync_status()
            ran = await asyncio.gather(*(self._decide_then_execute(checked[i], keys[i]) for i in gated))
            outcomes.update(zip(gated, ran))
        for i in asks:
            item = checked[i]
            answer = await self._ask(item.call.id, question_from_args(item.tool, item.arguments))
            outcomes[i] = ToolOutcome(observation=answer) if answer is not None else ToolOutcome(
                status="error", observation=self._no_answer())
        self._desk.close_round()
        for i, item in enumerate(checked):
            self._messages.append(
                ChatMessage(role="tool", tool_call_id=item.call.id, content=outcomes[i].observation)
            )

    async def _decide_then_execute(self, item: decisions.ReadyCall, key: str) -> ToolOutcome:
        call_id = item.call.id
        try:
            await workflow.wait_condition(
                lambda: self._desk.is_decided(call_id) or self._end_requested,
                timeout=timedelta(seconds=self._input.decision_timeout_s),
            )
        except asyncio.TimeoutError:
            pass
        if not self._desk.is_decided(call_id):
            reason = "the conversation was ended" if self._end_requested else "approval timed out"
            self._desk.decide_by_system(call_id, reason, workflow.now())
            self._sync_status()
        pending = self._desk.pending[call_id]
        if not pending.decision.approved:
            who = "" if pending.decision.approver == "system" else " by user"
            return ToolOutcome(status="error",
                               observation=f"rejected{who}: {pending.decision.reason}")
        return await self._execute(item, pending.args, key)

    async def _execute(self, item: decisions.ReadyCall, args: dict, key: str) -> ToolOutcome:
        """Run a tool; when it asks for input, ask the human and run it again with the answer."""
        answer: str | None = None
        for _ in range(MAX_INPUT_ROUNDS):
            outcome = await self._run_activity(item, args, key, answer)
            if outcome.status != "needs_input" or outcome.question is None:
                return outcome
            answer = await self._ask(item.call.id, outcome.question)
            if answer is None:
                return ToolOutcome(status="error", observation=self._no_answer())
        return ToolOutcome(
            status="error",
            observation=f"Error: {item.tool.name} still needed input after {MAX_INPUT_ROUNDS} answers",
        )

    async def _run_activity(
        self, item: decisions.ReadyCall, args: dict, key: str, answer: str | None
    ) -> ToolOutcome:
        tool = item.tool
        if tool.name not in self._tools_used:
            self._tools_used.append(tool.name)
        attempts = tool.max_attempts if tool.idempotent else 1
        invocation = ToolInvocation(call_id=item.call.id, arguments=args, idempotency_key=key,
                                    answer=answer)
        try:
            return await workflow.execute_activity(
                tool.name,
                invocation,
                result_type=ToolOutcome,
                start_to_close_timeout=timedelta(seconds=tool.timeout_s),
                heartbeat_timeout=TOOL_HEARTBEAT_TIMEOUT,
                retry_policy=RetryPolicy(
                    initial_interval=timedelta(seconds=1),
                    maximum_interval=timedelta(seconds=10),
                    maximum_attempts=attempts,
                ),
                summary=decisions.describe_call(tool.name, args),
            )
        except ActivityError as err:
            reason = failure_reason(err)
            workflow.logger.warning("tool %s failed: %s", tool.name, reason)
            return ToolOutcome(
                status="error",
                observation=decisions.tool_failure_observation(tool, reason, attempts),
            )

    async def _ask(self, call_id: str, question: Question) -> str | None:
        """Ask the human one question (others wait their turn); None if it went unanswered."""
        async with self._desk.question_lock:
            self._desk.ask(call_id, question)
            self._sync_status()
            try:
                await workflow.wait_condition(
                    lambda: self._desk.has_answer() or self._end_requested,
                    timeout=timedelta(seconds=self._input.decision_timeout_s),
                )
            except asyncio.TimeoutError:
                pass
            answer = self._desk.take_answer()
            self._sync_status()
            return answer

    def _no_answer(self) -> str:
        if self._end_requested:
            return "no answer: the conversation was ended"
        return "no answer: the question timed out"

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


def failure_reason(err: BaseException) -> str:
    """The innermost readable cause of an activity failure."""
    cause: BaseException | None = err
    while isinstance(cause, ActivityError) and cause.cause is not None:
        cause = cause.cause
    if isinstance(cause, TimeoutError):
        return f"timed out ({cause.type.name.lower().replace('_', '-') if cause.type else 'timeout'})"
    if isinstance(cause, ApplicationError):
        return cause.message
    return str(cause)
