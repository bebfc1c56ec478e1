"""A conversation end to end through a real dev server, the scripted model and a worker."""

from __future__ import annotations

from collections import OrderedDict

import httpx
import pytest
from temporalio.client import Client

from durable_react_agent.activities.settings import ActivitySettings
from durable_react_agent.activities.tools import ToolContext, ToolError, weather
from durable_react_agent.activities.tools.weather import get_weather
from durable_react_agent.contract import EndRequest, SayRequest
from durable_react_agent.testing import ScriptedModelServer, ScriptedReply
from durable_react_agent.workflows.conversation import ConversationWorkflow
from tests.conftest import SECRET_KEY
from tests.helpers import (
    replay,
    script,
    settled,
    start,
    tool_call,
    unique,
)


async def test_weather_turn_uses_the_observation_and_reports_status(
    client: Client, task_queue: str, model: ScriptedModelServer
):
    trigger = script(
        model, unique("weather"),
        ScriptedReply(content="Let me look.", tool_calls=[tool_call("get_weather", {"location": "Paris"})]),
        ScriptedReply(content="Answer: {last_tool}"),
    )
    forecasts_before = model.forecast_calls
    handle = await start(client, task_queue, f"{trigger}: what is the weather in Paris?")
    status = await settled(handle)

    assert status.status == "idle"
    assert status.stop_reason == "answered"
    assert (status.turn, status.steps, status.llm_calls) == (1, 2, 2)
    assert status.tools_used == ["get_weather"]
    assert status.final_answer.startswith("Answer: Paris, France: ")
    assert "°C" in status.final_answer and "humidity" in status.final_answer
    assert status.usage.total_tokens == status.usage.prompt_tokens + status.usage.completion_tokens > 0
    assert status.error is None and status.pending_confirmations == [] and status.pending_question is None
    assert model.forecast_calls == forecasts_before + 1

    history = (await handle.fetch_history()).to_json()
    assert SECRET_KEY not in history and model.base_url not in history

    messages = await handle.query(ConversationWorkflow.messages)
    assert [m.role for m in messages] == ["system", "user", "assistant", "tool", "assistant"]
    assert messages[3].tool_call_id == messages[2].tool_calls[0].id
    assert messages[3].content in status.final_answer


async def test_multi_turn_then_end(client: Client, task_queue: str, model: ScriptedModelServer):
    trigger = script(
        model, unique("chat"),
        ScriptedReply(content="Hello! Ask me about the weather."),
        ScriptedReply(tool_calls=[tool_call("get_weather", {"location": "Tokyo"})]),
        ScriptedReply(content="In Tokyo: {last_tool}"),
    )
    handle = await start(client, task_queue, f"{trigger}: hi")
    first = await settled(handle)
    assert (first.status, first.final_answer) == ("idle", "Hello! Ask me about the weather.")

    await handle.signal(ConversationWorkflow.say, SayRequest(text="And in Tokyo?", request_id="r1"))
    second = await settled(handle, turn=2)
    assert second.turn == 2 and second.steps == 2 and second.llm_calls == 3
    assert second.final_answer.startswith("In Tokyo: Tokyo, Japan")
    outcome = await handle.query(ConversationWorkflow.signal_outcome, "r1")
    assert outcome.accepted and outcome.turn == 2

    await handle.signal(ConversationWorkflow.end, EndRequest(request_id="r2"))
    result = await handle.result()
    assert result.status == "completed" and result.stop_reason == "ended"


async def test_one_shot_completes_after_its_answer(
    client: Client, task_queue: str, model: ScriptedModelServer
):
    trigger = script(model, unique("oneshot"), ScriptedReply(content="Done."))
    handle = await start(client, task_queue, f"{trigger}", one_shot=True)
    result = await handle.result()
    assert (result.status, result.stop_reason, result.final_answer) == ("completed", "answered", "Done.")


async def test_bad_tool_calls_become_observations_and_the_model_recovers(
    client: Client, task_queue: str, model: ScriptedModelServer
):
    trigger = script(
        model, unique("badcalls"),
        ScriptedReply(tool_calls=[
            tool_call("get_wether", {"location": "Paris"}),
            tool_call("get_weather", '{"location": "Par'),
            tool_call("get_weather", {"city": "Paris"}),
        ]),
        ScriptedReply(tool_calls=[tool_call("get_weather", {"location": "Paris"})]),
        ScriptedReply(content="Recovered: {last_tool}"),
    )
    forecasts_before = model.forecast_calls
    handle = await start(client, task_queue, f"{trigger}: weather in Paris")
    status = await settled(handle)
    assert status.stop_reason == "answered"
    assert status.final_answer.startswith("Recovered: Paris, France")
    assert model.forecast_calls == forecasts_before + 1  # only the corrected call ran

    tool_messages = [m for m in await handle.query(ConversationWorkflow.messages) if m.role == "tool"]
    assert [m.tool_call_id for m in tool_messages[:3]] == ["call_0_0", "call_0_1", "call_0_2"]
    assert tool_messages[0].content.startswith("Error: unknown tool 'get_wether'")
    assert "not valid JSON" in tool_messages[1].content
    assert "'location' is a required property" in tool_messages[2].content


