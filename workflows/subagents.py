"""Subagents: a call of `agent__<profile>` runs a one-shot child conversation.

The child runs with its profile's prompt, tools and limits, and with its share of what is left of
this conversation's budgets: the subagents of one round split what is left between them, and
each reserves its share as it starts, so that together they cannot spend more than the parent
may. Its steps stay in its own history; its answer is the observation.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass

from temporalio import workflow
from temporalio.exceptions import (
    CancelledError,
    ChildWorkflowError,
    WorkflowAlreadyStartedError,
)
from temporalio.workflow import ParentClosePolicy

from ..contract import (
    AgentSpec,
    ChildReport,
    ConversationInput,
    ConversationStatus,
    ToolOutcome,
)
from ..contract.bounds import MAX_CHILDREN, clip, keep_last
from ..contract.state import ConversationState
from ..rules import loop, tracing
from ..rules.search_attributes import owned_by
from ..rules.stopping import child_share, dollars
from . import telemetry
from .failures import failure_reason
from .reporting import Reporter

CONVERSATION_WORKFLOW = "ConversationWorkflow"  # a subagent is a conversation too


@dataclass(frozen=True)
class Share:
    """A subagent's share of its parent's budgets: tokens and dollars (None: no such budget)."""

    tokens: int | None
    usd: float | None

    def used_up(self) -> bool:
        return self.tokens == 0 or self.usd == 0

    def plus(self, other: Share) -> Share:
        return Share((self.tokens or 0) + (other.tokens or 0),
                     round((self.usd or 0.0) + (other.usd or 0.0), 10))

    def minus(self, other: Share) -> Share:
        return Share((self.tokens or 0) - (other.tokens or 0),
                     round((self.usd or 0.0) - (other.usd or 0.0), 10))


class Subagents:
    """The subagents of one round of tool calls."""

    def __init__(self, inp: ConversationInput, state: ConversationState, reporter: Reporter,
                 sync_status: Callable[[], None], starting: int) -> None:
        self._input = inp
        self._state = state
        self._reporter = reporter
        self._sync_status = sync_status
        self._reserved = Share(0, 0.0)  # the shares of the subagents running now
        self._agents_to_start = starting

    async def run(self, item: loop.ReadyCall, spec: AgentSpec, args: dict) -> ToolOutcome:
        """Run a subagent: a one-shot child conversation with its profile's prompt, tools and
        limits. Its steps stay in its own history; its answer is the observation, and its
        usage is added to this conversation's."""
        inp, turn = self._input, self._state.current
        share = self._next_share()
        depth = inp.depth + 1
        if depth > inp.max_depth:
            return ToolOutcome(status="error", observation=(
                f"Error: not delegated: {item.tool.name} would run at depth {depth}, past the "
                f"limit of {inp.max_depth}. Do the task yourself, or answer without it."))
        if share.used_up():
            return ToolOutcome(status="error", observation=(
                f"Error: not delegated: the conversation's budget is used up "
                f"({self._budget_note()}). Answer with what you have."))
        child_id = f"{workflow.info().workflow_id}/{item.call.id}"
        turn.children = keep_last([*turn.children,
                                   ChildReport(workflow_id=child_id, profile=spec.profile,
                                               status="running")], MAX_CHILDREN)
        self._reporter.emit("child_started", call_id=item.call.id, tool=spec.profile,
                            text=child_id)
        task = str(args.get("task", ""))
        # the child's turn nests under this call's span, in the parent turn's trace
        span = tracing.child_span(turn.trace, f"agent/{item.call.id}")
        child = ConversationInput(
            prompt=task, one_shot=True, profile=spec.profile, model=spec.model or inp.model,
            max_steps=spec.max_steps,
            max_total_tokens=_tighter(spec.max_total_tokens, share.tokens),
            max_cost_usd=_tighter(spec.max_cost_usd, share.usd),
            depth=depth, max_depth=inp.max_depth, approval=inp.approval, llm=inp.llm,
            decision_timeout_s=inp.decision_timeout_s,
            max_observation_bytes=inp.max_observation_bytes, output_schema=spec.output_schema,
            owner=inp.owner,  # a subagent belongs to its parent's owner
            trace_parent=span,
        )
        self._reserved = self._reserved.plus(share)
        started = workflow.now()

        def traced(failed: str | None) -> None:
            """The call's span. Never from a `finally`: that runs on a cache eviction too, out
            of the workflow's event loop, where no workflow API may be called."""
            telemetry.emit(f"execute_tool {item.tool.name}", span, turn.trace, started,
                           workflow.now(),
                           {"gen_ai.operation.name": "execute_tool",
                            "gen_ai.tool.name": item.tool.name,
                            "gen_ai.tool.call.id": item.call.id, "gen_ai.agent.name": spec.profile,
                            "gen_ai.conversation.id": workflow.info().workflow_id,
                            "agent.child.id": child_id}, error=failed)

        try:
            try:
                result = await workflow.execute_child_workflow(
                    CONVERSATION_WORKFLOW, child, id=child_id, result_type=ConversationStatus,
                    parent_close_policy=ParentClosePolicy.REQUEST_CANCEL,
                    static_summary=clip(f"agent {spec.profile}: {task}", 200),
                    search_attributes=owned_by(inp.owner),
                )
            finally:
                self._reserved = self._reserved.minus(share)
        except ChildWorkflowError as err:
            traced("the subagent did not finish")
            if isinstance(err.cause, CancelledError):
                raise asyncio.CancelledError() from err
            self._child_done(child_id, "failed")
            return ToolOutcome(status="error", observation=(
                f"Error: the {spec.profile} agent failed: {failure_reason(err.cause or err)}"))
        except WorkflowAlreadyStartedError:
            traced("the subagent did not finish")
            # Someone else holds the id (started it by hand, say): not this conversation's child.
            self._child_done(child_id, "failed")
            return ToolOutcome(status="error", observation=(
                f"Error: the {spec.profile} agent could not start: a conversation with the id "
                f"{child_id} already exists"))
        except asyncio.CancelledError:  # `end`, or the workflow's cancellation
            traced("the subagent did not finish")
            raise
        traced(None if result.stop_reason == "answered" else f"stopped: {result.stop_reason}")
        self._child_done(child_id, result.status)
        self._state.usage = self._state.usage + result.usage
        turn.usage = turn.usage + result.usage
        if result.final_output is not None:  # its typed result, as JSON
            return ToolOutcome(observation=json.dumps(result.final_output, ensure_ascii=False))
        if result.stop_reason == "answered" and result.final_answer:
            return ToolOutcome(observation=result.final_answer)
        partial = f" Its last words: {result.final_answer}" if result.final_answer else ""
        return ToolOutcome(status="error", observation=(
            f"Error: the {spec.profile} agent stopped ({result.stop_reason}): "
            f"{result.error or 'it gave no answer'}.{partial}"))

    def _next_share(self) -> Share:
        """The next subagent's share of the conversation's budgets, reserved as it starts."""
        inp, used, starting = self._input, self._state.usage, self._agents_to_start
        self._agents_to_start = max(starting - 1, 0)
        tokens = child_share(inp.max_total_tokens, used.total_tokens, self._reserved.tokens or 0,
                             starting)
        usd = child_share(inp.max_cost_usd, used.known_cost, self._reserved.usd or 0.0, starting)
        return Share(None if tokens is None else int(tokens),
                     None if usd is None else round(usd, 10))

    def _budget_note(self) -> str:
        inp, used, reserved = self._input, self._state.usage, self._reserved
        if inp.max_total_tokens is not None and used.total_tokens + (reserved.tokens or 0) \
                >= inp.max_total_tokens:
            return (f"{used.total_tokens} of {inp.max_total_tokens} tokens used, "
                    f"{reserved.tokens} reserved by running subagents")
        return (f"{dollars(used.known_cost)} of {dollars(inp.max_cost_usd)} used, "
                f"{dollars(reserved.usd)} reserved by running subagents")

    def _child_done(self, child_id: str, status: str) -> None:
        for child in self._state.current.children:
            if child.workflow_id == child_id:
                child.status, child.pending_confirmations, child.pending_question = status, [], None
        self._sync_status()


def _tighter(a: float | None, b: float | None) -> float | None:
    return b if a is None else a if b is None else min(a, b)
