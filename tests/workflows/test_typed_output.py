"""Typed results: with an `output_schema`, the final answer is JSON that fits it (`final_output`),
after at most one corrective turn that tells the model exactly what was wrong; else the turn ends
as `invalid_output`. Structured output is asked of the endpoint, and dropped when it refuses."""

from __future__ import annotations

import json

import pytest

from durable_react_agent.activities.profiles import Profiles, ProfilesError
from durable_react_agent.contract import EndRequest
from durable_react_agent.rules import output
from durable_react_agent.testing import ScriptedModelServer, ScriptedReply
from durable_react_agent.workflows.conversation import ConversationWorkflow
from tests.helpers import replay, script, settled, start, unique

WEATHER = {"type": "object", "additionalProperties": False, "required": ["city", "celsius"],
           "properties": {"city": {"type": "string"}, "celsius": {"type": "number"}}}


@pytest.mark.parametrize("text, value", [
    ('{"city": "Paris", "celsius": 3.5}', {"city": "Paris", "celsius": 3.5}),
    ('```json\n{"city": "Oslo", "celsius": -2}\n```', {"city": "Oslo", "celsius": -2}),
    ('  {"city": "Rome", "celsius": 20}\n', {"city": "Rome", "celsius": 20}),
])
def test_an_answer_that_fits_is_its_value(text: str, value: dict):
    assert output.check_output(text, WEATHER) == output.Output(value)


@pytest.mark.parametrize("text, why", [
    ("It is 3 degrees in Paris.", "the answer is not JSON"),
    ('{"city": "Paris"}', "'celsius' is a required property"),
    ('{"city": "Paris", "celsius": "cold"}', "celsius: 'cold' is not of type 'number'"),
    ('{"city": "Paris", "celsius": 3, "wind": 1}', "Additional properties are not allowed"),
    ("[" * 200 + "]" * 200, "cannot be checked"),
])
def test_an_answer_that_misses_says_exactly_why(text: str, why: str):
    checked = output.check_output(text, WEATHER)
    assert isinstance(checked, str) and why in checked
    told = output.correction(checked, WEATHER)
    assert checked in told and json.dumps(WEATHER) in told


def test_an_unusable_schema_is_named():
    assert "not usable" in output.output_schema_problem({"type": "nope"})
    assert "over the limit" in output.output_schema_problem(
        {"type": "object", "description": "x" * 20_000})
    assert output.output_schema_problem(WEATHER) is None
    assert output.response_format(WEATHER)["json_schema"]["schema"] == WEATHER


async def test_a_typed_result_after_one_correction(client, task_queue, model: ScriptedModelServer):
    trigger = script(model, unique("typed"),
                     ScriptedReply(content="It is 3.5 degrees in Paris."),
                     ScriptedReply(content='{"city": "Paris", "celsius": 3.5}'))
    handle = await start(client, task_queue, trigger, output_schema=WEATHER)
    status = await settled(handle)
    assert status.stop_reason == "answered" and status.error is None
    assert status.final_output == {"city": "Paris", "celsius": 3.5}
    first, second = [r.body for r in model.requests if r.trigger == trigger]
    assert first["response_format"] == second["response_format"] == output.response_format(WEATHER)
    told = second["messages"][-1]
    assert told["role"] == "user" and "the answer is not JSON" in told["content"]
    await handle.signal(ConversationWorkflow.end, EndRequest())
    await handle.result()
    await replay(handle, "typed_output_corrected")


async def test_a_second_miss_ends_the_turn_as_invalid_output(client, task_queue,
                                                            model: ScriptedModelServer):
    trigger = script(model, unique("typed-miss"),
                     ScriptedReply(content='{"city": "Paris"}'),
                     ScriptedReply(content='{"city": "Paris", "celsius": "mild"}'),
                     ScriptedReply(content="never asked"))
    handle = await start(client, task_queue, trigger, output_schema=WEATHER)
    status = await settled(handle)
    assert status.stop_reason == "invalid_output" and status.final_output is None
    assert "celsius: 'mild' is not of type 'number'" in status.error
    assert model.count(trigger) == 2


async def test_an_endpoint_without_structured_output_is_asked_without_it(
        client, task_queue, model: ScriptedModelServer):
    trigger = script(model, unique("typed-plain"),
                     ScriptedReply(content='{"city": "Oslo", "celsius": -2}', errors=[400]))
    # A model name of its own: the worker remembers, per model, an endpoint that refused.
    handle = await start(client, task_queue, trigger, output_schema=WEATHER,
                         model=unique("plain-model"))
    status = await settled(handle)
    assert status.final_output == {"city": "Oslo", "celsius": -2}
    refused, plain = [r.body for r in model.requests if r.trigger == trigger]
    assert "response_format" in refused and "response_format" not in plain


def test_a_profile_can_ask_its_agent_for_a_typed_result(tmp_path):
    profiles = tmp_path / "profiles.json"
    profiles.write_text(json.dumps({"agents": {"forecaster": {
        "description": "Forecasts", "system_prompt": "You forecast.", "output_schema": WEATHER}}}))
    spec = Profiles.load(profiles).tool("forecaster").agent
    assert spec is not None and spec.output_schema == WEATHER
    profiles.write_text(json.dumps({"agents": {"forecaster": {
        "description": "Forecasts", "system_prompt": "You forecast.",
        "output_schema": {"type": 12}}}}))
    with pytest.raises(ProfilesError, match="output schema is not usable"):
        Profiles.load(profiles)


