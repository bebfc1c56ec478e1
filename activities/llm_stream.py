"""A streamed chat completion, read as the endpoint sends it: the request goes through the
`openai` SDK (its parameters, headers, retries off, and its errors for an HTTP status), and the
server-sent events come back through its streaming response, each chunk read as the JSON it is.

The SDK would build a pydantic model of every chunk: 1.2 ms of a step's worker CPU (a quarter of
the model call's) on a weather tour, for fields this module reads straight from the JSON. An
error the endpoint sends inside the stream raises the SDK's own `APIError`, as its stream
does, and a connection cut mid-stream its `APIConnectionError`, so `llm_errors.classified` reads
them as before.
"""

from __future__ import annotations

import json
import math
from collections.abc import AsyncIterator, Callable
from typing import Any

import openai
from temporalio.exceptions import ApplicationError

from ..contract import ChatMessage, FunctionCall, LLMReply, ToolCall, Usage

# A call the endpoint reported no usage for: its tokens and cost are unknown, never 0.
UNMETERED = Usage(cost_usd=None, cost_note="the endpoint reported no usage", unmetered_calls=1)


async def stream_completion(
    client: openai.AsyncOpenAI,
    model: str,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]],
    tool_choice: str,
    on_text: Callable[[str], None],
    response_format: dict[str, Any] | None = None,
    params: dict[str, Any] | None = None,
) -> LLMReply:
    """A streamed chat completion, assembled into one reply; `on_text` sees each text delta.

    The messages and tools go in `extra_body`, which the SDK sends as they are: they are plain
    JSON already, and the SDK's parameter transform walks every message on every call (74% of the
    worker's CPU on a 200-step conversation, measured with pyinstrument). `params` are a model
    entry's own (`reasoning_effort`, `max_completion_tokens`...), sent as they are.
    """
    body: dict[str, Any] = {**(params or {}), "messages": messages}
    extra: dict[str, Any] = {}
    if tools:
        body["tools"] = tools
        extra["tool_choice"] = tool_choice
    if response_format is not None:
        body["response_format"] = response_format
    reply = ReplyAssembler(model)
    async with client.chat.completions.with_streaming_response.create(
        model=model, messages=[], stream=True, stream_options={"include_usage": True},
        extra_body=body, **extra,
    ) as response:
        async for chunk in chunks(response):
            text = reply.add(chunk)
            if text:
                on_text(text)
    return reply.result()


async def chunks(response: Any) -> AsyncIterator[Any]:
    """The JSON of each server-sent event of a chat completion stream, until `[DONE]` (the rest
    of the body is read, so the connection goes back to the pool). An `error` in an event
    raises `openai.APIError`, as the SDK's stream does; the connection failing, its
    `APIConnectionError`."""
    data: list[str] = []
    done = False
    try:
        async for line in response.iter_lines():
            if done:
                continue
            if line.startswith("data:"):
                data.append(line[6:] if line.startswith("data: ") else line[5:])
                continue
            if line or not data:  # another field (event:, id:, a comment), or no event yet
                continue
            event, data = "\n".join(data), []
            if event.startswith("[DONE]"):
                done = True
                continue
            chunk = json.loads(event)
            if isinstance(chunk, dict) and chunk.get("error"):
                error = chunk["error"]
                message = error.get("message") if isinstance(error, dict) else None
                raise openai.APIError(
                    message if isinstance(message, str) and message
                    else "An error occurred during streaming",
                    request=response.http_request, body=error)
            yield chunk
    except (openai.APIError, ValueError):
        raise
    except Exception as err:  # the transport's: a read that timed out, a connection cut
        raise openai.APIConnectionError(message=f"the stream was cut: {err!r}",
                                        request=response.http_request) from err


def field(value: Any, name: str) -> Any:
    """`name` of a JSON object (None when `value` is none, or has no such field)."""
    return value.get(name) if isinstance(value, dict) else None


