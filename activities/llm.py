"""The LLM activity: one chat completion against any OpenAI-compatible endpoint."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeVar
from urllib.parse import urlsplit

import openai
import structlog
from temporalio import activity
from temporalio.client import Client, WorkflowQueryFailedError
from temporalio.contrib.workflow_streams import WorkflowStreamClient
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError

from activities import telemetry
from activities.context_cache import ContextCache
from activities.heartbeat import heartbeating
from activities.llm_errors import (
    FORMAT_ATTEMPTS,
    FORMAT_HINT,
    FormatError,
    classified,
    error_detail,
)
from activities.models import ModelEntry
from activities.pricing import Prices
from activities.settings import ActivitySettings
from activities.summary import summary_messages
from contract import (
    LLM_CALL_ACTIVITY,
    LLM_STEP_ACTIVITY,
    PENDING_PROMPT_QUERY,
    SUMMARIZE_ACTIVITY,
    ChatMessage,
    FunctionCall,
    LLMReply,
    LLMRequest,
    LLMStepRequest,
    PendingPrompt,
    StreamEvent,
    SummaryReply,
    SummaryRequest,
    ToolCall,
    Usage,
)
from contract.names import TOKENS_TOPIC
from rules import delta

log = structlog.get_logger()
T = TypeVar("T")

TOKEN_BATCH = timedelta(milliseconds=200)  # how often token deltas reach the workflow
TOKEN_ITEM_CHARS = 1024
# Fetching a prompt this worker does not hold, by a query of the conversation. A live worker
# that holds the conversation answers in milliseconds; a dead one would hold the query for the
# sticky timeout and then have a worker replay the conversation for it. Past this deadline the
# prompt is sent whole instead (ContextMiss), which costs that one replay only.
FETCH_TIMEOUT = timedelta(seconds=1.5)
class ContextMiss(Exception):
    """The worker cannot rebuild the prompt a delta request names (`rules.delta`)."""


@dataclass
class Endpoint:
    """A model entry as a call uses it: its name, spec, client, prices and concurrency slots."""

    name: str
    spec: ModelEntry
    client: openai.AsyncOpenAI
    prices: Prices
    server: str | None  # server.address, on spans
    label: str  # its model as metrics name it (`telemetry.model_label`)
    slots: asyncio.Semaphore | None = None  # the entry's max_concurrency, in this process

    def traced(self, attributes: dict[str, Any], content: dict[str, Any] | None = None
               ) -> AbstractContextManager[telemetry.ModelCall]:
        """The call's span and metrics (`telemetry.model_call`), with the entry's attributes."""
        return telemetry.model_call(self.spec.model, self.label, {
            "gen_ai.conversation.id": activity.info().workflow_id,
            "server.address": self.server, "agent.model_entry": self.name, **attributes},
            content)

    async def in_slot(self, call: Awaitable[T]) -> T:
        """`call`, once one of the entry's slots is free. Waiting for it is part of the call:
        a caller heartbeats through both, or a queued call would time out, be retried, and the
        old attempt send its request anyway once it got the slot."""
        if self.slots is None:
            return await call
        async with self.slots:
            return await call


class LLMActivities:
    def __init__(self, settings: ActivitySettings, client: openai.AsyncOpenAI | None = None,
                 temporal: Client | None = None, cache: ContextCache | None = None):
        self._settings = settings
        self._models = settings.model_entries()
        # By (base URL, key variable), made once: an endpoint's client and its host
        # (server.address); `client` serves the default entry.
        self._endpoints: dict[tuple[str | None, str | None],
                              tuple[openai.AsyncOpenAI, str | None]] = {}
        if client is not None:
            default = self._models.entries[self._models.default]
            self._endpoints[(default.base_url, default.api_key_env)] = self._endpoint(client)
        self._known = telemetry.known_models(settings)  # what a metric may name
        self._slots = {name: asyncio.Semaphore(e.max_concurrency)
                       for name, e in self._models.entries.items() if e.max_concurrency}
        self._temporal = temporal  # asks a conversation for a prompt this worker does not hold
        self.cache = ContextCache(settings.context_cache_bytes) if cache is None else cache
        # Models whose endpoint refused `response_format`: typed results are then only checked.
        self._unstructured: set[str] = set()

    def _entry(self, model: str | None, entry: str | None) -> Endpoint:
        """The entry a call goes to: the one the conversation fell back to, else the one its
        model names (`Models.resolve`)."""
        if entry is None:
            name, spec = self._models.resolve(model)
        elif entry in self._models.entries:
            name, spec = entry, self._models.entries[entry]
        else:
            raise ApplicationError(f"this worker has no model entry {entry!r} (AGENT_MODELS)",
                                   type="LLMModelUnavailable", non_retryable=True)
        key = (spec.base_url, spec.api_key_env)
        if key not in self._endpoints:
            # OPENAI_API_KEY was read with the settings; another entry's key is read here, in the
            # worker, from the variable it names
            key_value = (self._settings.openai_api_key or "unset"
                         if spec.api_key_env == "OPENAI_API_KEY" else self._models.api_key(spec))
            self._endpoints[key] = self._endpoint(openai.AsyncOpenAI(
                api_key=key_value, base_url=spec.base_url,
                max_retries=0))  # Temporal's retry policy owns retries
        client, server = self._endpoints[key]
        prices = self._settings.prices.for_entry(spec.base_url, spec.free, spec.price)
        return Endpoint(name, spec, client, prices, server,
                        telemetry.model_label(spec.model, self._known), self._slots.get(name))

    @staticmethod
    def _endpoint(client: openai.AsyncOpenAI) -> tuple[openai.AsyncOpenAI, str | None]:
        return client, urlsplit(str(client.base_url)).hostname

    @activity.defn(name=LLM_CALL_ACTIVITY)
    async def llm_call(self, request: LLMRequest) -> LLMReply:
        """One chat completion of a whole prompt (as runs begun before the delta context ask)."""
        return await self._complete(self._entry(request.model, request.entry),
                                    [m.to_openai() for m in request.messages], request.tools,
                                    request.tool_choice, request.turn, request.step,
                                    request.response_format)

    @activity.defn(name=LLM_STEP_ACTIVITY)
    async def llm_step(self, request: LLMStepRequest) -> LLMReply:
        """One chat completion of a prompt sent as a delta: rebuilt from this worker's copy of
        the conversation's previous prompt, or fetched from the conversation when this worker
        has none (another worker, a restart, an eviction)."""
        try:
            messages, tools = await heartbeating(self._rebuild(request))
        except ContextMiss as miss:
            raise ApplicationError(str(miss), type="ContextMiss", non_retryable=True) from None
        return await self._complete(self._entry(request.model, request.entry), messages, tools,
                                    request.tool_choice, request.turn, request.step,
                                    request.response_format)

    async def _rebuild(self, request: LLMStepRequest) -> tuple[list[dict[str, Any]], list[dict]]:
        """The prompt's messages as the endpoint receives them, and its tools."""
        conversation = activity.info().workflow_id
        wire = None
        previous = self.cache.prompt(conversation, request.base) if request.base else None
        if request.base is None or previous is not None:
            try:
                wire = delta.rebuild(previous.wire if previous else [], request.parts)
            except delta.Mismatch as err:
                raise ContextMiss(f"the parts do not fit the prompt they name: {err}") from None
        tools: list[dict[str, Any]] | None = []
        if request.tools is not None:
            tools = request.tools
        elif request.tools_digest is not None:
            tools = self.cache.tools(request.tools_digest)
        source = "delta" if request.base is not None else "full"
        if wire is None or tools is None:
            pending = await self._fetch(request.digest)
            wire = [m.to_openai() for m in pending.messages]
            tools = pending.tools if request.tools_digest is not None else []
            source = "fetched"
        # Hashed again from what will be sent, not taken from the cache: a cached message that
        # changed in place must fail the check, not reach the model.
        if delta.prompt_digest([delta.message_hash(m) for m in wire]) != request.digest:
            raise ContextMiss(f"the rebuilt prompt ({source}) does not match its digest")
        if request.tools_digest is not None:
            if delta.tools_digest(tools) != request.tools_digest:
                raise ContextMiss("the tool list does not match its digest")
            self.cache.keep_tools(request.tools_digest, tools)
        self.cache.keep_prompt(conversation, request.digest, wire)
        self.cache.rebuilt[source] += 1
        if source == "fetched":  # worth seeing (a restart, another worker, an eviction)
            log.info("prompt fetched from the conversation", messages=len(wire),
                     cached=len(self.cache))
        return wire, tools

    async def _fetch(self, digest: str) -> PendingPrompt:
        """The prompt the conversation waits on, by its query (any worker can answer it)."""
        if self._temporal is None:
            raise ContextMiss("this worker holds no copy of the prompt and cannot fetch one")
        info = activity.info()
        handle = self._temporal.get_workflow_handle(info.workflow_id, run_id=info.workflow_run_id)
        try:
            pending = await handle.query(PENDING_PROMPT_QUERY, digest, result_type=PendingPrompt,
                                         rpc_timeout=FETCH_TIMEOUT)
        except (RPCError, WorkflowQueryFailedError) as err:  # the workflow resends it whole
            raise ContextMiss(f"could not fetch the prompt from the conversation: {err}") from None
        if pending is None:
            raise ContextMiss("the conversation no longer waits on this prompt")
        return pending

    async def _complete(self, endpoint: Endpoint, messages: list[dict[str, Any]],
                        tools: list[dict[str, Any]], tool_choice: str, turn: int, step: int,
                        response_format: dict[str, Any] | None = None) -> LLMReply:
        """One chat completion, streamed: token deltas go to the conversation's live stream."""
        model = endpoint.spec.model
        attempt = activity.info().attempt
        with endpoint.traced({"agent.turn": turn, "agent.step": step, "agent.attempt": attempt},
                             content={"gen_ai.input.messages": messages}) as call:
            async with WorkflowStreamClient.from_within_activity(
                    batch_interval=TOKEN_BATCH) as live:
                tokens = live.topic(TOKENS_TOPIC, type=StreamEvent)
                if attempt > 1:  # watchers drop what an earlier attempt streamed
                    tokens.publish(StreamEvent(kind="reset", turn=turn, step=step,
                                               attempt=attempt))

                def on_text(text: str) -> None:
                    for i in range(0, len(text), TOKEN_ITEM_CHARS):  # stream items stay small
                        tokens.publish(StreamEvent(kind="token", turn=turn, step=step,
                                                   attempt=attempt,
                                                   text=text[i:i + TOKEN_ITEM_CHARS]))

                for tried in range(1, FORMAT_ATTEMPTS + 1):
                    try:
                        reply = await classified(heartbeating(endpoint.in_slot(self._stream(
                            endpoint, messages, tools, tool_choice, on_text,
                            response_format))))
                        break
                    except FormatError as err:  # one line each, then the reason and a hint
                        log.warning("the server could not parse the model's reply",
                                    entry=endpoint.name, tried=tried, error=str(err))
                        if tried == FORMAT_ATTEMPTS:
                            raise ApplicationError(
                                f"the server could not parse the model's reply {tried} times "
                                f"({err}); {FORMAT_HINT}", type="LLMFormatError",
                                non_retryable=True) from None
                        tokens.publish(StreamEvent(kind="reset", turn=turn, step=step,
                                                   attempt=attempt, text=str(err)))
            reply.usage = endpoint.prices.priced(model, reply.usage)
            reply.entry = endpoint.name
            call.answered(reply.usage, {
                "gen_ai.response.model": reply.model or None,
                "gen_ai.response.finish_reasons": [reply.finish_reason] if reply.finish_reason
                else None}, content={"gen_ai.output.messages": [reply.message.to_openai()]})
        log.info(
            "llm reply",
            model=model,
            entry=endpoint.name,
            tool_calls=len(reply.message.tool_calls or []),
            finish_reason=reply.finish_reason,
            total_tokens=reply.usage.total_tokens,
            cost_usd=reply.usage.cost_usd,
        )
        return reply

    async def _stream(self, endpoint: Endpoint, messages: list[dict[str, Any]],
                      tools: list[dict[str, Any]], tool_choice: str, on_text: Callable[[str], None],
                      response_format: dict[str, Any] | None) -> LLMReply:
        """The completion, in structured-output mode when a typed result is asked and the
        endpoint has it. An endpoint that refuses the mode is asked without it (the conversation
        checks the answer either way), and is not asked with it again."""
        client, model, params = endpoint.client, endpoint.spec.model, endpoint.spec.call_params
        if response_format is not None and endpoint.name not in self._unstructured:
            try:
                return await stream_completion(client, model, messages, tools, tool_choice,
                                               on_text, response_format, params)
            except (openai.BadRequestError, openai.UnprocessableEntityError) as err:
                refused = error_detail(err)
            reply = await stream_completion(client, model, messages, tools, tool_choice, on_text,
                                            params=params)
            log.warning("the endpoint refused response_format; typed results are checked only",
                        model=model, entry=endpoint.name, error=refused)
            self._unstructured.add(endpoint.name)
            return reply
        return await stream_completion(client, model, messages, tools, tool_choice, on_text,
                                       params=params)

    @activity.defn(name=SUMMARIZE_ACTIVITY)
    async def summarize(self, request: SummaryRequest) -> SummaryReply:
        """Fold turns into the conversation's running summary: one chat completion, not streamed."""
        endpoint = self._entry(request.model, request.entry)
        model = endpoint.spec.model
        # the fold is a model call of its own, in the turn's trace
        with endpoint.traced({"agent.purpose": "summary",
                              "agent.folded_turns": f"{request.first_turn}-{request.last_turn}"}
                             ) as call:
            completion = await classified(heartbeating(endpoint.in_slot(
                endpoint.client.chat.completions.create(
                    model=model, messages=[], max_tokens=request.max_tokens,
                    extra_body={**endpoint.spec.params,
                                "messages": summary_messages(request)}))))
            text = (completion.choices[0].message.content or "") if completion.choices else ""
            usage = endpoint.prices.priced(model, counted(completion.usage))
            call.answered(usage, content={"agent.summary": text})
        log.info("summary written", model=model, turns=f"{request.first_turn}-{request.last_turn}",
                 summary_bytes=len(text.encode()))
        return SummaryReply(text=text, usage=usage)


