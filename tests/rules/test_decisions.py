"""Unit tests of the pure decision functions: no server, no I/O."""

from __future__ import annotations

import json

from durable_react_agent.activities.tools import default_registry
from durable_react_agent.contract import ChatMessage, FunctionCall, ToolCall, ToolDefinition
from durable_react_agent.rules import loop

CATALOG = {t.name: t for t in default_registry().definitions()}


def call(name: str, arguments: str, call_id: str = "call_1") -> ToolCall:
    return ToolCall(id=call_id, function=FunctionCall(name=name, arguments=arguments))


def reply(content: str | None = None, calls: list[ToolCall] | None = None) -> ChatMessage:
    return ChatMessage(role="assistant", content=content, tool_calls=calls)


def test_valid_call_is_ready_with_parsed_arguments():
    result = loop.check_tool_call(call("get_weather", '{"location": "Paris"}'), CATALOG)
    assert isinstance(result, loop.ReadyCall)
    assert result.arguments == {"location": "Paris"}
    assert result.tool.name == "get_weather"


def test_empty_arguments_are_an_empty_object_and_then_a_schema_violation():
    result = loop.check_tool_call(call("get_weather", ""), CATALOG)
    assert isinstance(result, loop.InvalidCall)
    assert "'location' is a required property" in result.observation


def test_unknown_tool_names_the_available_ones():
    result = loop.check_tool_call(call("get_wether", "{}"), CATALOG)
    assert isinstance(result, loop.InvalidCall)
    assert result.observation.startswith("Error: unknown tool 'get_wether'")
    assert "get_weather" in result.observation


def test_invalid_json_is_explained_and_echoed():
    result = loop.check_tool_call(call("get_weather", '{"location": "Par'), CATALOG)
    assert isinstance(result, loop.InvalidCall)
    assert "not valid JSON" in result.observation
    assert '{"location": "Par' in result.observation


def test_schema_violation_gives_the_schema():
    result = loop.check_tool_call(call("get_weather", '{"city": "Paris"}'), CATALOG)
    assert isinstance(result, loop.InvalidCall)
    assert "'location' is a required property" in result.observation
    assert json.dumps(CATALOG["get_weather"].parameters, separators=(",", ":")) in result.observation


def test_wrong_type_and_non_object_arguments():
    wrong_type = loop.check_tool_call(call("get_weather", '{"location": 5}'), CATALOG)
    assert isinstance(wrong_type, loop.InvalidCall)
    assert "location: 5 is not of type 'string'" in wrong_type.observation
    array = loop.check_tool_call(call("get_weather", '["Paris"]'), CATALOG)
    assert isinstance(array, loop.InvalidCall)
    assert "must be a JSON object" in array.observation


def test_tools_are_offered_on_all_steps_but_the_last():
    assert loop.tools_offered(1, 3)
    assert loop.tools_offered(2, 3)
    assert not loop.tools_offered(3, 3)
    assert not loop.tools_offered(1, 1)


def test_reply_with_tool_calls_runs_them():
    calls = [call("get_weather", '{"location": "Paris"}')]
    assert loop.next_move(reply(None, calls), offered_tools=True) == loop.RunTools(calls)


def test_reply_without_tool_calls_is_the_answer():
    decision = loop.next_move(reply("It is sunny."), offered_tools=True)
    assert decision == loop.FinalAnswer("It is sunny.", "answered")


def test_last_step_ends_the_turn_even_if_the_model_insists_on_tools():
    calls = [call("get_weather", '{"location": "Paris"}')]
    decision = loop.next_move(reply("partial", calls), offered_tools=False)
    assert decision == loop.FinalAnswer("partial", "max_steps")


def test_a_stopping_rule_names_the_stop_reason():
    calls = [call("get_weather", '{"location": "Paris"}')]
    decision = loop.next_move(reply("enough", calls), False, "loop_detected")
    assert decision == loop.FinalAnswer("enough", "loop_detected")


def test_empty_reply_is_an_empty_answer():
    assert loop.next_move(reply(None), True) == loop.FinalAnswer("", "answered")


def test_describe_call_is_short_and_readable():
    assert loop.describe_call("get_weather", {"location": "Beijing"}) == "get_weather(location=Beijing)"
    long = loop.describe_call("t", {"text": "x" * 200}, limit=40)
    assert len(long) == 40 and long.endswith("…")


def test_failure_observation_depends_on_idempotency():
    base = dict(name="t", description="", parameters={"type": "object"})
    retried = loop.tool_failure_observation(ToolDefinition(**base), "boom", 3)
    assert retried == "Error: t failed after 3 attempt(s): boom"
    once = loop.tool_failure_observation(ToolDefinition(**base, idempotent=False), "boom", 1)
    assert "not retried" in once and "outcome is unknown" in once
