"""No data from outside fails a workflow task: tool schemas, model output, signal and update
payloads each become an observation, a refusal, or a tool left out with its reason."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
import pytest_asyncio
from temporalio.client import Client, WorkflowUpdateFailedError

from durable_react_agent.activities.mcp import McpToolbox, load_mcp_config
from durable_react_agent.activities.mcp.patterns import BoundedSearch
from durable_react_agent.activities.settings import ActivitySettings
from durable_react_agent.contract import (
    ChatMessage,
    ConfirmRequest,
    FunctionCall,
    SayRequest,
    ToolCall,
    ToolDefinition,
)
from durable_react_agent.rules.gate import PendingCall, Refusal, check_edited_args
from durable_react_agent.rules.loop import InvalidCall, check_tool_call
from durable_react_agent.rules.repair import recover_tool_calls
from durable_react_agent.rules.schemas import argument_problem, schema_problem
from durable_react_agent.testing import ScriptedModelServer, ScriptedReply, ScriptedToolCall
from durable_react_agent.worker.app import build_worker
from durable_react_agent.workflows.conversation import ConversationWorkflow
from tests.helpers import (
    outcome_of,
    reaches,
    script,
    settled,
    start,
    tool_call,
    tool_messages,
    unique,
)
from tests.hostile_input import EVIL

ROOT = Path(__file__).resolve().parents[2]
SERVERS = Path(__file__).parents[1] / "mcp_servers"
DANGLING = {"type": "object", "properties": {"text": {"$ref": "#/$defs/Missing"}}}
REMOTE = {"type": "object", "properties": {"text": {"$ref": "http://127.0.0.1:9/s.json"}}}
DEEP_ARGS = "[" * 5000 + "]" * 5000
HUGE_NUMBER = '{"location": 1' + "0" * 5000 + "}"
CATASTROPHIC = "^(a+)+$"  # a backtracking matcher tries 2**40 ways to fail on EVIL
DRAFT_7 = "http://json-schema.org/draft-07/schema#"
# A match in Python's `re` holds the GIL: no thread of this process could stop it, or time it.
CHECK_APART = """
import json, sys, time
from durable_react_agent.rules.schemas import argument_problem
for schema, arguments in json.loads(sys.argv[1]):
    started = time.process_time()  # its own CPU: a loaded machine's other processes not counted
    problem = argument_problem(schema, arguments)
    print(json.dumps([problem, time.process_time() - started]), flush=True)
