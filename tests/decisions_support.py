"""A conversation's `Decisions` outside a workflow, for the tests of its rules: its own calls
and question are all it shows (no subagents), and nothing is announced."""

from __future__ import annotations

import logging

from durable_react_agent.contract.bounds import Limits
from durable_react_agent.contract.state import ContextState, ConversationState
from durable_react_agent.workflows import request_memory
from durable_react_agent.workflows.approvals import Approvals
from durable_react_agent.workflows.decisions import Decisions
from durable_react_agent.workflows.question import OpenQuestion
from durable_react_agent.workflows.request_memory import RequestMemory


def decisions(state: ConversationState | None = None, owner: str | None = None,
              limits: Limits | None = None) -> Decisions:
    state = state or ConversationState(context=ContextState(system_prompt="s"))
    limits = limits or Limits()
    approvals, question = Approvals(state, limits, owner), OpenQuestion(state, limits)
    return Decisions(state, approvals, question, RequestMemory(state),
                     shown=lambda: (approvals.pending_confirmations(),
                                    question.pending_question()))


def plain_logger(monkeypatch) -> None:
    """A refusal is logged with the workflow's logger: here, a plain one."""
    monkeypatch.setattr(request_memory.workflow, "logger", logging.getLogger("decisions"))