# A call the endpoint reported no usage for: its tokens and cost are unknown, never 0.
UNMETERED = Usage(cost_usd=None, cost_note="the endpoint reported no usage", unmetered_calls=1)


def counted(usage: Any) -> Usage:
    """The endpoint's usage, with its cached prompt tokens where it reports them. A total left
    out (null, 0) or below its parts counts the parts, and no count is below 0: a token budget
    counts what was used, whatever the endpoint writes."""
    if usage is None:
        return UNMETERED.model_copy()
    details = getattr(usage, "prompt_tokens_details", None)
    prompt, completion = _tokens(usage, "prompt_tokens"), _tokens(usage, "completion_tokens")
    return Usage(
        prompt_tokens=prompt,
        completion_tokens=completion,
        total_tokens=max(_tokens(usage, "total_tokens"), prompt + completion),
        cached_tokens=_tokens(details, "cached_tokens"),
    )


def _tokens(usage: Any, field: str) -> int:
    """A count the endpoint reports: a whole number of at least 0, whatever it wrote (left
    out, null, a string, a fraction, a negative number)."""
    value = getattr(usage, field, None)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 0
    return max(int(value), 0) if math.isfinite(value) else 0


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
    chunks = await client.chat.completions.create(
        model=model, messages=[], stream=True, stream_options={"include_usage": True},
        extra_body=body, **extra,
    )
    reply = ReplyAssembler(model)
    async for chunk in chunks:
        text = reply.add(chunk)
        if text:
            on_text(text)
        if activity.in_activity():
            activity.heartbeat()
    return reply.result()


