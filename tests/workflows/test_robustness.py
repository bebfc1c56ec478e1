"""Robustness through a real server: stopping rules, odd model output, retries, size limits,
cancellation."""

from __future__ import annotations

import asyncio

import pytest
from temporalio import activity
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowFailureError
from temporalio.worker import Worker

from durable_react_agent.activities.settings import ActivitySettings
from durable_react_agent.contract import EndRequest, SayRequest, WorkerHandshake
from durable_react_agent.testing import ScriptedModelServer, ScriptedReply, ScriptedToolCall
from durable_react_agent.workflows.conversation import ConversationWorkflow
from tests.fake_tools import ATTEMPTS
from tests.helpers import (
    note_rows,
    reaches,
    script,
    settled,
    start,
    tool_call,
    tool_messages,
    unique,
    until,
)


def requests_of(model: ScriptedModelServer, trigger: str) -> list:
    return [r for r in model.requests if r.trigger == trigger]


async def test_same_call_same_result_twice_stops_with_loop_detected(
    client: Client, task_queue: str, model: ScriptedModelServer
):
    same = ScriptedReply(tool_calls=[tool_call("get_weather", {"location": "Paris"})])
    trigger = script(model, unique("loop"), same, same, ScriptedReply(content="I was going in circles."))
    status = await settled(await start(client, task_queue, trigger))
    assert (status.stop_reason, status.steps, status.final_answer) == ("loop_detected", 3, "I was going in circles.")
    assert requests_of(model, trigger)[-1].body["tool_choice"] == "none"
    [summary] = status.turns
    assert (summary.steps_taken, summary.llm_calls, summary.stop_reason) == (3, 3, "loop_detected")
    assert summary.tools_used == ["get_weather"] and summary.usage.total_tokens > 0


async def test_token_budget_stops_the_conversation(
    client: Client, task_queue: str, model: ScriptedModelServer
):
    trigger = script(
        model, unique("budget"),
        ScriptedReply(tool_calls=[tool_call("get_weather", {"location": "Paris"})]),
        ScriptedReply(content="never reached"),
        ScriptedReply(content="nor this"),
    )
    handle = await start(client, task_queue, trigger, max_total_tokens=50)
    status = await settled(handle)
    assert status.stop_reason == "budget_exceeded" and "token budget (50 tokens)" in status.error
    assert status.llm_calls == 1 and await tool_messages(handle) == []  # the tool call was dropped
    await handle.signal(ConversationWorkflow.say, SayRequest(text="more?"))
    again = await settled(handle, turn=2)
    assert again.stop_reason == "budget_exceeded" and again.llm_calls == 1  # no further model call


async def test_tool_call_written_into_content_is_recovered(
    client: Client, task_queue: str, model: ScriptedModelServer
):
    trigger = script(
        model, unique("content-call"),
        ScriptedReply(content='```json\n{"name": "get_weather", "arguments": {"location": "Tokyo"}}\n```'),
        ScriptedReply(content="{last_tool}"),
    )
    status = await settled(await start(client, task_queue, trigger))
    assert status.final_answer.startswith("Tokyo, Japan") and status.tools_used == ["get_weather"]


async def test_empty_reply_ends_the_turn_with_a_clear_error(
    client: Client, task_queue: str, model: ScriptedModelServer
):
    trigger = script(model, unique("empty"), ScriptedReply(content=""), ScriptedReply(content="back"))
    handle = await start(client, task_queue, trigger)
    status = await settled(handle)
    assert (status.stop_reason, status.final_answer, status.error) == (
        "answered", "", "the model returned an empty reply")
    await handle.signal(ConversationWorkflow.say, SayRequest(text="hello?"))
    assert (await settled(handle, turn=2)).final_answer == "back"


