"""The LLM activity: one chat completion against any OpenAI-compatible endpoint."""

from __future__ import annotations

import asyncio
import math
import re
from collections.abc import Awaitable, Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
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
from contract.bounds import valid_text
from contract.names import TOKENS_TOPIC
from rules import delta

log = structlog.get_logger()
T = TypeVar("T")

# Statuses a retry can cure; every other HTTP error is the request's fault and is final.
RETRYABLE_STATUSES = frozenset({408, 409, 429})
TOKEN_BATCH = timedelta(milliseconds=200)  # how often token deltas reach the workflow
TOKEN_ITEM_CHARS = 1024
# Fetching a prompt this worker does not hold, by a query of the conversation. A live worker
# that holds the conversation answers in milliseconds; a dead one would hold the query for the
# sticky timeout and then have a worker replay the conversation for it. Past this deadline the
# prompt is sent whole instead (ContextMiss), which costs that one replay only.
FETCH_TIMEOUT = timedelta(seconds=1.5)
HINTS = {
    401: "check OPENAI_API_KEY",
    403: "the key may not access this model",
    404: "check OPENAI_MODEL and OPENAI_BASE_URL",
}


def is_retryable_status(status: int) -> bool:
    return status in RETRYABLE_STATUSES or status >= 500


# The final errors that concern the model entry, not the request: another entry (a fallback)
# may answer. 401/403: its key; 404: the model is not there.
ENTRY_STATUSES = frozenset({401, 403, 404})
# How providers say a prompt is longer than the model's window (OpenAI and the servers that copy
# its wording: vLLM, DeepSeek, Groq, Together; Anthropic; Gemini; Mistral; llama.cpp's server,
# Ollama, LM Studio). Only with a 400-ish status: the words alone appear in other errors too.
CONTEXT_TOO_LONG = re.compile(
    r"context_length_exceeded|maximum context length|context length (is )?exceeded"
    r"|prompt is too long|input token count.*exceeds the maximum"
    r"|too large for model with \d+ maximum context length"
    r"|reduce the length of the messages"
    r"|exceed_context_size_error|exceeds the available context size"  # llama.cpp
    r"|input length exceeds the context length"  # Ollama
    r"|when context the overflows|greater than the context length"  # LM Studio
    r"|longer than the maximum model length", re.IGNORECASE | re.DOTALL)  # vLLM
# What those errors say of the window and of the prompt's tokens, where they do.
WINDOW_SAID = re.compile(
    r"(?:available context size \(|maximum context length is |context length of only "
    r"|n_ctx: ?|maximum model length of |maximum context length of )(\d{1,9})", re.IGNORECASE)
# In the order they are tried: "you requested 5000 tokens (4000 in the messages, ...)" and "you
# requested 4096 output tokens and your prompt contains at least 258049" name the prompt later.
PROMPT_SAID = tuple(re.compile(p, re.IGNORECASE) for p in (
    r"(\d{1,9}) in the messages", r"prompt contains (?:at least )?(\d{1,9})",
    r"(?:request \(|resulted in |keep the first |n_keep: ?|prompt \(length )(\d{1,9})",
    r"you requested (\d{1,9}) tokens"))
MAX_DETAIL_CHARS = 2048  # of an endpoint's error: what is matched, and kept in the failure


