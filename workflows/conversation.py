"""The conversation workflow: one durable ReAct loop per conversation.

Read it as the story of a conversation: load the tools, wait for a message, think (LLM activity),
act (tool activities), observe (tool messages), and again until the model answers. Every decision
that is not orchestration lives in `workflows.decisions`, as a pure function.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy, SearchAttributeKey
from temporalio.exceptions import ActivityError, ApplicationError, TimeoutError

with workflow.unsafe.imports_passed_through():
    from workflows import decisions
    from workflows.models import (
        ChatMessage,
        ConversationInput,
        ConversationStatus,
        EndRequest,
        LLMReply,
        LLMRequest,
        SayRequest,
        SignalOutcome,
        Status,
        StopReason,
        ToolDefinition,
        ToolInvocation,
        ToolOutcome,
        Usage,
    )
    from workflows.prompts import DEFAULT_SYSTEM_PROMPT

AGENT_STATUS = SearchAttributeKey.for_keyword("AgentStatus")
LLM_ACTIVITY = "llm_call"
LIST_TOOLS_ACTIVITY = "list_tools"
MAX_REMEMBERED_SIGNALS = 200
TOOL_HEARTBEAT_TIMEOUT = timedelta(seconds=10)


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
        self._status: Status = "running"
        self._turn = 0
        self._steps = 0
        self._llm_calls = 0
        self._tools_used: list[str] = []
        self._stop_reason: StopReason | None = None
        self._final_answer: str | None = None
        self._error: str | None = None
        self._usage = Usage()
        self._end_requested = False
        self._outcomes: OrderedDict[str, SignalOutcome] = OrderedDict()

    @workflow.run
    async def run(self, inp: ConversationInput) -> ConversationStatus:
        self._publish_status()
        await self._load_tools()
        while True:
            if not self._inbox and not self._end_requested:
                self._set_status("idle")
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
                if inp.one_shot:
                    break
                continue
            self._stop_reason = "ended"
            break
        await workflow.wait_condition(workflow.all_handlers_finished)
        self._set_status("completed")
        return self.status()

    # ----- signals and queries -----

    @workflow.signal
    def say(self, request: SayRequest) -> None:
        if self._input.one_shot:
            self._remember(request.request_id, False, "a one-shot conversation takes no more messages")
        elif self._end_requested or self._status == "completed":
            self._remember(request.request_id, False, "the conversation is ending")
        elif not request.text.strip():
            self._remember(request.request_id, False, "the message is empty")
        else:
            self._inbox.append(request.text)
            self._remember(request.request_id, True, turn=self._turn + len(self._inbox))

    @workflow.signal
    def end(self, request: EndRequest) -> None:
        self._end_requested = True
        self._remember(request.request_id, True)

    @workflow.query
    def status(self) -> ConversationStatus:
        return ConversationStatus(
            workflow_id=workflow.info().workflow_id,
            status=self._status,
            turn=self._turn,
            steps=self._steps,
            llm_calls=self._llm_calls,
            tools_used=list(self._tools_used),
            stop_reason=self._stop_reason,
            final_answer=self._final_answer,
            usage=self._usage,
            error=self._error,
            queued_messages=len(self._inbox),
        )

    @workflow.query
    def signal_outcome(self, request_id: str) -> SignalOutcome | None:
        return self._outcomes.get(request_id)

    @workflow.query
    def messages(self) -> list[ChatMessage]:
        return list(self._messages)

    # ----- the loop -----

    async def _load_tools(self) -> None:
        try:
            tools = await workflow.execute_activity(
                LIST_TOOLS_ACTIVITY,
                result_type=list[ToolDefinition],
                start_to_close_timeout=timedelta(seconds=30),
                retry_policy=RetryPolicy(maximum_attempts=5, maximum_interval=timedelta(seconds=10)),
                summary="list tools",
            )
        except ActivityError as err:
            self._error = f"tools unavailable: {failure_reason(err)}"
            workflow.logger.warning("tool discovery failed: %s", self._error)
            return
        self._catalog = {t.name: t for t in tools}

    async def _run_turn(self, text: str) -> None:
        self._turn += 1
        self._steps = 0
        self._tools_used = []
        self._stop_reason = None
        self._final_answer = None
        self._error = None
        self._messages.append(ChatMessage(role="user", content=text))
        self._set_status("running")
        max_steps = self._input.max_steps
        while True:
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

    async def _run_tools(self, calls: list) -> None:
        """Run a turn's tool calls concurrently and append one tool message per call, in order."""
        checked = [decisions.check_tool_call(c, self._catalog) for c in calls]
        outcomes = await asyncio.gather(*(self._run_tool(c) for c in checked))
        for item, outcome in zip(checked, outcomes):
            self._messages.append(
                ChatMessage(role="tool", tool_call_id=item.call.id, content=outcome.observation)
            )

    async def _run_tool(self, item: decisions.ReadyCall | decisions.InvalidCall) -> ToolOutcome:
        if isinstance(item, decisions.InvalidCall):
            return ToolOutcome(status="error", observation=item.observation)
        tool = item.tool
        if decisions.needs_approval(tool):
            return ToolOutcome(status="error", observation=decisions.approval_unavailable(tool))
        if tool.name not in self._tools_used:
            self._tools_used.append(tool.name)
        invocation = ToolInvocation(
            call_id=item.call.id,
            arguments=item.arguments,
            idempotency_key=str(workflow.uuid4()),
        )
        attempts = tool.max_attempts if tool.idempotent else 1
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
                summary=decisions.describe_call(tool.name, item.arguments),
            )
        except ActivityError as err:
            reason = failure_reason(err)
            workflow.logger.warning("tool %s failed: %s", tool.name, reason)
            return ToolOutcome(
                status="error",
                observation=decisions.tool_failure_observation(tool, reason, attempts),
            )

    # ----- bookkeeping -----

    def _set_status(self, status: Status) -> None:
        if status != self._status:
            self._status = status
            self._publish_status()

    def _publish_status(self) -> None:
        workflow.upsert_search_attributes([AGENT_STATUS.value_set(self._status)])
        workflow.set_current_details(self._details_markdown())

    def _details_markdown(self) -> str:
        wid = workflow.info().workflow_id
        lines = [f"**Status:** {self._status} (turn {self._turn}, step {self._steps})"]
        if self._stop_reason:
            lines.append(f"**Stop reason:** {self._stop_reason}")
        if self._error:
            lines.append(f"**Error:** {self._error}")
        if self._status == "idle":
            lines.append(f"Reply with `python -m client say {wid} \"...\"`, "
                         f"or finish with `python -m client end {wid}`.")
        return "\n\n".join(lines)

    def _remember(
        self, request_id: str | None, accepted: bool, reason: str | None = None,
        turn: int | None = None,
    ) -> None:
        if not accepted:
            workflow.logger.info("signal refused: %s", reason)
        if request_id is None:
            return
        self._outcomes[request_id] = SignalOutcome(
            request_id=request_id, accepted=accepted, reason=reason, turn=turn
        )
        while len(self._outcomes) > MAX_REMEMBERED_SIGNALS:
            self._outcomes.popitem(last=False)


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
