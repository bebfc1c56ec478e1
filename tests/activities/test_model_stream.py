"""A streamed model reply as the worker reads it: server-sent events read as the JSON they are
(`activities.llm_stream`), the text relayed to the live stream only when the reply takes longer
than a batch (`activities.llm.TokenRelay`), and connections the endpoint keeps alive reused."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any

import httpx
import openai
import pytest

from durable_react_agent.activities.llm import TOKEN_BATCH, TokenRelay
from durable_react_agent.activities.llm_stream import (
    ReplyAssembler,
    chunks,
    counted,
    stream_completion,
)
from durable_react_agent.contract import StreamEvent
from durable_react_agent.testing import (
    Scenario,
    Script,
    ScriptedModelServer,
    ScriptedReply,
    ScriptedToolCall,
)


class Lines:
    """A streaming response whose body is these lines, then maybe a transport failure."""

    http_request = httpx.Request("POST", "http://endpoint.test/v1/chat/completions")

    def __init__(self, *lines: str, fail: Exception | None = None) -> None:
        self._lines, self._fail = lines, fail
        self.read = 0

    async def iter_lines(self) -> AsyncIterator[str]:
        for line in self._lines:
            self.read += 1
            yield line
        if self._fail is not None:
            raise self._fail


async def read(response: Lines) -> list[Any]:
    return [chunk async for chunk in chunks(response)]


async def test_events_are_read_as_the_sse_format_writes_them():
    response = Lines(
        ": a comment", "event: message", "id: 7", 'data: {"a":', "data: 1}", "",
        'data:{"b": 2}', "", "retry: 100", "",  # a field with no data is no event
        "data: [DONE]", "", 'data: {"after": "done"}', "")
    assert await read(response) == [{"a": 1}, {"b": 2}]
    assert response.read == 14, "the body after [DONE] is read too, so the connection is reused"


async def test_an_error_in_the_stream_raises_the_sdks_api_error():
    with pytest.raises(openai.APIError) as raised:
        await read(Lines('data: {"choices": []}', "",
                         'data: {"error": {"message": "failed to parse input at pos 12"}}', ""))
    assert raised.value.message == "failed to parse input at pos 12"
    assert raised.value.body == {"message": "failed to parse input at pos 12"}
    with pytest.raises(openai.APIError, match="An error occurred during streaming"):
        await read(Lines('data: {"error": "boom"}', ""))


async def test_a_connection_cut_mid_stream_is_the_sdks_connection_error():
    with pytest.raises(openai.APIConnectionError, match="the stream was cut"):
        await read(Lines('data: {"choices": []}', "", fail=ConnectionResetError("reset")))
    with pytest.raises(ValueError):  # not JSON: as the SDK, a failure the retries see
        await read(Lines("data: {not json", ""))


def chunk(delta: dict[str, Any] | None = None, finish: str | None = None, **fields: Any
          ) -> dict[str, Any]:
    return {"model": "m", "choices": [{"index": 0, "delta": delta or {}, "finish_reason": finish}],
            **fields}


def test_the_assembler_reads_what_endpoints_write():
    reply = ReplyAssembler("asked")
    for part in (
        chunk({"content": "Let me "}), chunk({"content": ["not", "text"]}),  # left out
        chunk({"content": "look."}),
        chunk({"tool_calls": [{"id": "c1", "function": {"name": "get_", "arguments": ""}}]}),
        chunk({"tool_calls": [{"function": {"name": "weather",
                                            "arguments": {"location": "Paris"}}}]}),  # an object
        chunk({"tool_calls": [{"index": 1, "id": "c2", "function": {"name": "list_notes",
                                                                     "arguments": "{}"}}]}),
        chunk(finish="tool_calls"), {"choices": [], "usage": {
            "prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 0,
            "prompt_tokens_details": {"cached_tokens": 4}}},
        "not an object", {"choices": "nor these"},
    ):
        reply.add(part)
    result = reply.result()
    assert result.message.content == "Let me look."
    calls = [(c.id, c.function.name, json.loads(c.function.arguments))
             for c in result.message.tool_calls]
    assert calls == [("c2", "list_notes", {}), ("c1", "get_weather", {"location": "Paris"})]
    assert (result.usage.prompt_tokens, result.usage.total_tokens,
            result.usage.cached_tokens) == (10, 15, 4)
    assert (result.model, result.finish_reason) == ("m", "tool_calls")


class Topic:
    def __init__(self) -> None:
        self.published: list[StreamEvent] = []

    def publish(self, event: StreamEvent) -> None:
        self.published.append(event)


async def test_a_reply_that_comes_whole_in_its_first_batch_is_not_sent():
    topic = Topic()
    relay = TokenRelay(topic, turn=1, step=2, attempt=1)
    relay.text("Hello ")
    relay.text("there")
    relay.close()
    await asyncio.sleep(TOKEN_BATCH.total_seconds() * 1.5)
    assert not relay.live and topic.published == []


async def test_a_reply_past_its_first_batch_streams_what_it_held_then_as_it_comes():
    topic = Topic()
    relay = TokenRelay(topic, turn=1, step=2, attempt=1)
    relay.text("x" * 1500)
    await asyncio.sleep(TOKEN_BATCH.total_seconds() * 1.5)
    relay.text("more")
    relay.close()
    assert relay.live
    assert [(e.kind, len(e.text or "")) for e in topic.published] == [
        ("token", 1024), ("token", 476), ("token", 4)]  # stream items stay small
    assert {(e.turn, e.step, e.attempt) for e in topic.published} == {(1, 2, 1)}


def streamed(monkeypatch, tokens_per_s: float, seconds: float) -> tuple[int, str, str]:
    """A model's reply of `seconds` at its pace, through a relay on a clock of the test's own:
    the batches it sent (each a signal to the workflow), what they held, and the reply."""
    loop = asyncio.get_event_loop()
    clock = [loop.time()]
    monkeypatch.setattr(loop, "time", lambda: clock[0])
    timers: list[list] = []

    def call_later(delay: float, fn):
        timer = [clock[0] + delay, fn]
        timers.append(timer)
        return type("Handle", (), {"cancel": lambda self: timer in timers and timers.remove(timer)})()

    monkeypatch.setattr(loop, "call_later", call_later)
    topic, sent, at = Topic(), [], []
    published = topic.publish
    topic.publish = lambda event: at.append(clock[0]) or published(event)
    relay = TokenRelay(topic, turn=1, step=1, attempt=1)
    for n in range(int(tokens_per_s * seconds)):
        clock[0] += 1 / tokens_per_s
        while due := [t for t in timers if t[0] <= clock[0]]:
            timers.remove(due[0])
            due[0][1]()
        relay.text(f"t{n:03} ")  # four characters a token, as English has
        sent.append(f"t{n:03} ")
    relay.close()
    monkeypatch.undo()
    return len(set(at)), "".join(e.text for e in topic.published), "".join(sent)


async def test_a_slow_models_step_costs_about_what_a_fast_ones_does(monkeypatch):
    """The same 300 tokens from a hosted model at 80 tokens/s and a local one at 7 tokens/s: at
    a batch every 200 ms the slow one sent 214 (each a signal and a workflow task); now it
    sends a batch a second, about twice the fast one's, and every token reaches the stream in
    order."""
    fast, fast_streamed, fast_text = streamed(monkeypatch, 80, 300 / 80)
    slow, slow_streamed, slow_text = streamed(monkeypatch, 7, 300 / 7)
    assert fast_streamed == fast_text and slow_streamed == slow_text
    assert 10 <= fast <= 20 and slow <= 2.5 * fast


async def test_a_long_step_sends_batches_that_grow_with_the_log_of_its_length(monkeypatch):
    ten, _, _ = streamed(monkeypatch, 7, 600)  # ten minutes of a slow model
    twenty, went, text = streamed(monkeypatch, 7, 1200)
    assert ten <= 90 and twenty - ten <= 10 and went == text


async def test_resets_go_out_at_once_and_what_came_before_them_never():
    topic = Topic()
    relay = TokenRelay(topic, turn=1, step=1, attempt=1)
    relay.text("a reply the server could not parse")
    relay.reset("failed to parse input")
    relay.text("the good one")
    relay.close()
    assert [(e.kind, e.text) for e in topic.published] == [
        ("reset", "failed to parse input"), ("token", "the good one")]
    later = Topic()
    retry = TokenRelay(later, turn=1, step=1, attempt=2)
    retry.text("again")
    retry.close()
    assert [(e.kind, e.attempt) for e in later.published] == [("reset", 2), ("token", 2)]


async def test_streamed_replies_reuse_the_connection_the_endpoint_keeps_alive():
    reply = ScriptedReply(content="It is sunny.", tool_calls=[
        ScriptedToolCall(name="get_weather", arguments={"location": "Paris"})])
    with ScriptedModelServer(Script(scenarios=[Scenario(trigger="[alive]",
                                                        replies=[reply])])) as server:
        client = openai.AsyncOpenAI(base_url=server.base_url, api_key="k", max_retries=0)
        seen: list[str] = []
        for _ in range(3):
            result = await stream_completion(client, "scripted", [
                {"role": "user", "content": "[alive]"}], [], "auto", seen.append)
            assert result.message.content == "It is sunny."
            assert result.message.tool_calls[0].function.arguments == '{"location": "Paris"}'
        await client.close()
        assert "".join(seen) == "It is sunny." * 3
        assert server.connections == 1


def test_a_namespace_usage_still_counts():  # the SDK's objects, as the summary call gets them
    usage = SimpleNamespace(prompt_tokens=3, completion_tokens=2, total_tokens=None,
                            prompt_tokens_details=SimpleNamespace(cached_tokens=1))
    assert (counted(usage).total_tokens, counted(usage).cached_tokens) == (5, 1)
