"""Quick safe reads run in the workflow task (local activities), and the handshake too: a step
costs one workflow task and one model activity. What may not run there (a write, a tool that may
not run again, one marked `local=False`, any tool of a worker that splits the roles or is told
not to) runs as an activity of its own; a read whose worker dies runs again on the next worker,
and nothing that completed runs twice."""

from __future__ import annotations

import dataclasses

import httpx
import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHistory
from temporalio.testing import ActivityEnvironment

from durable_react_agent.activities.settings import ActivitySettings
from durable_react_agent.activities.tool_runner import ToolActivities
from durable_react_agent.activities.tools import default_registry
from durable_react_agent.activities.tools.function_tool import ToolDefinitionError, tool
from durable_react_agent.testing import ScriptedModelServer, ScriptedReply
from durable_react_agent.worker.app import build_worker
from tests.fake_tools import registry_with_test_tools
from tests.helpers import (
    local_runs,
    replay,
    scheduled,
    script,
    settled,
    start,
    steps_of,
    tool_call,
    unique,
)


def tasks_between_model_calls(history: WorkflowHistory) -> list[int]:
    """The workflow tasks completed between a model reply and the next model call."""
    counts, between = [], None
    for event in history.events:
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            between = 0
        elif event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED and \
                between is not None:
            between += 1
        elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED and \
                between is not None:
            counts.append(between)
            between = None
    return counts


async def test_a_safe_read_runs_in_the_workflow_task_and_a_step_costs_one(
    client: Client, task_queue: str, model: ScriptedModelServer
):
    trigger = script(
        model, unique("local"),
        ScriptedReply(tool_calls=[tool_call("get_weather", {"location": "Paris"}),
                                  tool_call("list_notes", {})]),
        ScriptedReply(tool_calls=[tool_call("get_weather", {"location": "Tokyo"})]),
        ScriptedReply(content="Both: {last_tool}"),
    )
    forecasts = model.forecast_calls
    handle = await start(client, task_queue, trigger, one_shot=True)
    # its end, not a poll of the status: a query that comes while the reads run may end their
    # workflow task early, so that the query is answered
    await handle.result()
    status = await settled(handle)
    assert (status.status, status.steps) == ("completed", 3)
    assert status.final_answer.startswith("Both: Tokyo, Japan")
    assert model.forecast_calls == forecasts + 2

    history = await handle.fetch_history()
    runs = local_runs(history)  # the two reads of one reply run side by side, in either order
    assert runs[0] == ("list_tools", "list tools")
    assert sorted(runs[1:3]) == [("get_weather", "get_weather(location=Paris)"),
                                 ("list_notes", "list_notes()")]
    assert runs[3:] == [("get_weather", "get_weather(location=Tokyo)")]
    assert scheduled(history) == ["llm_step"] * 3
    assert tasks_between_model_calls(history) == [1, 1]  # a step of reads: one workflow task
    assert [(a.tool, a.status) for r in await steps_of(handle) for a in r.actions] == [
        ("get_weather", "ok"), ("list_notes", "ok"), ("get_weather", "ok")]
    await replay(handle, record_as="local_reads")


async def test_a_tool_that_may_not_run_again_or_waits_for_a_person_runs_as_an_activity(
    client: Client, task_queue: str, model: ScriptedModelServer
):
    trigger = script(
        model, unique("remote"),
        ScriptedReply(tool_calls=[tool_call("flaky_write", {}), tool_call("get_weather",
                                                                           {"location": "London"})]),
        ScriptedReply(content="done"),
    )
    handle = await start(client, task_queue, trigger, one_shot=True)
    await settled(handle)
    history = await handle.fetch_history()
    assert "flaky_write" in scheduled(history)  # safe, but neither idempotent nor keyed
    assert [name for name, _ in local_runs(history)] == ["list_tools", "get_weather"]


def test_which_tools_run_locally():
    definitions = {t.name: t for t in registry_with_test_tools().definitions()}
    assert {name for name, t in definitions.items() if t.local} == {
        "get_weather", "list_notes", "flaky_read", "big_output", "note_then_crash"}
    assert definitions["slow_tool"].timeout_s > 30  # a long read runs as an activity
    assert not any(t.local for t in registry_with_test_tools().definitions(local=False))

    @tool(local=False)
    def long_scan(query: str) -> str:
        """Scan the archive."""
        return query

    assert not long_scan.runs_locally and not long_scan.definition().local

    @tool(timeout_s=31)
    def slow_scan(query: str) -> str:
        """Scan the archive, slowly."""
        return query

    @tool(timeout_s=120, local=True)
    def told_to(query: str) -> str:
        """Scan the archive, locally whatever it takes."""
        return query

    assert (slow_scan.runs_locally, told_to.runs_locally) == (False, True)
    with pytest.raises(ToolDefinitionError, match="local=True is for safe tools"):
        @tool(risk="sensitive", keyed=True, local=True)
        def send(text: str) -> str:
            """Send it."""
            return text
    with pytest.raises(ToolDefinitionError, match="may run again"):
        @tool(idempotent=False, local=True)
        def append(text: str) -> str:
            """Append it."""
            return text


async def test_a_worker_that_splits_the_roles_or_is_told_not_to_runs_no_tool_locally(
    monkeypatch: pytest.MonkeyPatch,
):
    monkeypatch.setenv("AGENT_LOCAL_TOOLS", "off")
    assert ActivitySettings.from_env().local_tools is False
    monkeypatch.setenv("AGENT_LOCAL_TOOLS", "sometimes")
    with pytest.raises(ValueError, match="AGENT_LOCAL_TOOLS must be on or off"):
        ActivitySettings.from_env()

    async def local_tools(settings: ActivitySettings, queues: dict[str, str] | None) -> set[str]:
        async with httpx.AsyncClient() as http:
            lister = ToolActivities(default_registry(), settings, http, activity_queues=queues)
            handshake = await ActivityEnvironment().run(lister.list_tools)
        return {t.name for t in handshake.tools if t.local}

    assert await local_tools(ActivitySettings(), None) == {"get_weather", "list_notes"}
    assert await local_tools(ActivitySettings(local_tools=False), None) == set()
    assert await local_tools(ActivitySettings(), {"tools": "q-tools", "models": "q-models"}) == set()


async def test_a_worker_told_not_to_runs_every_tool_as_an_activity(
    client: Client, model: ScriptedModelServer, activity_settings: ActivitySettings
):
    queue = unique("no-local")
    trigger = script(model, unique("no-local"),
                     ScriptedReply(tool_calls=[tool_call("get_weather", {"location": "Sydney"})]),
                     ScriptedReply(content="{last_tool}"))
    settings = dataclasses.replace(activity_settings, local_tools=False)
    async with httpx.AsyncClient() as http, build_worker(client, queue, settings, http,
                                                         registry_with_test_tools()):
        handle = await start(client, queue, trigger, one_shot=True)
        status = await settled(handle)
    assert status.final_answer.startswith("Sydney, Australia")
    history = await handle.fetch_history()
    assert scheduled(history) == ["llm_step", "get_weather", "llm_step"]
    assert [name for name, _ in local_runs(history)] == ["list_tools"]