"""


def checked_apart(cases: list[tuple[dict, dict]], timeout_s: float = 60) -> list[tuple[str | None, float]]:
    """`argument_problem` of each case, with its seconds, from a fresh interpreter killed after
    `timeout_s`."""
    try:
        done = subprocess.run([sys.executable, "-c", CHECK_APART, json.dumps(cases)], cwd=ROOT,
                              capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"still matching after {timeout_s} s, having answered: {exc.stdout!r}")
    assert done.returncode == 0, done.stderr
    return [tuple(json.loads(line)) for line in done.stdout.splitlines()]


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


def test_a_catastrophic_pattern_is_a_prompt_problem_in_every_keyword_that_matches_one():
    text = {"properties": {"text": {"type": "string", "pattern": CATASTROPHIC}}}
    cases = [
        (text, {"text": EVIL}),
        ({"patternProperties": {CATASTROPHIC: {"type": "integer"}}, "additionalProperties": False},
         {EVIL: 1}),
        ({"propertyNames": {"pattern": CATASTROPHIC}}, {EVIL: 1}),
        # a `$schema` would have jsonschema swap in its stock validator, which matches with `re`
        ({"$schema": DRAFT_7, "properties": {"next": {"$ref": "#"}, **text["properties"]}},
         {"next": {"text": EVIL}}),
        ({"properties": {"text": {"$schema": DRAFT_7, "pattern": CATASTROPHIC}}}, {"text": EVIL}),
        ({"patternProperties": {CATASTROPHIC: {}}, "unevaluatedProperties": False}, {EVIL: 1}),
    ]
    answers = checked_apart(cases)
    assert len(answers) == len(cases) and all(seconds < 2 for _, seconds in answers)
    problems = [problem for problem, _ in answers]
    assert problems[:5] == [
        f"text: {EVIL!r} does not match {CATASTROPHIC!r}",
        f"{EVIL!r} does not match any of the regexes: {CATASTROPHIC!r}",
        f"{EVIL!r} does not match {CATASTROPHIC!r}",
        f"next.text: {EVIL!r} does not match {CATASTROPHIC!r}",
        f"text: {EVIL!r} does not match {CATASTROPHIC!r}",
    ]
    assert problems[5] is None  # unevaluatedProperties beside patternProperties: left to the server


def test_patterns_still_validate_as_before():
    schema = {"type": "object", "properties": {"code": {"type": "string", "pattern": r"^[A-Z]{3}-\d+$"}},
              "patternProperties": {"^x-": {"type": "integer"}}, "additionalProperties": False}
    assert argument_problem(schema, {"code": "ABC-12", "x-limit": 3}) is None
    assert argument_problem(schema, {"code": "abc-12"}) == r"code: 'abc-12' does not match '^[A-Z]{3}-\\d+$'"
    assert argument_problem(schema, {"x-limit": "3"}) == "x-limit: '3' is not of type 'integer'"
    assert argument_problem(schema, {"y": 1, "z": 2}) == "'y', 'z' do not match any of the regexes: '^x-'"
    assert argument_problem({"additionalProperties": False, "properties": {"a": {}}}, {"b": 1}) == (
        "Additional properties are not allowed ('b' was unexpected)")


def test_patterns_re2_cannot_run_are_left_to_the_worker_which_bounds_them():
    schema = {"properties": {"a": {"pattern": "(?=x)x"}, "b": {"pattern": r"(a)\1"}},
              "patternProperties": {"(?<=y)z": {"type": "integer"}}}
    arguments = {"a": "y", "b": "ab", "yz": "s"}
    assert argument_problem(schema, arguments) is None  # not checked in the workflow, nor raised
    assert argument_problem(schema, arguments, BoundedSearch()) == (
        r"a: 'y' does not match '(?=x)x'; b: 'ab' does not match '(a)\\1'; "
        "yz: 's' is not of type 'integer'")
    assert argument_problem(schema, {"a": "x", "b": "aa", "yz": 1}, BoundedSearch()) is None
    slow = {"properties": {"a": {"pattern": "^(?=a)(a|a)+$"}}}
    assert argument_problem(slow, {"a": EVIL}, BoundedSearch(0.2)) == (
        "the arguments cannot be checked: matching the pattern '^(?=a)(a|a)+$' took over 0.2 s")


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
    for name in ("confirm", "reject", "answer", "say", "child_status", "routed_decision",
                 "decision_reply", "a2a_push_targets"):
        await handle.signal(name)  # no request at all
    # push targets past their bound, and of the wrong shape
    await handle.signal("a2a_push_targets", {"targets": [
        {"index": -1, "host": "h", "events": ["turn_finished"], "push": f"p{n}"} for n in range(9)]})
    await handle.signal("a2a_push_targets", {"targets": "all of them"})
    # a decision's part routed from no ancestor, one with two parts, a reply nobody awaits
    await handle.signal("routed_decision", {"reply_to": "elsewhere", "confirm": {
        "call_ids": ["nope"], "request_id": "routed"}})
    await handle.signal("routed_decision", {"reply_to": handle.id, "confirm": {
        "call_ids": [pending.call_id]}, "reject": {"call_ids": [pending.call_id]}})
    await handle.signal("routed_decision", {"reply_to": 5})
    await handle.signal("decision_reply", {"request_id": "nobody waits", "accepted": True})
    await handle.signal("decision_reply", {"accepted": "maybe"})
    for decide in ({}, {"confirm": "all"}, {"confirm": [{"call_ids": ["nope"]}]}):
        with pytest.raises(WorkflowUpdateFailedError):
            await handle.execute_update("decide", decide, result_type=dict)
    await handle.signal("confirm", args=[{"call_ids": [pending.call_id]}, "one too many"])
    await handle.signal("end", args=[{}, {}])
    with pytest.raises(WorkflowUpdateFailedError):
        await handle.execute_update("decide_confirm", {"call_ids": {"a": 1}}, result_type=dict)
    with pytest.raises(WorkflowUpdateFailedError):
        await handle.execute_update("decide_confirm", ConfirmRequest(
            call_ids=[pending.call_id], args={"title": "t", "body": 5}))
    assert (await handle.query(ConversationWorkflow.status)).status == "waiting_for_confirmation"
    assert not (await outcome_of(handle, "routed")).accepted  # taken as a confirm would be
    await handle.signal(ConversationWorkflow.confirm,
                        ConfirmRequest(call_ids=[pending.call_id], request_id="fine"))
    assert (await outcome_of(handle, "fine")).accepted
    status = await settled(handle)
    assert status.final_answer.startswith("Created note #")
    history = await handle.fetch_history()  # no push target was taken: nothing was delivered
    assert "notify" not in {e.activity_task_scheduled_event_attributes.activity_type.name
                            for e in history.events}