async def test_missing_and_repeated_tool_call_ids_get_unique_ones(
    client: Client, task_queue: str, model: ScriptedModelServer
):
    trigger = script(
        model, unique("ids"),
        ScriptedReply(tool_calls=[
            ScriptedToolCall(name="get_weather", arguments={"location": "Paris"}, id=""),
            ScriptedToolCall(name="get_weather", arguments={"location": "Tokyo"}, id="same"),
            ScriptedToolCall(name="get_weather", arguments={"location": "Berlin"}, id="same"),
        ]),
        ScriptedReply(tool_calls=[ScriptedToolCall(name="get_weather", arguments={"location": "London"}, id="same")]),
        ScriptedReply(content="done"),
    )
    handle = await start(client, task_queue, trigger)
    await settled(handle)
    messages = await handle.query(ConversationWorkflow.messages)
    call_ids = [c.id for m in messages if m.tool_calls for c in m.tool_calls]
    assert len(set(call_ids)) == 4 and "" not in call_ids
    assert [m.tool_call_id for m in messages if m.role == "tool"] == call_ids
    second_request = requests_of(model, trigger)[1].body["messages"]
    assert [m["tool_call_id"] for m in second_request if m["role"] == "tool"] == call_ids[:3]


async def test_cut_off_replies_are_flagged(client: Client, task_queue: str, model: ScriptedModelServer):
    trigger = script(
        model, unique("length"),
        ScriptedReply(tool_calls=[tool_call("get_weather", '{"location": "Par')], finish_reason="length"),
        ScriptedReply(content="The weather in Paris is", finish_reason="length"),
    )
    handle = await start(client, task_queue, trigger)
    status = await settled(handle)
    [observation] = await tool_messages(handle)
    assert "not valid JSON" in observation.content and "finish_reason=length" in observation.content
    assert status.final_answer == "The weather in Paris is"
    assert "cut off" in status.error and status.stop_reason == "answered"


async def test_idempotent_tool_is_retried_and_non_idempotent_is_not(
    client: Client, task_queue: str, model: ScriptedModelServer
):
    trigger = script(
        model, unique("retries"),
        ScriptedReply(tool_calls=[tool_call("flaky_read", {}), tool_call("flaky_write", {})]),
        ScriptedReply(content="ok"),
    )
    before = ATTEMPTS.copy()
    handle = await start(client, task_queue, trigger)
    await settled(handle, timeout_s=60)
    read, write = await tool_messages(handle)
    assert read.content == "read ok on attempt 3"
    assert ATTEMPTS["flaky_read"] - before["flaky_read"] == 3
    assert ATTEMPTS["flaky_write"] - before["flaky_write"] == 1
    assert "not retried because it is not idempotent; its outcome is unknown" in write.content


async def test_huge_observations_are_truncated_with_a_marker(
    client: Client, task_queue: str, model: ScriptedModelServer
):
    trigger = script(
        model, unique("big"),
        ScriptedReply(tool_calls=[tool_call("big_output", {"size": 100_000})]),
        ScriptedReply(content="ok"),
    )
    handle = await start(client, task_queue, trigger, max_observation_bytes=1000)
    await settled(handle)
    [observation] = await tool_messages(handle)
    assert observation.content.endswith("…[truncated: 100000 bytes, showing the first 1000]")
    assert len(observation.content.encode()) < 1100
    history = await handle.fetch_history()
    assert max(len(e.SerializeToString()) for e in history.events) < 20_000


async def counted(key: str, before: dict[str, int], timeout_s: float = 10) -> None:
    """Wait until the test tools have counted `key` once more than `before`; fail after
    `timeout_s`."""
    await until(lambda: ATTEMPTS[key] > before[key], timeout_s,
                lambda: f"a count of {key!r} (still {ATTEMPTS[key]})")


async def test_cancelling_stops_the_in_flight_tool_promptly(
    client: Client, task_queue: str, model: ScriptedModelServer
):
    trigger = script(model, unique("cancel"), ScriptedReply(tool_calls=[tool_call("slow_tool", {})]))
    before = ATTEMPTS.copy()
    handle = await start(client, task_queue, trigger)
    await counted("slow_tool", before)  # it has started
    await handle.cancel()
    with pytest.raises(WorkflowFailureError):
        await asyncio.wait_for(handle.result(), timeout=30)
    await counted("slow_tool_cancelled", before)  # the activity learns of it at its next heartbeat
    assert ATTEMPTS["slow_tool_cancelled"] == before["slow_tool_cancelled"] + 1
    status = await handle.query(ConversationWorkflow.status)
    assert (status.status, status.stop_reason) == ("completed", "cancelled")


