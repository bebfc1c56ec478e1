"""Heartbeat while awaiting, so a dead worker's activity is retried within seconds."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

from temporalio import activity

T = TypeVar("T")


async def heartbeating(awaitable: Awaitable[T], interval_s: float = 2.0) -> T:
    """Await `awaitable`, heartbeating every `interval_s` until it finishes."""
    task = asyncio.ensure_future(awaitable)
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=interval_s)
            if done:
                return task.result()
            activity.heartbeat()
    finally:
        # Reached with the task still running only when the activity itself is cancelled.
        if not task.done():
            task.cancel()
