"""Long conversations hand over to fresh runs (continue-as-new) without losing anything.

A conversation here hands over after 40 history events (its dev server also suggests it then), so
it happens often.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import httpx
import pytest
import pytest_asyncio
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.contrib.workflow_streams import WorkflowStreamClient
from temporalio.testing import WorkflowEnvironment

from durable_react_agent.activities.settings import ActivitySettings
from durable_react_agent.contract import (
    ConfirmRequest,
    EndRequest,
    LLMReply,
    SayRequest,
    StreamEvent,
)
from durable_react_agent.rules.search_attributes import AGENT_OWNER, AGENT_STATUS
from durable_react_agent.testing import ScriptedModelServer, ScriptedReply
from durable_react_agent.worker.app import build_worker
from durable_react_agent.workflows.conversation import ConversationWorkflow
from tests.devserver import TUNING_ARGS, temporal_cli
from tests.fake_tools import registry_with_test_tools
from tests.helpers import (
    reaches,
    replay_runs,
    run_histories,
    script,
    settled,
    start,
    steps_of,
    tool_call,
    unique,
)


@pytest_asyncio.fixture(scope="module")
async def eager_client(activity_settings: ActivitySettings) -> AsyncIterator[tuple[Client, str]]:
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=temporal_cli(),
        data_converter=pydantic_data_converter,
        search_attributes=[AGENT_STATUS, AGENT_OWNER],
        dev_server_extra_args=[
            *TUNING_ARGS, "--dynamic-config-value", "limit.historyCount.suggestContinueAsNew=40",
        ],
    )
    queue = f"can-{uuid.uuid4().hex[:6]}"
    try:
        async with httpx.AsyncClient(timeout=10) as http:
            async with build_worker(env.client, queue, activity_settings, http, registry_with_test_tools()):
                yield env.client, queue
    finally:
        await env.shutdown()


OFTEN = {"continue_as_new_after_events": 40}
# Handovers every few steps (a step of local reads adds 7 events): a budget that no run reaches
OFTENER = {"continue_as_new_after_events": 25}


@pytest.mark.long  # a stress-scale run: `make test-long`
async def test_a_long_turn_and_many_messages_cross_runs_without_loss(
    eager_client: tuple[Client, str], model: ScriptedModelServer
):
    client, queue = eager_client
    weather = [ScriptedReply(tool_calls=[tool_call("get_weather", {"location": city})])
               for city in ["Paris", "Tokyo", "Berlin", "London", "Sydney", "Beijing"] * 2]
    note = ScriptedReply(tool_calls=[tool_call("create_note", {"title": unique("can"), "body": "b"})])
    echoes = [ScriptedReply(content="echo: {last_user}") for _ in range(8)]
    trigger = script(model, unique("long"), *weather, note, ScriptedReply(content="first done"), *echoes)
    handle = await start(client, queue, trigger, max_steps=20, **OFTEN)

    # A confirmation pending in a later run, and a burst of messages sent across the handovers.
    pending = (await reaches(handle, "waiting_for_confirmation", timeout_s=60)).pending_confirmations
    # Large enough that the stream outgrows what a handover carries whatever the token batches.
    texts = [f"message {i} " + "." * 1500 for i in range(8)]
    for i in range(8):
        await handle.signal(ConversationWorkflow.say, SayRequest(text=texts[i], request_id=f"m{i}"))
    await handle.signal(ConversationWorkflow.confirm, ConfirmRequest(call_ids=[pending[0].call_id], request_id="c"))
    status = await settled(handle, turn=9, timeout_s=90)

    assert status.runs > 2, "continue-as-new never happened"
    assert (status.turn, status.final_answer, status.queued_messages) == (9, f"echo: {texts[7]}", 0)
    assert status.turns[0].steps_taken == 14 and status.turns[0].stop_reason == "answered"
    assert [t.turn for t in status.turns] == list(range(1, 10))
    for i in range(8):
        outcome = await handle.query(ConversationWorkflow.signal_outcome, f"m{i}")
        assert outcome.accepted and outcome.turn == i + 2
    messages = await handle.query(ConversationWorkflow.messages)
    assert [m.content for m in messages if m.role == "user"][-8:] == texts

    await handle.signal(ConversationWorkflow.end, EndRequest())
    result = await handle.result()
    assert (result.status, result.stop_reason) == ("completed", "ended")
    assert await replay_runs(client, handle, record_as="handover_mid_turn") == result.runs

    # The live stream crossed every handover: one story, in order, its latest part carried
    # within a byte budget (the oldest items fell off on the way).
    stream = WorkflowStreamClient.create(client, handle.id)
    items = [item async for item in stream.subscribe(["events"], result_type=StreamEvent)]
    assert [i.offset for i in items] == sorted(i.offset for i in items) and items[0].offset > 0
    started = [e.data.turn for e in items if e.data.kind == "turn_started"]
    finished = [e.data.turn for e in items if e.data.kind == "turn_finished"]
    assert started == list(range(started[0], 10)) and finished == list(range(finished[0], 10))
    assert len(await steps_of(handle)) == 14 + 8  # every step, every run


async def test_a_one_shot_turn_that_spans_runs_completes(
    eager_client: tuple[Client, str], model: ScriptedModelServer
):
    client, queue = eager_client
    steps = [ScriptedReply(tool_calls=[tool_call("get_weather", {"location": c})])
             for c in ["Paris", "Tokyo"] * 6]
    trigger = script(model, unique("oneshot-long"), *steps, ScriptedReply(content="all done"))
    handle = await start(client, queue, trigger, max_steps=20, one_shot=True, **OFTEN)
    result = await asyncio.wait_for(handle.result(), timeout=60)
    assert (result.status, result.stop_reason, result.final_answer) == ("completed", "answered", "all done")
    assert result.runs > 1 and result.steps == 13


def tokens_per_run(histories) -> list[list[int]]:
    """The total tokens of each model call, run by run, as the model activity reported them."""
    runs = []
    for history in histories:
        kinds, calls = {}, []
        for e in history.events:
            if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
                kinds[e.event_id] = e.activity_task_scheduled_event_attributes.activity_type.name
            elif e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
                done = e.activity_task_completed_event_attributes
                if kinds[done.scheduled_event_id] in ("llm_step", "llm_call"):
                    reply = pydantic_data_converter.payload_converter.from_payload(
                        done.result.payloads[0], LLMReply)
                    calls.append(reply.usage.total_tokens)
        runs.append(calls)
    return runs


async def test_the_token_budget_holds_across_handovers(
    eager_client: tuple[Client, str], model: ScriptedModelServer
):
    """The usage is carried: a budget that no single run reaches still stops the turn."""
    client, queue = eager_client
    tour = [ScriptedReply(tool_calls=[tool_call("get_weather", {"location": city})])
            for city in ["Paris", "Tokyo", "Berlin", "London"] * 3]
    free = script(model, unique("budget-ref"), *tour, ScriptedReply(content="toured"))
    reference = await start(client, queue, free, max_steps=20, one_shot=True, **OFTENER)
    assert (await asyncio.wait_for(reference.result(), timeout=60)).final_answer == "toured"
    calls = [n for run in tokens_per_run(await run_histories(client, reference)) for n in run]
    budget = sum(calls[:8])  # the same calls cost the same again (triggers of one length)

    budgeted = script(model, unique("budget-cap"), *tour, ScriptedReply(content="toured"))
    handle = await start(client, queue, budgeted, max_steps=20, one_shot=True,
                         max_total_tokens=budget, **OFTENER)
    result = await asyncio.wait_for(handle.result(), timeout=60)
    assert (result.stop_reason, result.llm_calls) == ("budget_exceeded", 8), result
    assert f"token budget ({budget} tokens)" in result.error
    per_run = tokens_per_run(await run_histories(client, handle))
    assert len(per_run) == result.runs > 2
    assert max(sum(run) for run in per_run) < budget  # only the carried usage reaches it
    assert result.usage.total_tokens == sum(map(sum, per_run)) == budget
