"""No data from outside fails a workflow task: tool schemas, model output, signal and update
payloads each become an observation, a refusal, or a tool left out with its reason."""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
import pytest_asyncio
from temporalio.client import Client, WorkflowUpdateFailedError

from activities.mcp import McpToolbox, load_mcp_config
from activities.settings import ActivitySettings
from scripted_model import ScriptedModelServer, ScriptedReply, ScriptedToolCall
from tests.helpers import outcome_of, reaches, script, settled, start, tool_call, tool_messages, unique
from worker.app import build_worker
from workflows.approvals import PendingCall, Refusal, check_edited_args
from workflows.conversation import ConversationWorkflow
from workflows.decisions import InvalidCall, check_tool_call
from workflows.models import (
    ChatMessage,
    ConfirmRequest,
    FunctionCall,
    SayRequest,
    ToolCall,
    ToolDefinition,
)
from workflows.repair import recover_tool_calls
from workflows.schemas import argument_problem, schema_problem

SERVERS = Path(__file__).parent / "mcp_servers"
DANGLING = {"type": "object", "properties": {"text": {"$ref": "#/$defs/Missing"}}}
REMOTE = {"type": "object", "properties": {"text": {"$ref": "http://127.0.0.1:9/s.json"}}}
DEEP_ARGS = "[" * 5000 + "]" * 5000
HUGE_NUMBER = '{"location": 1' + "0" * 5000 + "}"


# ----- pure -----


def test_schemas_that_cannot_be_applied_give_reasons_and_fetch_nothing():
    assert schema_problem({"type": "object", "$defs": {"A": {"type": "string"}},
                           "properties": {"a": {"$ref": "#/$defs/A"}}}) is None
    assert "'/$defs/Missing' does not resolve" in schema_problem(DANGLING)
    assert "'http://127.0.0.1:9/s.json' does not resolve" in schema_problem(REMOTE)
    assert schema_problem({"type": 5}).startswith("SchemaError")
    assert schema_problem([1]) == "it is not a JSON object"
    assert argument_problem(DANGLING, {"text": "x"}).startswith("the tool's schema cannot be applied")
    assert argument_problem(REMOTE, {"text": "x"}).startswith("the tool's schema cannot be applied")
    deep: list = []
    for _ in range(200):
        deep = [deep]
    assert "nested more than 64 levels" in argument_problem({"type": "object"}, {"a": deep})


def test_odd_model_output_becomes_an_invalid_call_not_an_exception():
    tool = ToolDefinition(name="get_weather", description="", parameters={"type": "object"})
    for raw in (DEEP_ARGS, HUGE_NUMBER):
        checked = check_tool_call(ToolCall(id="c", function=FunctionCall(name="get_weather",
                                                                           arguments=raw)),
                                  {"get_weather": tool})
        assert isinstance(checked, InvalidCall) and "are not valid JSON" in checked.observation
    message = ChatMessage(role="assistant", content=DEEP_ARGS)
    assert recover_tool_calls(message, {"get_weather"}) == message


def test_edited_args_against_a_broken_schema_are_refused():
    tool = ToolDefinition(name="t", description="", parameters=DANGLING, risk="sensitive")
    refusal = check_edited_args(PendingCall("c", tool, {}), {"text": "x"}, ["c"])
    assert isinstance(refusal, Refusal) and "schema cannot be applied" in refusal.reason


# ----- through a real server -----


@pytest_asyncio.fixture(scope="module")
async def odd_queue(client: Client, activity_settings: ActivitySettings,
                    tmp_path_factory) -> AsyncIterator[str]:
    config = tmp_path_factory.mktemp("odd") / "mcp.json"
    config.write_text(json.dumps({"mcpServers": {"odd": {
        "command": sys.executable, "args": [str(SERVERS / "odd_schemas.py")]}}}))
    toolbox = McpToolbox(load_mcp_config(config, {}))
    queue = unique("odd")
    try:
        async with httpx.AsyncClient(timeout=10) as http:
            async with build_worker(client, queue, activity_settings, http, mcp=toolbox):
                yield queue
    finally:
        await toolbox.aclose()


async def test_tools_whose_schemas_cannot_be_used_are_left_out_with_their_reason(
    client: Client, odd_queue: str, model: ScriptedModelServer
):
    trigger = script(
        model, unique("odd-schemas"),
        ScriptedReply(tool_calls=[tool_call("odd__dangling", {"text": "a"}),
                                  tool_call("odd__remote", {"text": "b"}),
                                  tool_call("odd__fine", {"text": "c"})]),
        ScriptedReply(content="done"),
    )
    handle = await start(client, odd_queue, trigger,
                         approval={"auto_approve": ["odd__dangling", "odd__remote", "odd__fine"]})
    status = await settled(handle, timeout_s=60)
    assert status.final_answer == "done"
    dangling, remote, fine = [m.content for m in await tool_messages(handle)]
    assert dangling.startswith("Error: unknown tool 'odd__dangling'")
    assert remote.startswith("Error: unknown tool 'odd__remote'")
    assert fine == "c"
    for name in ("dangling", "remote", "invalid"):
        assert f"tool {name} left out, its input schema cannot be used" in status.error


async def test_model_output_past_the_parsers_limits_is_an_observation(
    client: Client, task_queue: str, model: ScriptedModelServer
):
    trigger = script(
        model, unique("odd-output"),
        ScriptedReply(content=DEEP_ARGS),
        ScriptedReply(tool_calls=[ScriptedToolCall(name="get_weather", arguments=DEEP_ARGS),
                                  ScriptedToolCall(name="get_weather", arguments=HUGE_NUMBER)]),
        ScriptedReply(content="recovered"),
    )
    handle = await start(client, task_queue, trigger)
    first = await settled(handle)
    assert (first.final_answer, first.stop_reason) == (DEEP_ARGS, "answered")
    await handle.signal(ConversationWorkflow.say, SayRequest(text="and the weather?"))
    second = await settled(handle, turn=2)
    assert second.final_answer == "recovered"
    deep, huge = [m.content for m in await tool_messages(handle)]
    assert "maximum recursion depth" in deep and "Exceeds the limit (4300 digits)" in huge


async def test_malformed_signal_and_update_payloads_leave_the_conversation_working(
    client: Client, task_queue: str, model: ScriptedModelServer
):
    trigger = script(
        model, unique("odd-payloads"),
        ScriptedReply(tool_calls=[tool_call("create_note", {"title": "t", "body": "b"})]),
        ScriptedReply(content="{last_tool}"),
    )
    handle = await start(client, task_queue, trigger)
    [pending] = (await reaches(handle, "waiting_for_confirmation")).pending_confirmations
    await handle.signal("confirm", {"call_ids": 5, "request_id": "wrong-types"})
    await handle.signal("say", ["not", "an", "object"])
    with pytest.raises(WorkflowUpdateFailedError):
        await handle.execute_update("decide_confirm", {"call_ids": {"a": 1}}, result_type=dict)
    with pytest.raises(WorkflowUpdateFailedError):
        await handle.execute_update("decide_confirm", ConfirmRequest(
            call_ids=[pending.call_id], args={"title": "t", "body": 5}))
    assert (await handle.query(ConversationWorkflow.status)).status == "waiting_for_confirmation"
    await handle.signal(ConversationWorkflow.confirm,
                        ConfirmRequest(call_ids=[pending.call_id], request_id="fine"))
    assert (await outcome_of(handle, "fine")).accepted
    status = await settled(handle)
    assert status.final_answer.startswith("Created note #")