class ReplyAssembler:
    """Builds the assistant message from streamed chunks: text, tool-call deltas, usage."""

    def __init__(self, model: str):
        self._model = model
        self._text: list[str] = []
        self._calls: dict[int, dict[str, str]] = {}
        self._finish_reason: str | None = None
        self._usage = UNMETERED.model_copy()  # until a chunk carries the usage

    def add(self, chunk: Any) -> str:
        """Take one chunk; return its text delta, if any."""
        if chunk.model:
            self._model = chunk.model
        if chunk.usage is not None:
            self._usage = counted(chunk.usage)
        if not chunk.choices:
            return ""
        choice = chunk.choices[0]
        if choice.finish_reason:
            self._finish_reason = choice.finish_reason
        delta = choice.delta
        for call in delta.tool_calls or []:
            acc = self._calls.setdefault(call.index, {"id": "", "name": "", "arguments": ""})
            if call.id:
                acc["id"] = call.id
            if call.function is not None:
                acc["name"] += call.function.name or ""
                acc["arguments"] += call.function.arguments or ""
        if delta.content:
            self._text.append(delta.content)
            return delta.content
        return ""

    def result(self) -> LLMReply:
        if self._finish_reason is None:  # every complete stream's last choice says why it ended
            raise ApplicationError("the model's stream ended before its reply did (no "
                                   "finish_reason): the connection was cut", type="LLMTransientError")
        calls = [
            ToolCall(id=c["id"], function=FunctionCall(name=c["name"], arguments=c["arguments"]))
            for _, c in sorted(self._calls.items())
        ]
        text = "".join(self._text)
        return LLMReply(
            message=ChatMessage(role="assistant", content=text or (None if calls else ""),
                                tool_calls=calls or None),
            usage=self._usage,
            finish_reason=self._finish_reason,
            model=self._model,
        )
