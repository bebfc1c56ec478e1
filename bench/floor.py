"""Temporal's floor: a bare workflow running two no-op activities per step. `python -m bench.floor`
serves it on AGENT_TASK_QUEUE, like `agent-worker` serves the agent."""

from __future__ import annotations

import asyncio
import os
import signal
from datetime import timedelta

from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.worker import Worker


@activity.defn
async def noop(step: int) -> int:
    return step


@activity.defn
async def wait(seconds: float) -> float:
    await asyncio.sleep(seconds)
    return seconds


@workflow.defn
class FloorWorkflow:
    @workflow.run
    async def run(self, steps: int, model_s: float = 0.0, local: bool = False) -> int:
        """`steps` steps of the agent's shape: a model call (waits `model_s`), a tool call (a
        local activity with `local`, as our quick reads are)."""
        deadline = timedelta(seconds=30)
        for step in range(steps):
            if model_s:
                await workflow.execute_activity(wait, model_s, start_to_close_timeout=deadline)
            else:
                await workflow.execute_activity(noop, step, start_to_close_timeout=deadline)
            if local:
                await workflow.execute_local_activity(noop, step, start_to_close_timeout=deadline)
            else:
                await workflow.execute_activity(noop, step, start_to_close_timeout=deadline)
        return steps


async def main() -> None:
    client = await Client.connect(os.environ["TEMPORAL_ADDRESS"])
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    async with Worker(client, task_queue=os.environ["AGENT_TASK_QUEUE"],
                      workflows=[FloorWorkflow], activities=[noop, wait]):
        await stop.wait()


if __name__ == "__main__":
    asyncio.run(main())
