"""`make bench`'s Stop section: how soon a stopped turn ends while its model streams."""

from __future__ import annotations

import asyncio
import time
import uuid

from bench.stack import Stack, wait_until
from durable_react_agent.contract import ConversationInput, EndRequest, StopRequest
from durable_react_agent.testing import Scenario, ScriptedReply
from durable_react_agent.workflows.conversation import ConversationWorkflow

STOP_SCENARIO = Scenario(trigger="[stop]", replies=[  # a long reply, streamed slowly
    ScriptedReply(content="a long answer, said slowly, " * 40, stream_pause_s=5),
    ScriptedReply(content="done")])


async def stopping(stack: Stack, n: int) -> list[tuple[str, str]]:
    """Turns stopped while their model streams (`agent stop`): from the stop signal to the turn's
    end, as its status says (`idle`, `stop_reason=stopped`), for each of them at once."""
    client = await stack.client()
    stack.start_worker("stop")
    before = await stack.chat_requests()
    handles = await asyncio.gather(*(client.start_workflow(
        ConversationWorkflow.run, ConversationInput(prompt=f"[stop] {i}"),
        id=f"stop-{i}-{uuid.uuid4().hex[:6]}", task_queue="stop") for i in range(n)))

    async def all_streaming() -> bool:
        return await stack.chat_requests() - before >= n

    await wait_until(all_streaming, timeout_s=120)
    await asyncio.sleep(2)  # their first words are out

    async def stopped(handle) -> float:
        started = time.monotonic()
        await handle.signal(ConversationWorkflow.stop, StopRequest())

        async def ended() -> bool:
            status = await handle.query(ConversationWorkflow.status)
            return status.stop_reason == "stopped" and status.status == "idle"

        await wait_until(ended, timeout_s=60, interval_s=0.02)
        return time.monotonic() - started

    took = sorted(await asyncio.gather(*(stopped(h) for h in handles)))
    await asyncio.gather(*(h.signal(ConversationWorkflow.end, EndRequest()) for h in handles))
    return [(f"{n} turns streaming, each stopped: until its turn ended",
             f"median {took[len(took) // 2]:.2f} s, last {took[-1]:.2f} s (target < 1 s)")]
