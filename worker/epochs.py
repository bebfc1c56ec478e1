"""Before a 1.0 worker polls: the running conversations of its task queue begun on 0.x
(`rules.epochs`), which it would fail, and which it will not start beside."""

from __future__ import annotations

from temporalio.client import Client

from ..rules.epochs import SHOWN, earlier_epoch_query, earlier_epoch_refusal


async def earlier_epoch(client: Client, task_queue: str, versioned: bool, address: str,
                        namespace: str) -> str | None:
    """Why this worker must not poll `task_queue`, or None."""
    query = earlier_epoch_query(task_queue, versioned)
    count = (await client.count_workflows(query)).count
    if not count:
        return None
    ids = [w.id async for w in client.list_workflows(query, limit=SHOWN)]
    return earlier_epoch_refusal(count, ids, task_queue, query, address, namespace)