async def test_cancelling_during_a_model_call(client: Client, task_queue: str, model: ScriptedModelServer):
    trigger = script(model, unique("cancel-llm"), ScriptedReply(content="late", hold=True))
    handle = await start(client, task_queue, trigger)
    assert await asyncio.to_thread(model.wait_for_request, trigger, 0, 30.0)
    await reaches(handle, "running")
    await handle.cancel()
    with pytest.raises(WorkflowFailureError):
        await asyncio.wait_for(handle.result(), timeout=30)
    assert (await handle.query(ConversationWorkflow.status)).stop_reason == "cancelled"


def prompt_tokens(request) -> int:
    from durable_react_agent.testing.script import ScriptedReply as Reply
    from durable_react_agent.testing.script import usage

    return usage(request.body["messages"], request.body.get("tools"), Reply())["prompt_tokens"]


async def run_thirty_steps(client, task_queue, model, budget: int | None) -> list[int]:
    steps = [ScriptedReply(tool_calls=[tool_call("big_output", {"size": 4000 + i})]) for i in range(29)]
    trigger = script(model, unique("thirty"), *steps, ScriptedReply(content="done"))
    handle = await start(client, task_queue, trigger, max_steps=30, context_budget_tokens=budget)
    status = await settled(handle, timeout_s=120)
    assert status.steps == 30 and status.final_answer == "done"
    return [prompt_tokens(r) for r in requests_of(model, trigger)]


async def test_compaction_bounds_the_prompt_over_thirty_steps(
    client: Client, task_queue: str, model: ScriptedModelServer
):
    full = await run_thirty_steps(client, task_queue, model, budget=None)
    compacted = await run_thirty_steps(client, task_queue, model, budget=1200)
    assert len(full) == len(compacted) == 30
    assert full[0] == compacted[0]
    assert full[-1] > 10 * full[0]  # without compaction the prompt grows with every step
    assert max(compacted) <= 2 * compacted[0]


DISCOVERIES: list[str] = []  # the conversations whose endless discovery has started


@activity.defn(name="list_tools")
async def endless_discovery() -> WorkerHandshake:
    """A tool discovery that never ends (a server that never answers), until cancelled. It
    runs as a local activity in the workflow task, as a new conversation lists its tools."""
    DISCOVERIES.append(activity.info().workflow_id)
    while True:
        await asyncio.sleep(0.1)


async def test_cancelling_during_tool_discovery_ends_the_conversation(client: Client):
    queue = unique("discovery")
    async with Worker(client, task_queue=queue, workflows=[ConversationWorkflow],
                      activities=[endless_discovery]):
        handle = await start(client, queue, "hello")
        await until(lambda: handle.id in DISCOVERIES, 10, "the tool discovery's start")
        await handle.cancel()
        with pytest.raises(WorkflowFailureError):
            await asyncio.wait_for(handle.result(), timeout=30)
        status = await handle.query(ConversationWorkflow.status)
    assert (status.status, status.stop_reason, status.turn) == ("completed", "cancelled", 0)


async def test_end_interrupts_a_model_call_in_flight(
    client: Client, task_queue: str, model: ScriptedModelServer
):
    trigger = script(model, unique("end-llm"), ScriptedReply(content="too late", hold=True))
    handle = await start(client, task_queue, trigger)
    assert await asyncio.to_thread(model.wait_for_request, trigger, 0, 30.0)
    await handle.signal(ConversationWorkflow.end, EndRequest(request_id="stop"))
    result = await asyncio.wait_for(handle.result(), timeout=10)  # not the held model call
    assert (result.status, result.stop_reason, result.final_answer) == ("completed", "ended", None)
    events = [e.event_type for e in (await handle.fetch_history()).events]
    assert EventType.EVENT_TYPE_ACTIVITY_TASK_CANCEL_REQUESTED in events