class ReplyAssembler:
    """Builds the assistant message from streamed chunks (their JSON): text, tool-call deltas,
    usage."""

    def __init__(self, model: str):
        self._model = model
        self._text: list[str] = []
        self._calls: dict[Any, dict[str, str]] = {}
        self._finish_reason: str | None = None
        self._usage = UNMETERED.model_copy()  # until a chunk carries the usage

    def add(self, chunk: Any) -> str:
        """Take one chunk; return its text delta, if any."""
        if isinstance(model := field(chunk, "model"), str) and model:
            self._model = model
        if (usage := field(chunk, "usage")) is not None:
            self._usage = counted(usage)
        choices = field(chunk, "choices")
        if not isinstance(choices, list) or not choices:
            return ""
        choice = choices[0]
        if isinstance(reason := field(choice, "finish_reason"), str) and reason:
            self._finish_reason = reason
        delta = field(choice, "delta")
        calls = field(delta, "tool_calls")
        for call in calls if isinstance(calls, list) else ():
            acc = self._calls.setdefault(_key(field(call, "index")),
                                         {"id": "", "name": "", "arguments": ""})
            if isinstance(call_id := field(call, "id"), str) and call_id:
                acc["id"] = call_id
            function = field(call, "function")
            acc["name"] += _text(field(function, "name"))
            acc["arguments"] += _text(field(function, "arguments"))
        content = field(delta, "content")
        if isinstance(content, str) and content:
            self._text.append(content)
            return content
        return ""

    def result(self) -> LLMReply:
        if self._finish_reason is None:  # every complete stream's last choice says why it ended
            raise ApplicationError("the model's stream ended before its reply did (no "
                                   "finish_reason): the connection was cut", type="LLMTransientError")
        calls = [
            ToolCall(id=c["id"], function=FunctionCall(name=c["name"], arguments=c["arguments"]))
            for _, c in sorted(self._calls.items(), key=lambda item: item[0])
        ]
        text = "".join(self._text)
        return LLMReply(
            message=ChatMessage(role="assistant", content=text or (None if calls else ""),
                                tool_calls=calls or None),
            usage=self._usage,
            finish_reason=self._finish_reason,
            model=self._model,
        )


def _key(index: Any) -> tuple[int, Any]:
    """A tool call's place in the reply: its index where the endpoint gives one, sortable
    whatever it gives (some leave it out: then their deltas are one call)."""
    if isinstance(index, int) and not isinstance(index, bool):
        return (0, index)
    return (1, json.dumps(index, sort_keys=True, default=str))


def _text(value: Any) -> str:
    """A piece of a call's name or arguments: text as it is; arguments an endpoint sent as a JSON
    object, as their JSON."""
    if isinstance(value, str):
        return value
    return json.dumps(value) if isinstance(value, dict) else ""


def counted(usage: Any) -> Usage:
    """The endpoint's usage (its JSON, or the SDK's object), with its cached prompt tokens where
    it reports them. A total left out (null, 0) or below its parts counts the parts, and no count
    is below 0: a token budget counts what was used, whatever the endpoint writes."""
    if usage is None:
        return UNMETERED.model_copy()
    details = _get(usage, "prompt_tokens_details")
    prompt, completion = _tokens(usage, "prompt_tokens"), _tokens(usage, "completion_tokens")
    return Usage(
        prompt_tokens=prompt,
        completion_tokens=completion,
        total_tokens=max(_tokens(usage, "total_tokens"), prompt + completion),
        cached_tokens=_tokens(details, "cached_tokens"),
    )


def _get(value: Any, name: str) -> Any:
    return value.get(name) if isinstance(value, dict) else getattr(value, name, None)


def _tokens(usage: Any, name: str) -> int:
    """A count the endpoint reports: a whole number of at least 0, whatever it wrote (left
    out, null, a string, a fraction, a negative number)."""
    value = _get(usage, name)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 0
    return max(int(value), 0) if math.isfinite(value) else 0
