"""What a user sees: the live stream, the audit trail, the Temporal UI's metadata, the logs."""

from __future__ import annotations

import io
from pathlib import Path

from temporalio.api.sdk.v1 import WorkflowMetadata
from temporalio.client import Client

from durable_react_agent.client.watch import Renderer, watch
from durable_react_agent.contract import EndRequest
from durable_react_agent.rules.search_attributes import AGENT_STATUS
from durable_react_agent.testing import ScriptedModelServer, ScriptedReply
from durable_react_agent.worker.logging import redact_secrets
from durable_react_agent.workflows.conversation import ConversationWorkflow
from tests.helpers import (
    approval_round,
    script,
    settled,
    start,
    steps_of,
    stream_events,
    tool_call,
    unique,
)

ROOT = Path(__file__).resolve().parents[2]




async def test_the_stream_tells_the_turn_in_order(client: Client, task_queue: str, model: ScriptedModelServer):
    handle, create, delete = await approval_round(client, task_queue, model)
    await handle.signal(ConversationWorkflow.end, EndRequest())
    await handle.result()
    events = await stream_events(client, handle.id)
    kinds = [e.kind for e in events if e.kind != "token"]
    # Reads first, then the approval requests; the three signals may land in one workflow task,
    # so only the causal order of the middle part is fixed.
    assert kinds[:6] == ["turn_started", "llm_started", "tool_started", "tool_finished",
                         "approval_requested", "approval_requested"]
    assert sorted(kinds[6:11]) == sorted(["decision_refused", "decision_taken", "decision_taken",
                                          "tool_started", "tool_finished"])
    assert kinds[11:] == ["llm_started", "turn_finished"]
    by_call = [(e.kind, e.call_id) for e in events]
    assert by_call.index(("decision_taken", create.call_id)) < by_call.index(("tool_started", create.call_id))
    assert ("tool_started", delete.call_id) not in by_call
    text = "".join(e.text for e in events if e.kind == "token")
    assert text == "Let me check.Noted the weather in Paris."
    first_tokens = [i for i, e in enumerate(events) if e.kind == "token"]
    assert kinds.index("llm_started") < first_tokens[0]
    finished = events[-1]
    assert (finished.kind, finished.stop_reason, finished.text) == ("turn_finished", "answered", "Noted the weather in Paris.")
    weather_done = next(e for e in events if e.kind == "tool_finished")
    assert weather_done.tool == "get_weather" and weather_done.status == "ok" and weather_done.observation_bytes > 0

    out = io.StringIO()
    await watch(client, handle.id, renderer=Renderer(handle.id, out))
    shown = out.getvalue()
    assert "Let me check." in shown and "→ get_weather(location=Paris)" in shown
    assert f"agent confirm {handle.id} {create.call_id}" in shown
    assert "! refused: unknown call id nope" in shown
    assert f"✗ delete_note call {delete.call_id} rejected by bo: keep it" in shown
    assert "answer: Noted the weather in Paris." in shown


async def test_a_retried_model_call_resets_what_watch_shows(
    client: Client, task_queue: str, model: ScriptedModelServer
):
    trigger = script(model, unique("reset"), ScriptedReply(content="Second try wins.", errors=[503]))
    handle = await start(client, task_queue, trigger, one_shot=True)
    await handle.result()
    events = [e for e in await stream_events(client, handle.id) if e.kind in ("reset", "token")]
    assert events[0].kind == "reset" and events[0].attempt == 2
    assert {e.attempt for e in events[1:]} == {2}


async def test_audit_trail_records_approval_rejection_and_error(
    client: Client, task_queue: str, model: ScriptedModelServer
):
    handle, create, delete = await approval_round(client, task_queue, model)
    first, last = await steps_of(handle)
    assert (first.turn, first.step, first.thought) == (1, 1, "Let me check.")
    assert first.tokens.total_tokens > 0 and first.stop_reason is None
    weather, created, deleted = first.actions
    assert (weather.tool, weather.status, weather.decision) == ("get_weather", "ok", None)
    assert weather.input == {"location": "Paris"} and weather.observation_bytes > 0 and weather.ms is not None
    assert created.status == "ok" and created.decision.approver == "ann" and created.decision.approved
    assert deleted.status == "rejected" and deleted.decision.reason == "keep it"
    assert deleted.observation_bytes == len("rejected by user: keep it")
    assert (last.step, last.actions, last.stop_reason) == (2, [], "answered")

    trigger = script(
        model, unique("audit-error"),
        ScriptedReply(tool_calls=[tool_call("get_weather", {"location": "Atlantis"}), tool_call("nope", {})]),
        ScriptedReply(content="sorry"),
    )
    errored = await start(client, task_queue, trigger)
    await settled(errored)
    [step, _] = await steps_of(errored)
    assert [a.status for a in step.actions] == ["error", "error"]
    assert step.actions[1].input == "{}" and step.actions[1].ms is None


async def test_temporal_ui_metadata(client: Client, task_queue: str, model: ScriptedModelServer):
    handle, create, _ = await approval_round(client, task_queue, model)
    history = await handle.fetch_history()
    summaries = [e.user_metadata.summary.data.decode() for e in history.events
                 if e.HasField("user_metadata") and e.user_metadata.HasField("summary")]
    assert '"llm turn 1 step 1"' in summaries and '"get_weather(location=Paris)"' in summaries
    assert any(s.startswith('"create_note(title=') for s in summaries)
    description = await handle.describe()
    assert description.typed_search_attributes.get(AGENT_STATUS) == "idle"
    metadata = await handle.query("__temporal_workflow_metadata", result_type=WorkflowMetadata)
    assert "**Status:** idle" in metadata.current_details
    assert f"agent say {handle.id}" in metadata.current_details


def test_secrets_are_redacted_by_key_name():
    event = {"event": "x", "api_key": "sk-1", "headers": {"Authorization": "Bearer t"},
             "access_token": "t", "token": "t", "location": "Paris", "total_tokens": 12}
    assert redact_secrets(None, "info", event) == {
        "event": "x", "api_key": "***", "headers": {"Authorization": "***"},
        "access_token": "***", "token": "***", "location": "Paris", "total_tokens": 12}
