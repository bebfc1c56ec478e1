"""One model step (the "think" of think-act-observe): what the model is shown, and asking it.

Before a step, when the prompt would pass the context budget, the oldest turns fold into the
running summary (the `summarize` activity, recorded like a step), or, if that fails, are dropped
with a note. Then the step's prompt is built (`rules.context`) and the model called;
what the endpoint counted calibrates the next estimate. Its reply is made usable and bounded
before the workflow acts on it.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TypeVar

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError

from ..contract import (
    LLM_STEP_ACTIVITY,
    SUMMARIZE_ACTIVITY,
    AuditRecord,
    ChatMessage,
    ContextUse,
    ConversationInput,
    EntryLimits,
    LLMReply,
    LLMStepRequest,
    PendingPrompt,
    SummaryReply,
    SummaryRequest,
    Usage,
)
from ..contract.bounds import (
    MAX_ERROR_BYTES,
    MAX_SEEN_CALL_IDS,
    MAX_SUMMARY_BYTES,
    Limits,
    clip,
    clip_bytes,
    keep_last,
)
from ..contract.owner import OUTPUT_RESERVE_TOKENS
from ..contract.state import ConversationState
from ..rules import context, delta, output, replies
from ..rules.compaction import estimate_tokens
from .failures import (
    MIN_WINDOW_TOKENS,
    failure_reason,
    fallback_reason,
    is_context_miss,
    is_context_too_long,
    model_failure,
    raise_if_cancelled,
    refusal_said,
)
from .reporting import Reporter
from .tool_round import FIRST_RETRY

SUMMARY_ATTEMPTS = 3
RESERVE_MARGIN = 1.25  # on a prompt's estimate, for what a call sets aside of an owner's share
T = TypeVar("T")


class ModelStep:
    def __init__(self, inp: ConversationInput, state: ConversationState, limits: Limits,
                 reporter: Reporter) -> None:
        self._input = inp
        self._state = state
        self._limits = limits
        self._reporter = reporter
        # The catalog as the model sees it, and its estimated tokens: fixed once the tools are
        # loaded, before the first step (and again once they are listed again).
        self._tools: list[dict] | None = None
        self._tools_tokens = 0
        self._tools_digest = ""
        # The delta context: the prompt last sent (None: send the next one whole), and the
        # call waiting on its reply, which the `pending_prompt` query answers.
        self._sent: delta.Sent | None = None
        self._pending: tuple[str, list[ChatMessage], list[dict]] | None = None
        self._squeeze = 1  # the budget is divided by it: 2 to fold harder for a small window
        self.sent_tokens = 0  # the estimated tokens of the prompt last sent (endpoint tokens)
        self._estimated = 0  # the same, as estimated before calibration

    def tools_changed(self) -> None:
        """The catalog was listed again: the next step offers it as it is now, sent whole."""
        self._tools, self._sent = None, None

    def tool_schemas(self) -> list[dict]:
        if self._tools is None:
            self._tools = [t.openai_schema() for t in self._state.catalog.values()]
            self._tools_tokens = context.tools_tokens(self._tools)
            self._tools_digest = delta.tools_digest(self._tools)
        return self._tools

    def pending(self, digest: str) -> PendingPrompt | None:
        """The prompt and tools of the model call waiting on its reply, if it has this digest."""
        if self._pending is None or self._pending[0] != digest:
            return None
        return PendingPrompt(messages=self._pending[1], tools=self._pending[2])

    def limits(self, entry: str | None = None) -> EntryLimits:
        """The model entry's own limits (`entry`: a fallback; None: the one the conversation's
        model names), where it sets them."""
        return self._state.models.limits_of(self._input.model, entry)

    def window(self) -> int | None:
        """The model's window in tokens, where known: as its entry or its server says, or as
        an endpoint's refusal of a longer prompt said."""
        known = [w for w in (self.limits().context_tokens, self._state.context.window_tokens)
                 if w]
        return min(known) if known else None

    def budget_tokens(self) -> int:
        """The budget prompts keep to: the conversation's, fitted to the model's window."""
        return context.fitted_budget(context.budget_tokens(self._input.context_budget_tokens),
                                     self.window(), self.limits().max_output_tokens)

    def budget(self) -> context.Budget:
        self.tool_schemas()
        return context.Budget(tokens=self.budget_tokens() // self._squeeze,
                              ratio=self._state.context.token_ratio, tools=self._tools_tokens)

    def call_reserve(self) -> tuple[int, int]:
        """The most a model call may take, as far as it can be told before it (what an owner's
        share sets aside for it: `workflows.owner_share`): its prompt as estimated, with a
        margin and within the budget prompts keep to, and its reply's reserve (the entry's
        output limit, or `OUTPUT_RESERVE_TOKENS`). In tokens: the whole, and the reply's."""
        budget, ctx = self.budget(), self._state.context
        prompt = min(int(estimate_tokens(context.shown(ctx)) * ctx.token_ratio * RESERVE_MARGIN),
                     self.budget_tokens()) + budget.tools
        output = self.limits().max_output_tokens or OUTPUT_RESERVE_TOKENS
        return prompt + output, output

    def context_use(self) -> ContextUse:
        ctx = self._state.context
        return ContextUse(
            budget_tokens=self.budget_tokens(), window_tokens=self.window(),
            prompt_tokens=ctx.prompt_tokens, folded_turns=ctx.folded_turns,
            dropped_turns=ctx.dropped_turns, summary_bytes=len((ctx.summary or "").encode()),
        )

    def message_refusal(self, text: str) -> str | None:
        """Why a message is too long for the model whatever is folded, or None. Only once its
        window is known; before, a refusal of the endpoint says (`leave_out_too_long`). On the
        count of the model's server where it counted this text, else on one that errs toward
        letting it through (`context.LENIENT_RATIO`): a message let through that cannot fit is
        left out at its turn, on the server's count."""
        window = self.window()
        if window is None:
            return None
        ctx = self._state.context
        tools = self._tools_tokens if self._tools is not None else \
            context.tools_tokens([t.openai_schema() for t in self._state.catalog.values()])
        budget = context.Budget(tokens=self.budget_tokens(), tools=tools,
                                ratio=context.LENIENT_RATIO)
        tokens = context.message_tokens(text, ctx, budget)
        if tokens is None:
            return None
        about = "" if context.counted_tokens(text, ctx) == tokens else "at least about "
        return (f"the message is {about}{tokens:,} tokens, more than the model can read "
                f"({budget.tokens:,} of its {window:,}-token window, with the system prompt "
                "and its reply): send a shorter one, or split it")

    def leave_out_too_long(self) -> str | None:
        """After the endpoint refused even a folded prompt: leave out each message that cannot
        fit alone (it would fail every later prompt too), and say what was left out; None if
        none was, and the prompt is too long for another reason."""
        ctx = self._state.context
        counted = {context.counted_tokens(m.content, ctx) for m in ctx.messages
                   if m.role == "user" and isinstance(m.content, str)}
        messages, tokens = context.left_out(ctx, self.budget())
        if not tokens:
            return None
        ctx.messages = messages
        window = self.window()
        about = "" if tokens in counted else "about "  # the server's count, else an estimate
        return (f"the message is {about}{tokens:,} tokens, more than the model can read "
                f"({self.budget_tokens():,} tokens"
                + (f" of its {window:,}-token window" if window else "")
                + "): it was left out, and the conversation goes on without it; send a shorter "
                  "one, or split it")

    def too_long(self, err: ActivityError) -> str:
        """Why a prompt was refused as too long even folded to half its budget, with the sizes
        (the prompt's as the endpoint counted it, where it said)."""
        window, said = self.window(), refusal_said(err).get("prompt_tokens")
        sent = (f"{said:,} tokens sent, as the model counts them" if type(said) is int
                else f"about {self.sent_tokens:,} tokens sent")
        return (f"the prompt is too long for the model even after folding the context to half "
                f"of its {self.budget_tokens():,}-token budget"
                + (f" (the model's window: {window:,} tokens)" if window else "")
                + f" ({sent}; the system prompt and the tools may be too long for it alone): "
                  f"{failure_reason(err)}")

    def _learn_window(self, err: ActivityError) -> None:
        """What a refusal of the prompt as too long says: the model's window (else that it is
        below the prompt refused), the prompt's true tokens, which calibrate the estimate, and
        its user messages' tokens where the model's server counted them."""
        said = refusal_said(err)
        window, prompt, counted = said.get("window"), said.get("prompt_tokens"), said.get("counted")
        ctx = self._state.context
        if not (type(window) is int and window >= MIN_WINDOW_TOKENS):  # (a bool is no window)
            window = self.sent_tokens if self.sent_tokens >= MIN_WINDOW_TOKENS else None
        if window is not None:
            ctx.window_tokens = min(ctx.window_tokens or window, window)
        if type(prompt) is int and prompt > 0:
            ctx.token_ratio = context.calibrated_ratio(self._estimated, prompt, ctx.token_ratio)
        if isinstance(counted, dict) and counted:
            ctx.counted = context.with_counts(ctx, counted)

    def observation_share(self, call_message: ChatMessage) -> int:
        """Bytes each observation of this round may keep."""
        return context.observation_share(self._state.context, self.budget(), call_message)

    async def think(self, step: int, offered_tools: bool) -> LLMReply:
        """Fold older turns if the prompt would pass the budget, then ask the model. Asked to
        answer (no tools offered), a reply of tool calls and no text, from a provider that ignores
        `tool_choice="none"`, is asked once more with no tool schemas at all."""
        await self._fold_older_turns(step)
        try:
            reply = await self._ask_model(step, offered_tools, send_tools=True)
        except ActivityError as err:
            if not is_context_too_long(err):
                raise
            # The model's window is smaller than the budget: fold to half of it, once, and ask
            # again (a second refusal ends the turn, with the sizes).
            workflow.logger.warning("step %d: the prompt (about %d tokens) is too long for the "
                                    "model; folding harder and asking again", step,
                                    self.sent_tokens)
            self._learn_window(err)
            if context.left_out(self._state.context, self.budget())[1]:
                raise  # a message no fold makes room for: asking again would fail again
            self._squeeze = 2
            try:
                await self._fold_older_turns(step)
                reply = await self._ask_model(step, offered_tools, send_tools=True)
            finally:
                self._squeeze = 1
        message = reply.message
        if not offered_tools and message.tool_calls and not (message.content or "").strip():
            workflow.logger.warning("step %d: tool calls in a forced answer; asking again without "
                                    "tools", step)
            reply = await self._ask_model(step, offered_tools, send_tools=False)
        return reply

    async def _ask_model(self, step: int, offered_tools: bool, send_tools: bool) -> LLMReply:
        self._reporter.emit("llm_started", step=step)
        ctx, budget = self._state.context, self.budget()
        messages, ctx.messages = context.prompt(ctx, budget)
        tools = self.tool_schemas() if send_tools else []
        tool_choice = "auto" if offered_tools else "none"
        estimated = estimate_tokens(messages) + (budget.tools if send_tools else 0)
        self._estimated, self.sent_tokens = estimated, int(estimated * ctx.token_ratio)
        reply = await self._step(messages, tools, tool_choice, step)
        if not reply.streamed and reply.message.content:  # it came whole: watchers get it now
            self._reporter.tokens(step, reply.message.content)
        ctx.token_ratio = context.calibrated_ratio(estimated, reply.usage.prompt_tokens,
                                                   ctx.token_ratio)
        ctx.prompt_tokens = reply.usage.prompt_tokens
        self._state.count_model_call(reply.usage)
        return reply

    async def _step(self, messages: list[ChatMessage], tools: list[dict], tool_choice: str,
                    step: int) -> LLMReply:
        """The model call as a delta of the previous one. A worker that cannot rebuild the prompt
        fetches it (`pending_prompt`); if even that fails (`ContextMiss`), it is sent whole once."""
        for whole in (self._sent is None, True):
            previous = None if whole else self._sent
            parts, self._sent = delta.diff(previous, messages)
            self._pending = (self._sent.digest, messages, tools)
            request = LLMStepRequest(
                model=self._input.model, parts=parts,
                base=previous.digest if previous is not None else None, digest=self._sent.digest,
                tools_digest=self._tools_digest if tools else None,
                tools=tools if previous is None and tools else None, tool_choice=tool_choice,
                turn=self._state.current.number, step=step,
                response_format=self._response_format())
            try:
                return await self._call(request, step)
            except ActivityError as err:
                if whole or not is_context_miss(err):
                    raise
                workflow.logger.warning("step %d: %s; sending the prompt whole", step,
                                        failure_reason(err))
            finally:
                self._pending = None
        raise AssertionError("unreachable: the whole prompt was sent")

    def _response_format(self) -> dict | None:
        """Structured output, for a conversation asked for a typed result."""
        schema = self._input.output_schema
        return output.response_format(schema) if schema is not None else None

    async def _call(self, request: LLMStepRequest, step: int) -> LLMReply:
        """The model call, on the entry the conversation's model names and, if that one fails
        in a way that concerns it (`fallback_reason`), on each of its fallbacks in turn."""
        turn, chain = self._state.current, self._state.models.chain(self._input.model)
        summary = f"llm turn {turn.number} step {step}"
        for n, entry in enumerate(chain):
            try:
                reply = await self._model_activity(
                    LLM_STEP_ACTIVITY, request.model_copy(update={"entry": entry}), LLMReply,
                    self._input.llm.max_attempts, summary + (f" on {entry}" if entry else ""),
                    entry)
            except ActivityError as err:
                raise_if_cancelled(err)  # a stop or an end: no failure of the model's
                # its tokens are not known: the turn says so, not "0 tokens" (counted apart,
                # so a refused request leaves a budget enforceable)
                self._state.count_model_call(Usage(), failed=True)
                why = fallback_reason(err)
                if n == len(chain) - 1 or why is None:
                    raise
                workflow.logger.warning("step %d: %s; falling back to model entry %s", step, why,
                                        chain[n + 1])
                self._reporter.emit("reset", step=step, text=f"{why}; falling back to "
                                                           f"{chain[n + 1]}")
                continue
            if n:
                turn.fallbacks += 1
            return reply
        raise AssertionError("unreachable: the last entry's failure is raised")

    async def _model_activity(self, activity: str, request: object, result_type: type[T],
                              attempts: int, summary: str, entry: str | None) -> T:
        """A model endpoint's activity, with the conversation's retries, and the deadline and
        heartbeat of its entry where it sets them, else the conversation's (on the task queue
        of its entry, when the entry's rate holds across workers)."""
        timeout_s, heartbeat_s = self.deadlines(entry)
        return await workflow.execute_activity(
            activity, request, result_type=result_type,
            task_queue=self._state.models.queue(self._input.model, entry),
            start_to_close_timeout=timedelta(seconds=timeout_s),
            heartbeat_timeout=timedelta(seconds=heartbeat_s),
            retry_policy=RetryPolicy(
                initial_interval=FIRST_RETRY, backoff_coefficient=2.0,
                maximum_interval=timedelta(seconds=self._input.llm.max_retry_interval_s),
                maximum_attempts=attempts,
            ),
            summary=summary,
        )

    def deadlines(self, entry: str | None = None) -> tuple[float, float]:
        """A model call's start-to-close and heartbeat timeouts, in seconds."""
        limits, llm = self.limits(entry), self._input.llm
        return limits.timeout_s or llm.timeout_s, limits.heartbeat_s or llm.heartbeat_timeout_s

    def failure(self, err: ActivityError) -> str:
        """Why a model call failed, as the turn's error: the endpoint's reason, how often it was
        tried, and what may help."""
        timeout_s, heartbeat_s = self.deadlines()
        return model_failure(err, self._input.llm.max_attempts, timeout_s, heartbeat_s)

    def usable(self, message: ChatMessage, step: int, offered: bool) -> replies.Intake:
        """The reply as the loop acts on it (`rules.replies`): its calls read from its text, its
        repeats answered, its ids its own, within bounds. Watchers drop what streamed as text
        of calls read from it."""
        state = self._state
        turn = replies.Turn(tools=state.catalog.keys(), seen_call_ids=state.seen_call_ids,
                            ran=state.current.ran, messages=state.context.messages,
                            number=state.current.number, step=step)
        taken = replies.intake(message, offered, turn, self._limits)
        if taken.from_text:
            self._reporter.emit("reset", step=step, text="the model wrote its tool calls as "
                                                         "text: they run as calls")
            if taken.message.content:
                self._reporter.emit("token", step=step, text=taken.message.content)
        if taken.message.tool_calls:
            state.seen_call_ids = keep_last(
                [*state.seen_call_ids, *(c.id for c in taken.message.tool_calls)],
                MAX_SEEN_CALL_IDS)
        return taken

    async def _fold_older_turns(self, step: int) -> None:
        ctx, budget = self._state.context, self.budget()
        turns = context.plan_fold(ctx, budget)
        if not turns:
            return
        cut = context.fold_cut(ctx, turns)
        first = ctx.folded_turns + 1
        last = first + max(1, sum(1 for m in ctx.messages[:cut] if m.role == "user")) - 1
        self._reporter.emit("summary_started", step=step, text=f"turns {first}-{last}")
        request = SummaryRequest(model=self._input.model, previous=ctx.summary,
                                 messages=ctx.messages[:cut], first_turn=first, last_turn=last,
                                 max_tokens=budget.summary_tokens)
        try:
            reply = await self._model_activity(SUMMARIZE_ACTIVITY, request, SummaryReply,
                                               SUMMARY_ATTEMPTS, f"summarize turns {first}-{last}",
                                               None)
        except ActivityError as err:
            raise_if_cancelled(err)
            reply, problem = SummaryReply(text=""), f"summarizing failed: {failure_reason(err)}"
        else:
            self._state.count_model_call(reply.usage)
            problem = None if reply.text.strip() else "the summary came back empty"
        if problem is None:
            summary = clip_bytes(reply.text.strip(), MAX_SUMMARY_BYTES, "summary")
            self._state.context = context.folded(ctx, cut, summary)
            note = f"turns {first}-{last} folded into the summary ({len(summary.encode())} bytes)"
        else:
            problem = clip(problem, MAX_ERROR_BYTES) or ""
            self._state.context = context.folded(ctx, cut, None, problem)
            note = summary = f"turns {first}-{last} dropped without a summary: {problem}"
        workflow.logger.info("context: %s", note)
        self._reporter.emit("summary_finished", step=step, text=note,
                            status="ok" if problem is None else "dropped")
        self._reporter.record(AuditRecord(
            at=workflow.now(), turn=self._state.current.number, step=step, kind="summary",
            thought=summary, tokens=reply.usage,
        ))
