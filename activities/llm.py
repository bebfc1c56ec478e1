"""The LLM activity: one chat completion against any OpenAI-compatible endpoint."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
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
from activities.settings import ActivitySettings
from activities.summary import summary_messages
from workflows.models import (
    PENDING_PROMPT_QUERY,
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
from workflows.reporting import TOKENS_TOPIC
from workflows.rules import delta

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


def classify_status_error(exc: openai.APIStatusError) -> ApplicationError:
    """Map an HTTP error from the model endpoint to a retryable or final activity error."""
    status = exc.status_code
    detail = _error_detail(exc)
    if is_retryable_status(status):
        return ApplicationError(
            f"model endpoint answered {status}: {detail}",
            type="LLMTransientError",
            next_retry_delay=_retry_after(exc),
        )
    hint = HINTS.get(status)
    message = f"model endpoint rejected the request ({status}): {detail}"
    return ApplicationError(
        f"{message} ({hint})" if hint else message, type="LLMRequestRejected", non_retryable=True
    )


class ContextMiss(Exception):
    """The worker cannot rebuild the prompt a delta request names (`workflows.rules.delta`)."""


class LLMActivities:
    def __init__(self, settings: ActivitySettings, client: openai.AsyncOpenAI | None = None,
                 temporal: Client | None = None, cache: ContextCache | None = None):
        self._default_model = settings.openai_model
        self._prices = settings.prices.for_endpoint(settings.openai_base_url)
        # Local endpoints (Ollama, vLLM) need no key, but the SDK insists on one.
        self._client = client or openai.AsyncOpenAI(
            api_key=settings.openai_api_key or "unset",
            base_url=settings.openai_base_url,
            max_retries=0,  # Temporal's retry policy owns retries.
        )
        self._temporal = temporal  # asks a conversation for a prompt this worker does not hold
        self.cache = ContextCache(settings.context_cache_bytes) if cache is None else cache
        # Models whose endpoint refused `response_format`: typed results are then only checked.
        self._unstructured: set[str] = set()
        self._server = urlsplit(str(self._client.base_url)).hostname  # server.address, on spans

    @activity.defn(name="llm_call")
    async def llm_call(self, request: LLMRequest) -> LLMReply:
        """One chat completion of a whole prompt (as runs begun before the delta context ask)."""
        return await self._complete(request.model, [m.to_openai() for m in request.messages],
                                    request.tools, request.tool_choice, request.turn, request.step,
                                    request.response_format)

    @activity.defn(name="llm_step")
    async def llm_step(self, request: LLMStepRequest) -> LLMReply:
        """One chat completion of a prompt sent as a delta: rebuilt from this worker's copy of
        the conversation's previous prompt, or fetched from the conversation when this worker
        has none (another worker, a restart, an eviction)."""
        try:
            messages, tools = await heartbeating(self._rebuild(request))
        except ContextMiss as miss:
            raise ApplicationError(str(miss), type="ContextMiss", non_retryable=True) from None
        return await self._complete(request.model, messages, tools, request.tool_choice,
                                    request.turn, request.step, request.response_format)

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

    async def _complete(self, model: str | None, messages: list[dict[str, Any]],
                        tools: list[dict[str, Any]], tool_choice: str, turn: int, step: int,
                        response_format: dict[str, Any] | None = None) -> LLMReply:
        """One chat completion, streamed: token deltas go to the conversation's live stream."""
        model = model or self._default_model
        attempt = activity.info().attempt
        started = time.monotonic()
        with telemetry.span(f"chat {model}", {
                "gen_ai.operation.name": "chat", "gen_ai.request.model": model,
                "gen_ai.conversation.id": activity.info().workflow_id,
                "server.address": self._server, "agent.turn": turn, "agent.step": step,
                "agent.attempt": attempt,
        }, content={"gen_ai.input.messages": messages}) as span:
            try:
                async with WorkflowStreamClient.from_within_activity(
                        batch_interval=TOKEN_BATCH) as live:
                    tokens = live.topic(TOKENS_TOPIC, type=StreamEvent)
                    if attempt > 1:  # watchers drop what an earlier attempt streamed
                        tokens.publish(StreamEvent(kind="reset", turn=turn, step=step,
                                                   attempt=attempt))

                    def on_text(text: str) -> None:
                        for i in range(0, len(text), TOKEN_ITEM_CHARS):  # items stay small
                            tokens.publish(StreamEvent(kind="token", turn=turn, step=step,
                                                       attempt=attempt,
                                                       text=text[i:i + TOKEN_ITEM_CHARS]))

                    reply = await _classified(heartbeating(self._stream(
                        model, messages, tools, tool_choice, on_text, response_format)))
            except Exception as err:
                telemetry.model_call_measured(model, started, None, type(err).__name__)
                raise
            reply.usage = self._prices.priced(reply.model or model, reply.usage)
            telemetry.set_attributes(span, {
                "gen_ai.response.model": reply.model or None,
                "gen_ai.response.finish_reasons": [reply.finish_reason] if reply.finish_reason
                else None, **telemetry.usage_attributes(reply.usage)},
                content={"gen_ai.output.messages": [reply.message.to_openai()]})
        telemetry.model_call_measured(model, started, reply.usage, None)
        log.info(
            "llm reply",
            model=model,
            tool_calls=len(reply.message.tool_calls or []),
            finish_reason=reply.finish_reason,
            total_tokens=reply.usage.total_tokens,
            cost_usd=reply.usage.cost_usd,
        )
        return reply

    async def _stream(self, model: str, messages: list[dict[str, Any]],
                      tools: list[dict[str, Any]], tool_choice: str, on_text: Callable[[str], None],
                      response_format: dict[str, Any] | None) -> LLMReply:
        """The completion, in structured-output mode when a typed result is asked and the
        endpoint has it. An endpoint that refuses the mode is asked without it (the conversation
        checks the answer either way), and is not asked with it again."""
        if response_format is not None and model not in self._unstructured:
            try:
                return await stream_completion(self._client, model, messages, tools, tool_choice,
                                               on_text, response_format)
            except (openai.BadRequestError, openai.UnprocessableEntityError) as err:
                refused = _error_detail(err)
            reply = await stream_completion(self._client, model, messages, tools, tool_choice,
                                            on_text)
            log.warning("the endpoint refused response_format; typed results are checked only",
                        model=model, error=refused)
            self._unstructured.add(model)
            return reply
        return await stream_completion(self._client, model, messages, tools, tool_choice, on_text)

    @activity.defn(name="summarize")
    async def summarize(self, request: SummaryRequest) -> SummaryReply:
        """Fold turns into the conversation's running summary: one chat completion, not streamed."""
        model = request.model or self._default_model
        started = time.monotonic()
        # the fold is a model call of its own, in the turn's trace
        with telemetry.span(f"chat {model}", {
                "gen_ai.operation.name": "chat", "gen_ai.request.model": model,
                "gen_ai.conversation.id": activity.info().workflow_id,
                "server.address": self._server, "agent.purpose": "summary",
                "agent.folded_turns": f"{request.first_turn}-{request.last_turn}",
        }) as span:
            try:
                completion = await _classified(heartbeating(self._client.chat.completions.create(
                    model=model, messages=[], max_tokens=request.max_tokens,
                    extra_body={"messages": summary_messages(request)},
                )))
            except Exception as err:
                telemetry.model_call_measured(model, started, None, type(err).__name__)
                raise
            text = (completion.choices[0].message.content or "") if completion.choices else ""
            usage = self._prices.priced(completion.model or model, counted(completion.usage))
            telemetry.set_attributes(span, telemetry.usage_attributes(usage),
                                     content={"agent.summary": text})
        telemetry.model_call_measured(model, started, usage, None)
        log.info("summary written", model=model, turns=f"{request.first_turn}-{request.last_turn}",
                 summary_bytes=len(text.encode()))
        return SummaryReply(text=text, usage=usage)