def classify_status_error(exc: openai.APIStatusError) -> ApplicationError:
    """Map an HTTP error from the model endpoint to a retryable or final activity error: a
    transient one (retried, after Retry-After when the endpoint sends one), one of the model
    entry (final here; a fallback entry may answer), a prompt longer than the model's window
    (the conversation folds harder), or the request's own fault (final)."""
    status = exc.status_code
    detail = valid_text(_error_detail(exc)[:MAX_DETAIL_CHARS])  # it goes into the history
    if is_retryable_status(status):
        return ApplicationError(
            f"model endpoint answered {status}: {detail}",
            type="LLMTransientError",
            next_retry_delay=_retry_after(exc),
        )
    # the pattern has `.*`: it looks at the endpoint's words bounded, never at all of them
    words = f"{detail} {_error_code(exc)[:MAX_DETAIL_CHARS]}"  # the code and type
    if status in (400, 413, 422) and CONTEXT_TOO_LONG.search(words):
        return context_too_long(f"({status}): {detail}", exc.body)
    hint = HINTS.get(status)
    message = f"model endpoint rejected the request ({status}): {detail}"
    return ApplicationError(
        f"{message} ({hint})" if hint else message, non_retryable=True,
        type="LLMModelUnavailable" if status in ENTRY_STATUSES else "LLMRequestRejected",
    )


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
                        reply = await _classified(heartbeating(endpoint.in_slot(self._stream(
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
                refused = _error_detail(err)
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
            completion = await _classified(heartbeating(endpoint.in_slot(
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


async def _classified(call: Awaitable[T]) -> T:
    """Await a model call, turning its errors into retryable or final activity errors."""
    try:
        return await call
    except openai.APIStatusError as exc:
        raise classify_status_error(exc) from None
    except openai.APIConnectionError as exc:  # includes APITimeoutError
        raise ApplicationError(f"model endpoint unreachable: {exc}", type="LLMTransientError") from None
    except openai.APIError as exc:  # an error event inside a stream that had begun
        raise classify_stream_error(exc) from None


# How servers say their tool-call parser could not read what the model wrote (llama.cpp's PEG
# parsers, vLLM's and others'): the model's fault, which asking again may or may not cure.
FORMAT_ERROR = re.compile(r"does not match the expected|failed to parse|could not parse|"
                          r"parse error|tool call parser|invalid tool call", re.IGNORECASE)
FORMAT_ATTEMPTS = 3  # a reply the server could not parse is asked for this often, in all
FORMAT_HINT = ("the model's reply did not fit the tool-call format its server parses; a model "
               "better at tool calls, a server without its own tool parser (the agent then reads "
               "the calls from the text), or fewer tools may help")


class FormatError(Exception):
    """The server could not parse the model's output (an error event in its stream)."""


def classify_stream_error(exc: openai.APIError) -> Exception:
    """An error the endpoint sent inside its stream: a reply its parser could not read (asked
    again a few times, `FormatError`), else a transient failure."""
    detail = valid_text(str(getattr(exc, "message", "") or exc)[:MAX_DETAIL_CHARS])
    if FORMAT_ERROR.search(detail):
        return FormatError(detail)
    if CONTEXT_TOO_LONG.search(detail):
        return context_too_long(f"(in its stream): {detail}", getattr(exc, "body", None))
    return ApplicationError(f"model endpoint failed mid-stream: {detail}",
                            type="LLMTransientError")


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


def _error_detail(exc: openai.APIStatusError) -> str:
    """The endpoint's words: its error's message, or its error as plain text (LM Studio's
    `{"error": "..."}`, which the SDK keeps as the body and leaves out of its message)."""
    if isinstance(exc.body, str) and exc.body.strip():
        return exc.body
    message = _error_body(exc.body).get("message")
    return str(message) if message else exc.message


MAX_RETRY_AFTER_S = 60.0


def _retry_after(exc: openai.APIStatusError, now: datetime | None = None) -> timedelta | None:
    """The wait a `Retry-After` header asks for (seconds, or an HTTP date), at most a minute."""
    value = exc.response.headers.get("retry-after") if exc.response is not None else None
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        seconds = (when - (now or datetime.now(UTC))).total_seconds()
    if not seconds > 0:  # NaN, past, zero
        return None
    return timedelta(seconds=min(seconds, MAX_RETRY_AFTER_S))


def _error_code(exc: openai.APIStatusError) -> str:
    error = _error_body(exc.body)
    return f"{error.get('code') or ''} {error.get('type') or ''}".strip()


def _error_body(body: object) -> dict[str, Any]:
    """The error object of an endpoint's error body ({} if it has none)."""
    error = body.get("error", body) if isinstance(body, dict) else None
    return error if isinstance(error, dict) else {}


def context_too_long(detail: str, body: object) -> ApplicationError:
    """A prompt longer than the model's window, with what the endpoint said of the window and
    of the prompt's tokens (llama.cpp's `n_ctx` and `n_prompt_tokens`, else its words) as the
    error's details, for the conversation to fit its budget to."""
    error = _error_body(body)

    def said(field: str, *words: re.Pattern[str]) -> int | None:
        value = error.get(field)
        if not (isinstance(value, int) and not isinstance(value, bool)):
            found = next((f for w in words if (f := w.search(detail))), None)
            value = int(found.group(1)) if found else None
        return value if value is not None and 0 < value < 10**9 else None

    return ApplicationError(
        f"the prompt is longer than the model's context window {detail}",
        {"window": said("n_ctx", WINDOW_SAID),
         "prompt_tokens": said("n_prompt_tokens", *PROMPT_SAID)},
        type="LLMContextTooLong", non_retryable=True)
