"""`say --steer` (issue 50): a message steered into the turn in flight reaches the very next model
call of that turn, after the tool round in flight; a plain message mid-turn still waits for the
next turn, and a turn that ends before its model got the steered message answers it next."""

from __future__ import annotations

import asyncio
from collections import Counter

import httpx
from temporalio.client import Client

from durable_react_agent.activities.settings import ActivitySettings
from durable_react_agent.activities.tools import ToolSpec
from durable_react_agent.contract import EndRequest, SayRequest
from durable_react_agent.testing import ScriptedModelServer, ScriptedReply
from durable_react_agent.worker.app import build_worker
from durable_react_agent.workflows.conversation import ConversationWorkflow
from tests.fake_tools import NoArgs, registry_with_test_tools
from tests.helpers import (
    first_token,
    replay,
    script,
    settled,
    start,
    stream_events,
    tool_call,
    unique,
    until,
)

BEGUN: Counter[str] = Counter()


async def pause(args: NoArgs, ctx) -> str:
    """A safe read that takes three seconds: a tool round a message can arrive during."""
    BEGUN[ctx.conversation_id] += 1
    await asyncio.sleep(3)
    return "paused"


PAUSE = ToolSpec("pause", "Waits three seconds.", NoArgs, pause, local=False)  # (a signal
# reaches the conversation only between workflow tasks, which a local run would hold)


async def say(handle, text: str, request_id: str, steer: bool):
    return await handle.execute_update(ConversationWorkflow.send_message, SayRequest(
        text=text, request_id=request_id, steer=steer))


async def test_a_steered_message_reaches_the_turn_s_next_model_call_and_a_plain_one_waits(
        client: Client, model: ScriptedModelServer, activity_settings: ActivitySettings):
    queue = unique("steer")
    trigger = script(model, unique("steer"),
                     ScriptedReply(tool_calls=[tool_call("pause", {})]),
                     ScriptedReply(content="Saw: {last_user}"),
                     ScriptedReply(content="Then: {last_user}"))
    async with httpx.AsyncClient(timeout=10) as http, build_worker(
            client, queue, activity_settings, http, registry_with_test_tools(PAUSE)):
        handle = await start(client, queue, trigger)
        await until(lambda: BEGUN[handle.id] == 1, what="the tool round in flight")
        steered = await say(handle, "in Celsius, please", "steer-1", steer=True)
        plain = await say(handle, "and tomorrow?", "plain-1", steer=False)
        assert (steered.accepted, steered.turn, steered.reason) == (
            True, 1, "steered into turn 1: its model gets it at its next step")
        assert (plain.accepted, plain.turn, plain.reason) == (True, 2, None)
        # both wait (the tool runs 3 s): for the turn's next step, and for the next turn
        assert (await handle.query(ConversationWorkflow.status)).queued_messages == 2

        status = await settled(handle, turn=2)
        assert status.final_answer == "Then: and tomorrow?"
        assert [(t.turn, t.steps_taken) for t in status.turns] == [(1, 2), (2, 1)]
        messages = await handle.query(ConversationWorkflow.messages)
        assert [(m.role, m.content) for m in messages[-5:]] == [
            ("tool", "paused"),  # the round in flight, then the steered message: the same turn
            ("user", "in Celsius, please"), ("assistant", "Saw: in Celsius, please"),
            ("user", "and tomorrow?"), ("assistant", "Then: and tomorrow?")]
        await handle.signal(ConversationWorkflow.end, EndRequest())
        await handle.result()
        events = [(e.kind, e.turn, e.step, e.text) for e in await stream_events(client, handle.id)
                  if e.kind in ("steer_queued", "steered")]
        assert events == [("steer_queued", 1, 1, "in Celsius, please"),
                          ("steered", 1, 2, "in Celsius, please")]
        history = await handle.query(ConversationWorkflow.history)
        assert [(r.turn, r.text) for r in history if r.kind == "message"] == [
            (1, "in Celsius, please"), (2, "and tomorrow?")]
    await replay(handle, record_as="steered_into_the_turn")


async def test_a_message_steered_into_a_turn_that_ends_first_is_answered_next(
        client: Client, task_queue: str, model: ScriptedModelServer):
    trigger = script(model, unique("steer-late"),
                     ScriptedReply(content="A reply that takes its time.", stream_pause_s=2),
                     ScriptedReply(content="Next: {last_user}"))
    handle = await start(client, task_queue, trigger)
    await first_token(client, handle.id)  # its last model call is under way
    steered = await say(handle, "one more thing", "steer-late", steer=True)
    assert steered.turn == 1
    status = await settled(handle, turn=2, timeout_s=60)
    assert [t.stop_reason for t in status.turns] == ["answered", "answered"]
    assert status.final_answer == "Next: one more thing"
    assert status.queued_messages == 0
    await handle.signal(ConversationWorkflow.end, EndRequest())
    await handle.result()
