"""The scripted model server, exercised through the real `openai` client and httpx."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import openai
import pytest

from durable_react_agent.testing import (
    Scenario,
    Script,
    ScriptedModelServer,
    ScriptedReply,
    ScriptedToolCall,
    select_reply,
)
from durable_react_agent.testing.intents import HELP
from tests.devserver import free_port

REPO_ROOT = Path(__file__).resolve().parents[2]

WEATHER_SCRIPT = Script(
    scenarios=[
        Scenario(
            trigger="weather",
            replies=[
                ScriptedReply(tool_calls=[ScriptedToolCall(name="get_weather", arguments={"location": "Paris"})]),
                ScriptedReply(content='Found: {last_tool} for "{first_user}" {"json": true}'),
            ],
        ),
        Scenario(trigger="flaky", replies=[ScriptedReply(content="made it", errors=[429])]),
        Scenario(trigger="locked", replies=[ScriptedReply(content="nope", errors=[401])]),
        Scenario(trigger="slow", replies=[ScriptedReply(content="released", hold=True)]),
        Scenario(
            trigger="broken",
            replies=[ScriptedReply(tool_calls=[ScriptedToolCall(name="get_weather", arguments='{"location": ')])],
        ),
    ]
)

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"location": {"type": "string"}}},
        },
    }
]


@pytest.fixture
def server():
    with ScriptedModelServer(WEATHER_SCRIPT) as srv:
        yield srv


@pytest.fixture
def client(server):
    with openai.OpenAI(base_url=server.base_url, api_key="x", max_retries=0) as c:
        yield c


def ask(client, messages, **kwargs):
    return client.chat.completions.create(model="gpt-test", messages=messages, tools=TOOLS, **kwargs)


def weather_turn_two():
    return [
        {"role": "user", "content": "What is the weather in Paris?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "call_0_0", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "call_0_0", "content": "12.5 C"},
    ]


def test_tool_call_then_templated_answer(server, client):
    first = ask(client, [{"role": "user", "content": "What is the weather in Paris?"}])
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert first.model == "gpt-test"
    (call,) = choice.message.tool_calls
    assert call.id == "call_0_0"
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"location": "Paris"}
    assert first.usage.total_tokens == first.usage.prompt_tokens + first.usage.completion_tokens

    second = ask(client, weather_turn_two())
    assert second.choices[0].finish_reason == "stop"
    assert second.choices[0].message.tool_calls is None
    assert second.choices[0].message.content == (
        'Found: 12.5 C for "What is the weather in Paris?" {"json": true}'
    )
    assert [(r.trigger, r.step) for r in server.requests] == [("weather", 0), ("weather", 1)]
    assert server.count(trigger="weather") == 2
    assert server.count(step=1) == 1


def test_streaming_matches_non_streaming(server, client):
    messages = [{"role": "user", "content": "weather please"}]
    stream = ask(client, messages, stream=True, stream_options={"include_usage": True})
    calls: dict[int, dict] = {}
    finish, usage_chunks = None, []
    for chunk in stream:
        if chunk.usage is not None:
            usage_chunks.append(chunk.usage)
        for choice in chunk.choices:
            finish = choice.finish_reason or finish
            for tc in choice.delta.tool_calls or []:
                slot = calls.setdefault(tc.index, {"id": None, "name": "", "arguments": ""})
                slot["id"] = tc.id or slot["id"]
                slot["name"] += (tc.function.name or "") if tc.function else ""
                slot["arguments"] += (tc.function.arguments or "") if tc.function else ""
    assert finish == "tool_calls"
    assert calls == {0: {"id": "call_0_0", "name": "get_weather", "arguments": '{"location": "Paris"}'}}
    plain = ask(client, messages)
    (streamed_usage,) = usage_chunks
    assert (streamed_usage.prompt_tokens, streamed_usage.completion_tokens, streamed_usage.total_tokens) == (
        plain.usage.prompt_tokens,
        plain.usage.completion_tokens,
        plain.usage.total_tokens,
    )

    text = "".join(
        c.choices[0].delta.content or ""
        for c in ask(client, weather_turn_two(), stream=True)
        if c.choices
    )
    assert text == ask(client, weather_turn_two()).choices[0].message.content


def test_same_messages_same_reply(client):
    messages = weather_turn_two()
    first, second = ask(client, messages), ask(client, messages)
    assert first.model_dump() == second.model_dump()


def test_rate_limit_then_success(server, client):
    messages = [{"role": "user", "content": "a flaky request"}]
    with pytest.raises(openai.RateLimitError):
        ask(client, messages)
    assert ask(client, messages).choices[0].message.content == "made it"
    assert server.count(trigger="flaky", step=0) == 2


def test_authentication_error(client):
    with pytest.raises(openai.AuthenticationError):
        ask(client, [{"role": "user", "content": "locked out"}])


def test_hold_blocks_until_release(server, client):
    result: dict = {}
    worker = threading.Thread(
        target=lambda: result.update(reply=ask(client, [{"role": "user", "content": "slow one"}]))
    )
    worker.start()
    assert server.wait_for_request("slow", 0, timeout=5)
    worker.join(timeout=0.3)
    assert worker.is_alive() and not result
    server.release()
    worker.join(timeout=5)
    assert result["reply"].choices[0].message.content == "released"


def test_unscripted_prompt_gets_the_intent_reader(server, client):
    reply = ask(client, [{"role": "system", "content": "sys"}, {"role": "user", "content": "tell a joke"}])
    assert reply.choices[0].message.content == HELP
    assert reply.choices[0].finish_reason == "stop"
    assert server.requests[0].trigger is None


def test_invalid_json_arguments_pass_through(client):
    reply = ask(client, [{"role": "user", "content": "broken args"}])
    assert reply.choices[0].message.tool_calls[0].function.arguments == '{"location": '


def test_select_reply_parts_and_exhaustion():
    messages = [{"role": "user", "content": [{"type": "text", "text": "the weather"}]}]
    assert select_reply(WEATHER_SCRIPT, messages).trigger == "weather"
    exhausted = messages + [{"role": "assistant", "content": "x"}] * 2
    selection = select_reply(WEATHER_SCRIPT, exhausted)
    assert selection.step == 2
    assert "exhausted at step 2" in selection.reply.content


def test_set_script_and_models_endpoint(server, client):
    server.set_script(Script(scenarios=[Scenario(trigger="joke", replies=[ScriptedReply(content="ha")])]))
    assert ask(client, [{"role": "user", "content": "a joke"}]).choices[0].message.content == "ha"
    assert [m.id for m in client.models.list()] == ["scripted"]
    assert httpx.get(f"{server.base_url}/nowhere").status_code == 404


def test_fake_open_meteo(server):
    found = httpx.get(server.geocoding_url, params={"name": "paris", "count": 1}).json()
    (city,) = found["results"]
    assert city["name"] == "Paris" and city["country"] == "France"
    assert "results" not in httpx.get(server.geocoding_url, params={"name": "Atlantis"}).json()

    params = {"latitude": city["latitude"], "longitude": city["longitude"], "current": "temperature_2m"}
    forecast = httpx.get(server.forecast_url, params=params).json()
    assert forecast == httpx.get(server.forecast_url, params=params).json()
    assert forecast["current_units"]["temperature_2m"] == "°C"
    assert isinstance(forecast["current"]["temperature_2m"], float)
    assert isinstance(forecast["current"]["relative_humidity_2m"], int)

    bad = httpx.get(server.forecast_url, params={"latitude": "north", "longitude": 2})
    assert bad.status_code == 400 and bad.json()["error"] is True
    assert httpx.get(server.forecast_url, params={"longitude": 2}).status_code == 400
    assert (server.geocoding_calls, server.forecast_calls) == (2, 4)


def test_cli_serves_the_intent_reader():
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "durable_react_agent.testing", "--port", str(port)],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        line = proc.stdout.readline().strip()
        assert line == f"scripted model listening on http://127.0.0.1:{port}/v1"
        with openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="x", max_retries=0) as c:
            reply = ask(c, [{"role": "user", "content": "weather in Tokyo?"}])
        (call,) = reply.choices[0].message.tool_calls
        assert (call.function.name, json.loads(call.function.arguments)) == (
            "get_weather", {"location": "Tokyo"})
    finally:
        proc.terminate()
        assert proc.wait(timeout=5) == 0