async def test_unknown_city_is_a_clear_observation(
    client: Client, task_queue: str, model: ScriptedModelServer
):
    trigger = script(
        model, unique("nocity"),
        ScriptedReply(tool_calls=[tool_call("get_weather", {"location": "Atlantis"})]),
        ScriptedReply(content="Sorry: {last_tool}"),
    )
    status = await settled(await start(client, task_queue, f"{trigger}"))
    assert "no place named 'Atlantis' was found" in status.final_answer


async def test_rejected_llm_request_ends_the_turn_and_the_conversation_stays_usable(
    client: Client, task_queue: str, model: ScriptedModelServer
):
    trigger = script(
        model, unique("unauthorized"),
        ScriptedReply(content="never seen", errors=[401]),
    )
    handle = await start(client, task_queue, f"{trigger}")
    status = await settled(handle)
    assert status.status == "idle" and status.stop_reason == "llm_error"
    assert "401" in status.error and "OPENAI_API_KEY" in status.error
    assert model.count(trigger, step=0) == 1  # not retried

    # The next message gets a new request (it has one more user message), which succeeds.
    await handle.signal(ConversationWorkflow.say, SayRequest(text="try again"))
    second = await settled(handle, turn=2)
    assert second.stop_reason == "answered" and second.error is None
    assert second.final_answer == "never seen"


async def test_rate_limited_llm_call_is_retried_then_succeeds(
    client: Client, task_queue: str, model: ScriptedModelServer
):
    trigger = script(model, unique("ratelimited"), ScriptedReply(content="after a pause", errors=[429]))
    status = await settled(await start(client, task_queue, f"{trigger}"))
    assert (status.stop_reason, status.final_answer, status.error) == ("answered", "after a pause", None)
    assert model.count(trigger, step=0) == 2


async def test_one_shot_llm_error_completes_with_that_reason(
    client: Client, task_queue: str, model: ScriptedModelServer
):
    trigger = script(model, unique("oneshot401"), ScriptedReply(content="x", errors=[403]))
    result = await (await start(client, task_queue, f"{trigger}", one_shot=True)).result()
    assert (result.status, result.stop_reason) == ("completed", "llm_error")


async def test_max_steps_forces_a_final_answer_without_tools(
    client: Client, task_queue: str, model: ScriptedModelServer
):
    trigger = script(
        model, unique("maxsteps"),
        ScriptedReply(tool_calls=[tool_call("get_weather", {"location": "Paris"})]),
        ScriptedReply(tool_calls=[tool_call("get_weather", {"location": "Rome"})]),
        ScriptedReply(content="Best effort."),
    )
    status = await settled(await start(client, task_queue, f"{trigger}", max_steps=3))
    assert (status.steps, status.stop_reason, status.final_answer) == (3, "max_steps", "Best effort.")
    last_request = [r for r in model.requests if r.trigger == trigger][-1]
    assert last_request.body["tool_choice"] == "none"


async def test_finished_conversation_replays_deterministically(
    client: Client, task_queue: str, model: ScriptedModelServer
):
    trigger = script(
        model, unique("replay"),
        ScriptedReply(tool_calls=[
            tool_call("get_weather", {"location": "Paris"}),
            tool_call("nope", {}),
        ]),
        ScriptedReply(content="Paris: {last_tool}"),
        ScriptedReply(content="bye"),
    )
    handle = await start(client, task_queue, f"{trigger}")
    await settled(handle)
    await handle.signal(ConversationWorkflow.say, SayRequest(text="thanks"))
    await settled(handle, turn=2)
    await handle.signal(ConversationWorkflow.end, EndRequest())
    await handle.result()
    await replay(handle, record_as="weather_invalid_call_two_turns")


async def test_get_weather_finds_a_place_once_per_worker(model: ScriptedModelServer):
    """Places do not move: a city asked for again (in any case) costs the forecast alone; a name
    not found is asked again next time (the service may know it by then)."""
    settings = ActivitySettings(geocoding_url=model.geocoding_url, forecast_url=model.forecast_url)
    city, weather._PLACES = "Berlin", OrderedDict()  # as a worker just started
    async with httpx.AsyncClient() as http:
        ctx = ToolContext(settings=settings, http=http, call_id="c", idempotency_key="k")
        geocoded, forecasts = model.geocoding_calls, model.forecast_calls
        for name in (city, city.upper(), f" {city} "):
            assert (await get_weather.function(name, ctx)).startswith("Berlin, Germany")
        assert (model.geocoding_calls - geocoded, model.forecast_calls - forecasts) == (1, 3)
        for _ in range(2):
            with pytest.raises(ToolError, match="no place named"):
                await get_weather.function("Atlantis", ctx)
        assert model.geocoding_calls - geocoded == 3