async def test_end_interrupts_the_tools_in_flight_and_answers_every_call(
    client: Client, task_queue: str, model: ScriptedModelServer
):
    trigger = script(model, unique("end-tools"),
                     ScriptedReply(tool_calls=[tool_call("slow_tool", {}),
                                               tool_call("get_weather", {"location": "Paris"})]),
                     ScriptedReply(content="never"))
    before = ATTEMPTS.copy()
    handle = await start(client, task_queue, trigger)
    await counted("slow_tool", before)  # it has started
    await handle.signal(ConversationWorkflow.end, EndRequest())
    result = await asyncio.wait_for(handle.result(), timeout=10)
    assert (result.status, result.stop_reason) == ("completed", "ended")
    slow, weather = await tool_messages(handle)
    assert slow.content == "interrupted: the conversation was ended"
    assert weather.content.startswith("Paris, France") or weather.content == slow.content
    assert model.count(trigger, step=1) == 0  # no model call after the end
    await counted("slow_tool_cancelled", before)  # the tool learns of it at its next heartbeat
    assert ATTEMPTS["slow_tool_cancelled"] == before["slow_tool_cancelled"] + 1


async def test_a_provider_that_ignores_tool_choice_none_is_asked_again_without_tools(
    client: Client, task_queue: str, model: ScriptedModelServer
):
    weather = tool_call("get_weather", {"location": "Paris"})
    trigger = script(
        model, unique("ignores-none"), ScriptedReply(tool_calls=[weather]),
        ScriptedReply(tool_calls=[weather], content_without_tools="Paris is mild today."),
    )
    status = await settled(await start(client, task_queue, trigger, max_steps=2))
    assert (status.steps, status.stop_reason, status.error) == (2, "max_steps", None)
    assert status.final_answer == "Paris is mild today." and status.llm_calls == 3
    forced, retried = requests_of(model, trigger)[1:]
    assert forced.body["tool_choice"] == "none" and "tools" not in retried.body

    stubborn = script(model, unique("stubborn"), ScriptedReply(tool_calls=[weather]),
                      ScriptedReply(tool_calls=[weather]))
    status = await settled(await start(client, task_queue, stubborn, max_steps=2))
    assert (status.stop_reason, status.final_answer) == ("max_steps", "")
    assert status.error == "the model called tools when asked for a final answer without them"
    assert status.llm_calls == 3  # retried once, not more


async def test_a_tool_that_writes_under_its_key_is_retried_and_writes_once(
    client: Client, task_queue: str, model: ScriptedModelServer, activity_settings: ActivitySettings
):
    title = unique("crash-mid-write")
    trigger = script(model, unique("keyed"),
                     ScriptedReply(tool_calls=[tool_call("note_then_crash", {"title": title, "body": "b"})]),
                     ScriptedReply(content="{last_tool}"))
    before = ATTEMPTS.copy()
    status = await settled(await start(client, task_queue, trigger))
    assert ATTEMPTS["note_then_crash"] - before["note_then_crash"] == 2
    [row] = note_rows(activity_settings.data_dir, title)
    assert status.final_answer == f"Created note #{row[0]} {title!r}."  # a normal result, once

    # create_note writes under its key the same way, so it too is scheduled with retries.
    trigger = script(model, unique("keyed-create"),
                     ScriptedReply(tool_calls=[tool_call("create_note", {"title": title, "body": "c"})]),
                     ScriptedReply(content="{last_tool}"))
    handle = await start(client, task_queue, trigger, approval={"auto_approve": ["create_note"]})
    await settled(handle)
    [scheduled] = [e.activity_task_scheduled_event_attributes for e in (await handle.fetch_history()).events
                   if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
                   and e.activity_task_scheduled_event_attributes.activity_type.name == "create_note"]
    assert scheduled.retry_policy.maximum_attempts == 3