# A call the endpoint reported no usage for: its tokens and cost are unknown, never 0.
UNMETERED = Usage(cost_usd=None, cost_note="the endpoint reported no usage", unmetered_calls=1)


def counted(usage: Any) -> Usage:
    """The endpoint's usage, with its cached prompt tokens where it reports them."""
    if usage is None:
        return UNMETERED.model_copy()
    details = getattr(usage, "prompt_tokens_details", None)
    return Usage(
        prompt_tokens=usage.prompt_tokens or 0,
        completion_tokens=usage.completion_tokens or 0,
        total_tokens=usage.total_tokens or 0,
        cached_tokens=getattr(details, "cached_tokens", None) or 0,
    )


async def _classified(call: Awaitable[T]) -> T:
    """Await a model call, turning its errors into retryable or final activity errors."""
    try:
        return await call
    except openai.APIStatusError as exc:
        raise classify_status_error(exc) from None
    except openai.APIConnectionError as exc:  # includes APITimeoutError
        raise ApplicationError(f"model endpoint unreachable: {exc}", type="LLMTransientError") from None


async def stream_completion(
    client: openai.AsyncOpenAI,
    model: str,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]],
    tool_choice: str,
    on_text: Callable[[str], None],
    response_format: dict[str, Any] | None = None,
) -> LLMReply:
    """A streamed chat completion, assembled into one reply; `on_text` sees each text delta.

    The messages and tools go in `extra_body`, which the SDK sends as they are: they are plain
    JSON already, and the SDK's parameter transform walks every message on every call (74% of the
    worker's CPU on a 200-step conversation, measured with pyinstrument).
    """
    body: dict[str, Any] = {"messages": messages}
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
    body = exc.body
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and inner.get("message"):
            return str(inner["message"])
    return exc.message


def _retry_after(exc: openai.APIStatusError) -> timedelta | None:
    value = exc.response.headers.get("retry-after") if exc.response is not None else None
    try:
        seconds = float(value) if value is not None else None
    except ValueError:
        return None
    return timedelta(seconds=min(seconds, 60.0)) if seconds is not None and seconds > 0 else None
