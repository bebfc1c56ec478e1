"""Fair limits per step (issue 50): at most `max_parallel_tools` of a step's tool activities run
at once (default 8), the rest waiting their turn; past `max_calls_per_step`, calls are not run
and the model reads why."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator

import httpx
import pytest_asyncio
from pydantic import BaseModel
from temporalio.client import Client

from durable_react_agent.activities.settings import ActivitySettings
from durable_react_agent.activities.tools import ToolSpec
from durable_react_agent.contract import EndRequest
from durable_react_agent.testing import ScriptedModelServer, ScriptedReply
from durable_react_agent.worker.app import build_worker
from durable_react_agent.workflows.conversation import ConversationWorkflow
from tests.fake_tools import registry_with_test_tools
from tests.helpers import replay, script, settled, start, tool_call, tool_messages, unique

RUNNING: Counter[str] = Counter()
PEAK: Counter[str] = Counter()


class Work(BaseModel):
    n: int  # (calls of other arguments: the same call twice in a reply runs once)


async def busy(args: Work, ctx) -> str:
    """Half a second of work, counting how many of its conversation's run at once."""
    key = ctx.conversation_id
    RUNNING[key] += 1
    PEAK[key] = max(PEAK[key], RUNNING[key])
    try:
        await asyncio.sleep(0.5)
    finally:
        RUNNING[key] -= 1
    return "done"


BUSY = ToolSpec("busy", "Works for half a second.", Work, busy, local=False)


@pytest_asyncio.fixture
async def busy_queue(client: Client, activity_settings: ActivitySettings) -> AsyncIterator[str]:
    queue = unique("limits")
    async with httpx.AsyncClient(timeout=10) as http, build_worker(
            client, queue, activity_settings, http, registry_with_test_tools(BUSY)):
        yield queue


async def test_a_step_of_50_calls_runs_at_most_8_at_once_and_every_one_runs(
        client: Client, busy_queue: str, model: ScriptedModelServer):
    trigger = script(model, unique("fan-out"),
                     ScriptedReply(tool_calls=[tool_call("busy", {"n": n}) for n in range(50)]),
                     ScriptedReply(content="All done."))
    handle = await start(client, busy_queue, trigger)
    status = await settled(handle, timeout_s=120)
    assert status.final_answer == "All done."
    assert [m.content for m in await tool_messages(handle)] == ["done"] * 50
    assert PEAK[handle.id] == 8
    await handle.signal(ConversationWorkflow.end, EndRequest())
    await handle.result()
    await replay(handle, record_as="step_of_50_calls_8_at_once")


async def test_a_conversation_s_own_limits_hold(
        client: Client, busy_queue: str, model: ScriptedModelServer):
    trigger = script(model, unique("limited"),
                     ScriptedReply(tool_calls=[tool_call("busy", {"n": n}) for n in range(5)]),
                     ScriptedReply(content="Some done."))
    handle = await start(client, busy_queue, trigger, max_parallel_tools=2, max_calls_per_step=3)
    status = await settled(handle, timeout_s=60)
    assert status.final_answer == "Some done."
    observations = [m.content for m in await tool_messages(handle)]
    assert observations[:3] == ["done"] * 3
    assert observations[3:] == ["Error: not run: a step may make at most 3 tool calls and this "
                                "one made 5; make the calls left in your next step"] * 2
    assert PEAK[handle.id] == 2
    await handle.signal(ConversationWorkflow.end, EndRequest())
    await handle.result()
