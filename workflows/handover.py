"""Continue-as-new: handing a long conversation to a fresh run. Part of `ConversationWorkflow`.

A run hands over only where nothing is pending (idle, or between two steps of a turn), after every
signal handler has finished, carrying the compacted messages, counters, decisions, signal outcomes,
the audit tail and the live stream's state.
"""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from workflows.compaction import compact
    from workflows.desk import HumanDesk
    from workflows.models import (
        CarriedState,
        ChatMessage,
        ConversationInput,
        StopReason,
        ToolDefinition,
        TurnSummary,
        Usage,
    )
    from workflows.narrator import Narrator
    from workflows.stopping import CallRecord


class Handover:
    """The continue-as-new half of the conversation workflow (a mixin: the state lives there)."""

    _input: ConversationInput
    _desk: HumanDesk
    _narrator: Narrator
    _messages: list[ChatMessage]
    _inbox: list[str]
    _catalog: dict[str, ToolDefinition]
    _setup_errors: list[str]
    _turn: int
    _turns_this_run: int
    _steps: int
    _llm_calls: int
    _turn_llm_calls: int
    _tools_used: list[str]
    _stop_reason: StopReason | None
    _final_answer: str | None
    _error: str | None
    _usage: Usage
    _turn_usage: Usage
    _turns: list[TurnSummary]
    _in_turn: bool
    _forced_reason: StopReason | None
    _call_records: list[CallRecord]
    _seen_call_ids: list[str]
    _end_requested: bool
    _runs: int

    def _should_continue_as_new(self, at_turn_boundary: bool) -> bool:
        if workflow.info().is_continue_as_new_suggested():
            return True
        return at_turn_boundary and self._turns_this_run >= self._input.continue_as_new_after_turns

    async def _continue_as_new(self) -> None:
        """Hand the conversation to a fresh run (bounded history), after every signal is handled."""
        self._narrator.close()
        await workflow.wait_condition(workflow.all_handlers_finished)
        stream_state = self._narrator.carry()
        workflow.logger.info(
            "continuing as new after %d events", workflow.info().get_current_history_length()
        )
        carry = self._carry().model_copy(update=stream_state)
        workflow.continue_as_new(self._input.model_copy(update={"carry": carry}))

    def _carry(self) -> CarriedState:
        return CarriedState(
            messages=compact(self._messages, self._input.context_budget_tokens),
            inbox=self._inbox, catalog=list(self._catalog.values()),
            setup_errors=self._setup_errors, turn=self._turn, steps=self._steps,
            llm_calls=self._llm_calls, turn_llm_calls=self._turn_llm_calls,
            tools_used=self._tools_used, stop_reason=self._stop_reason,
            final_answer=self._final_answer, error=self._error, usage=self._usage,
            turn_usage=self._turn_usage, turns=self._turns, in_turn=self._in_turn,
            forced_reason=self._forced_reason,
            call_records=[(r.tool, r.args_key, r.result_key) for r in self._call_records],
            seen_call_ids=self._seen_call_ids, end_requested=self._end_requested,
            runs=self._runs + 1, **self._desk.snapshot(),
        )

    def _restore(self, c: CarriedState) -> None:
        self._messages = list(c.messages)
        self._inbox = list(c.inbox)
        self._catalog = {t.name: t for t in c.catalog}
        self._setup_errors = list(c.setup_errors)
        self._turn, self._steps, self._llm_calls = c.turn, c.steps, c.llm_calls
        self._turn_llm_calls = c.turn_llm_calls
        self._tools_used = list(c.tools_used)
        self._stop_reason, self._final_answer, self._error = c.stop_reason, c.final_answer, c.error
        self._usage, self._turn_usage = c.usage, c.turn_usage
        self._turns = list(c.turns)
        self._in_turn, self._forced_reason = c.in_turn, c.forced_reason
        self._call_records = [CallRecord(*r) for r in c.call_records]
        self._seen_call_ids = list(c.seen_call_ids)
        self._end_requested = c.end_requested
        self._runs = c.runs
        self._desk.restore(c.outcomes, c.past_calls, c.decisions)

