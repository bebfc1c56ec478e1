"""History epochs. 1.0 began a new one: its code issues no patch markers, and replays none. A
conversation begun on a 0.x worker holds them (each with Temporal's `TemporalChangeVersion`
search attribute), so it finishes on 0.x code: pinned to a 0.x version of a worker deployment,
it stays there until its turn boundary, then moves onto 1.0 carrying its state; unversioned,
any worker of its task queue may take its next task, and a 1.0 worker would fail it. So a 1.0
worker looks for such conversations on its queue before it polls, and will not start beside
them (docs/deploy.md, "From 0.x to 1.0")."""

from __future__ import annotations

import shlex

from ..contract.names import WORKFLOW_TYPE
from .search_attributes import WORKER_VERSION

# Temporal's own: the patch ids a run's history recorded (0.x runs only).
CHANGE_VERSION = "TemporalChangeVersion"
SHOWN = 5  # conversations named in a refusal


def earlier_epoch_query(task_queue: str, versioned: bool) -> str:
    """The running 0.x conversations of a task queue that a worker of it could be handed; a
    versioned worker is handed none pinned to a version (they stay on theirs)."""
    queue = '"' + task_queue.replace("\\", "\\\\").replace('"', '\\"') + '"'
    query = (f'WorkflowType = "{WORKFLOW_TYPE}" AND ExecutionStatus = "Running" '
             f"AND TaskQueue = {queue} AND {CHANGE_VERSION} IS NOT NULL")
    if versioned:
        query += f" AND {WORKER_VERSION.name} IS NULL"
    return query


def earlier_epoch_refusal(count: int, ids: list[str], task_queue: str, query: str,
                          address: str, namespace: str) -> str | None:
    """Why a 1.0 worker does not start beside `count` such conversations (`ids`, some of
    them, found by `query` on the server at `address`), and what to run instead; None if
    there are none."""
    if count <= 0:
        return None
    listing = shlex.join(["temporal", "workflow", "list", "--address", address, "--namespace",
                          namespace, "--query", query])
    named = ", ".join(ids[:SHOWN]) + (f" and {count - SHOWN} more" if count > SHOWN else "")
    return (f"{count} conversation(s) on task queue {task_queue} began on a 0.x worker "
            f"({named}) and replay only on 0.x code; a 1.0 worker would fail them. Keep a 0.x "
            f"worker serving them (`python -m worker` in a checkout of the last 0.x version) "
            f"until they end, and start 1.0 then; or run this worker on a task queue of its own "
            f"(AGENT_TASK_QUEUE). Find them with: {listing}")
