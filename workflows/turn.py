"""A turn of a conversation: think and act until it answers (or stops), then say so in the stream,
the audit trail, the trace and the turn's summary. `ConversationWorkflow` hands `Turns` the state
and the parts it uses, and runs one turn at a time; the workflow class reads as the story: a
conversation's life, its handlers and its queries."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError

from ..contract import (
    AuditAction,
    AuditRecord,
    ChatMessage,
    ConversationInput,
    StopReason,
    StopRequest,
    TurnSummary,
    Usage,
)
from ..contract.bounds import (
    MAX_ERROR_BYTES,
    MAX_MODEL_NAME_BYTES,
    MAX_REPLY_TEXT_BYTES,
    MAX_TOOLS_LISTED,
    MAX_TURN_SUMMARIES,
    clip,
    keep_last,
)
from ..contract.memory import (
    MAX_RECALL_QUERY_BYTES,
    MAX_RECALLED,
    MAX_RECALLED_BYTES,
    RECALL_ACTIVITY,
    Recalled,
    RecallRequest,
)
from ..contract.state import ConversationState, TurnState
from ..rules import context, loop, output, tracing
from ..rules.memory import recall_messages, within_bytes
from ..rules.stopping import (
    STOPPED,
    interrupted_reply,
    is_looping,
    over_budget,
    stopped_call,
)
from . import telemetry
from .decisions import Decisions
from .failures import (
    ACTIVITY_FAILURES,
    failure_reason,
    is_context_too_long,
    raise_if_cancelled,
)
from .inbox import Inbox
from .model_step import ModelStep
from .owner_share import OwnerShare
from .reporting import Reporter
from .status_view import StatusView
from .tool_round import ToolRound

ERROR_STOPS = frozenset({"llm_error", "budget_exceeded", "invalid_output"})  # a turn's span errs


class Turns:
    """A conversation's turns, one at a time: each is a task that `end` and `stop` cancel."""

    def __init__(self, inp: ConversationInput, state: ConversationState, decisions: Decisions,
                 reporter: Reporter, model_step: ModelStep, view: StatusView, *,
                 history_full: Callable[[], bool], hand_over: Callable[[], Awaitable[None]],
                 inbox: Inbox) -> None:
        self._input = inp
        self._state = state
        self._decisions = decisions
        self._reporter = reporter
        self._model_step = model_step
        self._view = view
        self._history_full = history_full  # mid-turn: the history is too large for this run
        self._hand_over = hand_over  # ...then the turn goes on in a fresh run (continue-as-new)
        self._inbox = inbox  # what is steered into the turn comes from it
        self._output_problem = output.output_schema_problem(inp.output_schema)  # judged once
        self._trace_ids = workflow.new_random("agent-trace")  # span ids: `workflows.telemetry`
        self._text: str | None = None  # the current turn's message (for traced content)
        self.this_run = 0  # turns begun in this run
        self.task: asyncio.Future[None] | None = None
        self.ending = False  # `end` cancelled the turn's task (not the workflow's cancellation)
        self.stopping = False  # `stop` did: the turn ends, the conversation goes on
        self._thinking: int | None = None  # the step whose model call is in flight
        self._round: ToolRound | None = None  # the tool round in flight
        self.share = OwnerShare(inp, state, reporter, view.sync)  # of the owner's limits

    def end(self) -> None:
        """`end`: cancel the running turn, with the model call or tools in flight and the waits
        for a person."""
        if self.task is not None and not self.task.done():
            self.ending = True
            self.task.cancel()

    def stop(self, request: StopRequest) -> str:
        """`stop`: cancel the running turn as `end` does, but the conversation goes on and takes
        the next message. What it did (a stop with no turn to stop does nothing, and says so)."""
        turn = self._state.current
        if not turn.in_progress or self.ending:
            return "no turn was running: nothing to stop"
        if self.stopping:
            return f"turn {turn.number} is stopping already"
        self._reporter.record_input("stop", turn.number, request.sender, None)
        self.stopping = True
        if self.task is not None:  # (else it has not begun: `run` cancels it as it does)
            self.task.cancel()
        return f"turn {turn.number} stopped"

    async def run(self, text: str | None) -> None:
        """Run a turn to its end; `text` is None when resuming one carried over continue-as-new.
        The turn runs as a task that `end` cancels, with whatever it has in flight."""
        if text is not None:
            self._begin_turn(text)
            await self._recall(text)
        self.task = asyncio.ensure_future(self._think_and_act())
        if self.stopping:  # stopped while it recalled its memories
            self.task.cancel()
        try:
            await self.task
        except asyncio.CancelledError:
            if not (self.ending or self.stopping):  # the workflow itself is being cancelled
                raise
            self._interrupted()
        finally:
            self.task, self.stopping, self._thinking, self._round = None, False, None, None
        await self.share.give_back()
        turn = self._state.current
        turn.in_progress = False
        self._inbox.unsteered()  # what its model never got is the next turn's
        self.trace()
        if self._input.profile is None:  # a subagent's turns are its parent's business
            failed = turn.stop_reason in ERROR_STOPS
            self._reporter.notifier.notify(
                "conversation_failed" if failed else "turn_finished", turn.number,
                answer=turn.final_answer, stop_reason=turn.stop_reason,
                error=turn.error if failed else None)
        self._reporter.emit("turn_finished", stop_reason=turn.stop_reason, text=turn.final_answer,
                            tokens=turn.usage.total_tokens, cost_usd=turn.usage.cost_usd,
                            error=turn.error)
        self._state.turns = keep_last([*self._state.turns, TurnSummary(
            turn=turn.number, steps_taken=turn.steps, llm_calls=turn.llm_calls,
            tools_used=turn.tools_used[:MAX_TOOLS_LISTED], stop_reason=turn.stop_reason,
            usage=turn.usage, error=turn.error, fallbacks=turn.fallbacks,
        )], MAX_TURN_SUMMARIES)
        workflow.logger.info("turn %d finished: %s after %d step(s)", turn.number,
                             turn.stop_reason, turn.steps)

    def trace(self) -> None:
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
            content={"gen_ai.input.messages": self._text,
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
        """What `end` or `stop` leaves of a turn it interrupted: pending calls rejected by the
        system, every call in the context answered (a write that was running said to have maybe
        run, with its key), so the context stays valid; a stop keeps the text a cut reply had
        streamed, marked as interrupted, for the person and the next turn's model."""
        why, turn = "the conversation was ended" if self.ending else STOPPED, self._state.current
        self._decisions.approvals.abandon_round(why, workflow.now())
        self._decisions.question.withdraw()  # nobody can answer it now
        ctx, running = self._state.context, self._round.running if self._round else {}
        ctx.messages = context.answer_open_calls(ctx.messages, f"interrupted: {why}", {
            call_id: stopped_call(tool, key, why) for call_id, (tool, key) in running.items()})
        said = clip(self._reporter.said(turn.number, self._thinking), MAX_REPLY_TEXT_BYTES) \
            if self._thinking is not None and not self.ending else None
        if said:
            ctx.messages.append(ChatMessage(role="assistant", content=interrupted_reply(said)))
            turn.final_answer = said
        turn.stop_reason = "ended" if self.ending else "stopped"
        workflow.logger.info("turn %d interrupted: %s", turn.number, why)

    def _begin_turn(self, text: str) -> None:
        self.this_run += 1
        number = self._state.current.number + 1
        trace = tracing.new_span(self._trace_ids, self._turn_parent(number))
        self._state.current = TurnState(number=number, in_progress=True, trace=trace,
                                        started_at=workflow.now())
        self._text = text
        self._state.context.messages.append(ChatMessage(role="user", content=text))
        self._reporter.emit("turn_started", text=text)
        self._view.set_phase("running")

    async def _recall(self, text: str) -> None:
        """The owner's memories most relevant to the turn's first message, put in the context
        as the result of a `recall` call made before the turn's first step, and in the audit
        trail. Nothing found, nothing added; a recall that fails is a notice, and the turn
        goes on without memories. A subagent's turns recall nothing (its parent's did)."""
        state, owner, turn = self._state, self._input.owner, self._state.current
        if not state.memory or not owner or self._input.profile is not None:
            return
        query = clip(text, MAX_RECALL_QUERY_BYTES) or ""
        try:
            recalled = await workflow.execute_local_activity(
                RECALL_ACTIVITY, RecallRequest(owner=owner, query=query), result_type=Recalled,
                start_to_close_timeout=timedelta(seconds=10),
                retry_policy=RetryPolicy(maximum_attempts=3, maximum_interval=timedelta(seconds=2)),
                summary="recall memories")
        except ACTIVITY_FAILURES as err:
            raise_if_cancelled(err)
            state.notice(f"memories not recalled for turn {turn.number}: {failure_reason(err)}")
            workflow.logger.warning("recall failed: %s", state.notices[-1])
            return
        # the worker bounds them; bounded again here, as any outside data is
        memories = within_bytes(recalled.memories[:MAX_RECALLED], MAX_RECALLED_BYTES)
        if not memories:
            return
        state.context.messages.extend(recall_messages(turn.number, query, memories))
        self._reporter.record(AuditRecord(
            at=workflow.now(), turn=turn.number, step=0, thought=None, tokens=Usage(),
            kind="recall", by="memory", text=", ".join(m.id for m in memories)))
        workflow.logger.info("turn %d recalled %d memories", turn.number, len(memories))

    async def _think_and_act(self) -> None:
        state, turn = self._state, self._state.current
        while True:
            if state.end_requested:
                turn.stop_reason = "ended"
                return
            if spent := self._over_budget():
                self._stop("budget_exceeded", spent)
                return
            if self._history_full():
                await self._hand_over()
            step = turn.steps + 1
            await self.share.before_call(self._model_step.call_reserve)
            self._steer(step)
            offered = loop.tools_offered(step, self._input.max_steps) and not turn.forced_reason
            self._thinking = step  # (a stop keeps what it streamed)
            try:
                with self._decisions.awaiting_results():
                    reply = await self._model_step.think(step, offered)
            except ActivityError as err:
                raise_if_cancelled(err)
                self._stop("llm_error", self._model_failure(err))
                self._record_step(step, None, Usage())
                return
            self._thinking = None
            turn.steps = step
            taken = self._model_step.usable(reply.message, step, offered)
            message, unread = taken.message, taken.unread
            move = loop.next_move(message, offered, turn.forced_reason)
            if isinstance(move, loop.RunTools) and self._over_budget():
                move = loop.FinalAnswer(message.content or "", "budget_exceeded")
            if isinstance(move, loop.FinalAnswer) and (unread or taken.announced) and \
                    move.stop_reason == "answered" and turn.reminders < loop.MAX_CALL_REMINDERS:
                # a call written in a shape that could not be read, or announced in words
                self._remind(message, unread or taken.announced, in_prose=not unread)
                self._record_step(step, message.content, reply.usage, entry=reply.entry)
                continue
            if isinstance(move, loop.FinalAnswer):
                self._finish(message, move, reply.finish_reason)
                if unread:  # the more telling error, of a reply cut off at its limit too
                    turn.error = loop.unread_calls_error(unread, reply.finish_reason == "length")
                again = self._check_output()
                self._record_step(step, message.content, reply.usage, entry=reply.entry)
                if again:
                    continue
                return
            state.context.messages.append(message)
            share = self._model_step.observation_share(message)
            self._round = ToolRound(self._input, state, self._decisions, self._reporter,
                                    self._view.sync)
            done = await self._round.run(move.calls, reply.finish_reason == "length", share,
                                         taken.refused)
            self._round = None
            turn.call_records = keep_last([*turn.call_records, *done.records], 2)
            self._record_step(step, message.content, reply.usage, done.actions, reply.entry)
            if is_looping(turn.call_records):
                workflow.logger.warning("loop detected in turn %d", turn.number)
                turn.forced_reason = "loop_detected"

    def _steer(self, step: int) -> None:
        """The messages steered into the turn since its last step, for this step's model call:
        after the tool round that was in flight, each a user message, each said on the stream."""
        for text in self._inbox.steered():
            self._state.context.messages.append(ChatMessage(role="user", content=text))
            self._reporter.emit("steered", step=step, text=text)
            workflow.logger.info("turn %d: a message steered into step %d",
                                 self._state.current.number, step)

    def _remind(self, message: ChatMessage, unread: list[str], in_prose: bool = False) -> None:
        """Tell the model, once a turn, that a call it wrote in its text (`in_prose`: announced
        in words) did not run and how to write one that does; its reply stays in the context,
        as it wrote it."""
        self._state.current.reminders += 1
        workflow.logger.info("turn %d: a call of %s written but not read; reminding the model",
                             self._state.current.number, ", ".join(unread))
        self._state.context.messages += [
            message, ChatMessage(role="user", content=loop.call_reminder(unread, in_prose))]

    def _model_failure(self, err: ActivityError) -> str:
        """Why the model call failed, as the turn's error; for a prompt too long even after
        folding harder, what was left out for the conversation to go on, or the sizes."""
        if not is_context_too_long(err):
            return self._model_step.failure(err)
        return self._model_step.leave_out_too_long() or self._model_step.too_long(err)

    def _record_step(self, step: int, thought: str | None, tokens: Usage,
                     actions: list[AuditAction] | None = None, entry: str | None = None) -> None:
        """The audit record of a step, once its observations are in (or the turn has ended);
        `entry`: the model entry that answered."""
        turn = self._state.current
        self._reporter.record(AuditRecord(
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
        problem = self._output_problem
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
                           self._input.max_cost_usd)

    def _stop(self, reason: StopReason, error: str) -> None:
        turn = self._state.current
        turn.stop_reason = reason
        turn.error = clip(error, MAX_ERROR_BYTES)
        workflow.logger.warning("turn %d stopped (%s): %s", turn.number, reason, error)
