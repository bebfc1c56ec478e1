"""Heartbeat while awaiting, so a dead worker's activity is retried within seconds."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

from temporalio import activity

T = TypeVar("T")


MAX_INTERVAL_S = 2.0


def is_local() -> bool:
    """Whether this runs as a local activity (in the worker of the workflow task)."""
    return activity.in_activity() and activity.info().is_local


def interval() -> float:
    """A quarter of the activity's heartbeat timeout, at most 2 s."""
    timeout = activity.info().heartbeat_timeout if activity.in_activity() else None
    if not timeout:
        return MAX_INTERVAL_S
    return max(0.1, min(MAX_INTERVAL_S, timeout.total_seconds() / 4))


async def heartbeating(awaitable: Awaitable[T], interval_s: float | None = None,
                      beat: Callable[[], None] = activity.heartbeat) -> T:
    """Await `awaitable`, heartbeating often enough for the activity's heartbeat timeout (with
    `beat`, which may carry details). A local activity has no heartbeat: its workflow task's
    deadline stands for it."""
    if is_local():
        return await awaitable
    interval_s = interval() if interval_s is None else interval_s
    task = asyncio.ensure_future(awaitable)
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=interval_s)
            if done:
                return task.result()
            beat()
    finally:
        # Reached with the task still running only when the activity itself is cancelled.
        if not task.done():
            task.cancel()
