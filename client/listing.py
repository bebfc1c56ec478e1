"""Conversations as a list: the row of each, and the visibility query that finds them."""

from __future__ import annotations

from pydantic import BaseModel
from temporalio.client import WorkflowExecutionStatus

from ..contract import names
from ..rules.search_attributes import AGENT_OWNER, AGENT_STATUS, WORKER_VERSION


class ConversationRow(BaseModel):
    """A conversation as `list` shows it."""

    workflow_id: str
    prompt: str | None = None  # its first message, clipped: what it is about
    status: str | None
    execution: str | None
    started: str | None
    owner: str | None = None  # who started it
    version: str | None = None  # the Worker Deployment Version it runs on (`NAME:ID`)


# Closed runs: Temporal's execution status says what became of them. A run that continued as new
# is not listed: its conversation goes on in the next run.
_CLOSED = {"completed": '("Completed", "Canceled")', "failed": '("Failed", "Terminated", "TimedOut")'}


def list_query(status: str | None, owner: str | None = None, version: str | None = None) -> str:
    query = f'WorkflowType = "{names.WORKFLOW_TYPE}" AND ExecutionStatus != "ContinuedAsNew"'
    if owner is not None:
        query += f" AND {AGENT_OWNER.name} = {quoted(owner)}"
    if version is not None:
        query += f" AND {WORKER_VERSION.name} = {quoted(version)}"
    if status in _CLOSED:
        return f"{query} AND ExecutionStatus IN {_CLOSED[status]}"
    if status:
        return f'{query} AND ExecutionStatus = "Running" AND {AGENT_STATUS.name} = "{status}"'
    return query


def quoted(value: str) -> str:
    """A string operand of a visibility query."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def shown_status(agent_status: str | None, execution: WorkflowExecutionStatus | None) -> str | None:
    """The conversation's status as `status` names it, for a running or a closed run."""
    if execution is None or execution == WorkflowExecutionStatus.RUNNING:
        return agent_status
    if execution in (WorkflowExecutionStatus.COMPLETED, WorkflowExecutionStatus.CANCELED):
        return "completed"
    return "failed"
