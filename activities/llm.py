"""The LLM activity: one chat completion against any OpenAI-compatible endpoint."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import openai
import structlog
from temporalio import activity
from temporalio.client import Client, WorkflowQueryFailedError
from temporalio.contrib.workflow_streams import WorkflowStreamClient
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError

from ..contract import (
    LLM_STEP_ACTIVITY,
    PENDING_PROMPT_QUERY,
    REVIEW_CALL_ACTIVITY,
    SUMMARIZE_ACTIVITY,
    LLMReply,
    LLMStepRequest,
    PendingPrompt,
    StreamEvent,
    SummaryReply,
    SummaryRequest,
)
from ..contract.bounds import TOKEN_ITEM_CHARS
from ..contract.names import TOKENS_TOPIC
from ..contract.policy import ReviewReply, ReviewRequest
from ..rules import delta
from ..rules.review import read_verdict, review_messages
from .context_cache import ContextCache
from .endpoints import Endpoint, Endpoints
from .heartbeat import heartbeating
from .llm_errors import (
    FORMAT_ATTEMPTS,
    FORMAT_HINT,
    FormatError,
    classified,
    error_detail,
)
from .llm_stream import counted, stream_completion
from .settings import ActivitySettings
from .summary import summary_messages
from .windows import ServerTokens

log = structlog.get_logger()

REVIEW_MAX_TOKENS = 300  # a verdict and a sentence
TOKEN_BATCH = timedelta(milliseconds=200)  # how often token deltas reach the workflow, at most
# Each batch that reaches the workflow is a signal and a workflow task: at a local model's
# 7 tokens/s, one every 200 ms made three steps 244 signals and 1,033 history events. So a batch
# goes every 200 ms only while the text comes briskly (BRISK_CHARS by then), else once a second;
# and past STEADY_BATCHES in a step, the spacing doubles every 8 batches, so that a step's batches
# grow with the log of its length, whatever the model's pace.
BRISK_CHARS = 64
SLOW_BATCH = timedelta(seconds=1)
STEADY_BATCHES = 32
# Fetching a prompt this worker does not hold, by a query of the conversation. A live worker
# that holds the conversation answers in milliseconds; a dead one would hold the query for the
# sticky timeout and then have a worker replay the conversation for it. Past this deadline the
# prompt is sent whole instead (ContextMiss), which costs that one replay only.
FETCH_TIMEOUT = timedelta(seconds=1.5)
class TokenRelay:
    """A model call's text on its way to the conversation's live stream. A reply that comes whole
    within the first batch is not sent: the conversation puts its text on the stream itself with
    the reply (`LLMReply.streamed` is False), which spares a signal and a workflow task. Past
    the first batch, or once a reset went out (a later attempt's, or a reply the server could
    not parse), text goes out a batch at a time, as often as its pace deserves
    (`BRISK_CHARS`, `SLOW_BATCH`, `STEADY_BATCHES`); what is held when the call ends goes then."""

    def __init__(self, topic: Any, turn: int, step: int, attempt: int):
        self._topic, self._turn, self._step, self._attempt = topic, turn, step, attempt
        self._held: list[str] = []
        self._held_chars = 0
        self.live = False
        self.batches = 0  # sent, of text
        self._loop = asyncio.get_running_loop()
        self._sent_at = self._loop.time()
        self._timer: asyncio.TimerHandle | None = self._loop.call_later(
            TOKEN_BATCH.total_seconds(), self._go_live)
        if attempt > 1:  # watchers drop what an earlier attempt streamed
            self._go_live()
            self._publish("reset", None)

    def text(self, text: str) -> None:
        self._held.append(text)
        self._held_chars += len(text)
        if self.live and self._timer is None:
            self._timer = self._loop.call_later(TOKEN_BATCH.total_seconds(), self._tick)

    def reset(self, why: str) -> None:
        """The reply so far is void (the server could not parse it): watchers drop what they
        saw of it, and see why the call is asked again."""
        self._held.clear()
        self._held_chars = 0
        self._go_live()
        self._publish("reset", why)

    def close(self) -> None:
        """The call is over: what is held goes out now, if the stream is live."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self.live:
            self._send()

    def _go_live(self) -> None:
        if not self.live:
            self.live = True
            self._timer = None
            self._send()

    def _tick(self) -> None:
        """Send what is held if its time has come, else look again a batch later."""
        self._timer = None
        if not self._held:
            return  # the next text looks again
        spaced = 2 ** max(0, (self.batches - STEADY_BATCHES) // 8)
        waited = self._loop.time() - self._sent_at
        brisk = self._held_chars >= BRISK_CHARS * spaced
        if waited >= (TOKEN_BATCH if brisk else SLOW_BATCH).total_seconds() * spaced:
            self._send()
        else:
            self._timer = self._loop.call_later(TOKEN_BATCH.total_seconds(), self._tick)

    def _send(self) -> None:
        text = "".join(self._held)
        self._held.clear()
        self._held_chars = 0
        self._sent_at = self._loop.time()
        if text:
            self.batches += 1
        for i in range(0, len(text), TOKEN_ITEM_CHARS):  # stream items stay small
            self._publish("token", text[i:i + TOKEN_ITEM_CHARS])

    def _publish(self, kind: str, text: str | None) -> None:
        self._topic.publish(StreamEvent(kind=kind, turn=self._turn, step=self._step,  # type: ignore[arg-type]
                                        attempt=self._attempt, text=text))


class ContextMiss(Exception):
    """The worker cannot rebuild the prompt a delta request names (`rules.delta`)."""


class LLMActivities:
    def __init__(self, settings: ActivitySettings, client: openai.AsyncOpenAI | None = None,
                 temporal: Client | None = None, cache: ContextCache | None = None):
        self._endpoints = Endpoints(settings, client)  # `client` serves the default entry
        self._temporal = temporal  # asks a conversation for a prompt this worker does not hold
        self.cache = ContextCache(settings.context_cache_bytes) if cache is None else cache
        # Models whose endpoint refused `response_format`: typed results are then only checked.
        self._unstructured: set[str] = set()
        self._tokens = ServerTokens()  # user messages' tokens, as the model's server counts them
        self._reviewer = settings.reviewer  # the entry that reviews calls (AGENT_REVIEWER)

    @activity.defn(name=LLM_STEP_ACTIVITY)
    async def llm_step(self, request: LLMStepRequest) -> LLMReply:
        """One chat completion of a prompt sent as a delta: rebuilt from this worker's copy of
        the conversation's previous prompt, or fetched from the conversation when this worker
        has none (another worker, a restart, an eviction)."""
        try:
            messages, tools = await heartbeating(self._rebuild(request))
        except ContextMiss as miss:
            raise ApplicationError(str(miss), type="ContextMiss", non_retryable=True) from None
        endpoint = self._endpoints.get(request.model, request.entry)
        return await self._complete(endpoint, messages, tools, request.tool_choice, request.turn,
                                    request.step, request.response_format)

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
                tokens = TokenRelay(live.topic(TOKENS_TOPIC, type=StreamEvent), turn, step,
                                    attempt)
                try:
                    reply = await self._attempts(endpoint, messages, tools, tool_choice,
                                                 response_format, tokens)
                except ApplicationError as err:
                    if err.type != "LLMContextTooLong":
                        raise
                    raise await self._counted(endpoint, messages, err) from None
                finally:
                    tokens.close()
            reply.streamed = tokens.live
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

    async def _counted(self, endpoint: Endpoint, messages: list[dict[str, Any]],
                       err: ApplicationError) -> ApplicationError:
        """A prompt refused as too long, with its longest user messages' tokens as the model's
        server counts them, where it does (`counted`): what the conversation leaves out, and
        says, rests on them."""
        texts = [m["content"] for m in messages
                 if m.get("role") == "user" and isinstance(m.get("content"), str)]
        counted = await heartbeating(self._tokens.count(
            endpoint.client, endpoint.spec.base_url, endpoint.spec.model, texts))
        said = err.details[0] if err.details and isinstance(err.details[0], dict) else {}
        return ApplicationError(err.message, {**said, "counted": counted}, type=err.type,
                                non_retryable=True)

    async def _attempts(self, endpoint: Endpoint, messages: list[dict[str, Any]],
                        tools: list[dict[str, Any]], tool_choice: str,
                        response_format: dict[str, Any] | None, tokens: TokenRelay) -> LLMReply:
        """The completion, asked again when the server could not parse the model's output (one
        line each time), then failed with the reason and a hint."""
        for tried in range(1, FORMAT_ATTEMPTS + 1):
            try:
                return await classified(heartbeating(endpoint.in_slot(self._stream(
                    endpoint, messages, tools, tool_choice, tokens.text, response_format))))
            except FormatError as err:
                log.warning("the server could not parse the model's reply",
                            entry=endpoint.name, tried=tried, error=str(err))
                if tried == FORMAT_ATTEMPTS:
                    raise ApplicationError(
                        f"the server could not parse the model's reply {tried} times "
                        f"({err}); {FORMAT_HINT}", type="LLMFormatError",
                        non_retryable=True) from None
                tokens.reset(str(err))
        raise AssertionError("unreachable: the last attempt returns or raises")

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

    @activity.defn(name=REVIEW_CALL_ACTIVITY)
    async def review_call(self, request: ReviewRequest) -> ReviewReply:
        """A `review` rule's call before the reviewer model (`AGENT_REVIEWER`): it allows the
        call or passes it to a person, with its reason. Not streamed. An answer that is not a
        well-formed allow passes it to a person."""
        endpoint = self._endpoints.get(None, self._reviewer)
        model = endpoint.spec.model
        with endpoint.traced({"agent.purpose": "review", "gen_ai.tool.name": request.call.tool}
                             ) as call:
            completion = await classified(heartbeating(endpoint.in_slot(
                endpoint.client.chat.completions.create(
                    model=model, messages=[], max_tokens=REVIEW_MAX_TOKENS,
                    extra_body={**endpoint.spec.params,
                                "messages": review_messages(request)}))))
            text = (completion.choices[0].message.content or "") if completion.choices else ""
            usage = endpoint.prices.priced(model, counted(completion.usage))
            call.answered(usage, content={"agent.review": text})
        allow, reason = read_verdict(text)
        log.info("call reviewed", model=model, tool=request.call.tool, allow=allow)
        return ReviewReply(allow=allow, reason=reason, usage=usage)

    @activity.defn(name=SUMMARIZE_ACTIVITY)
    async def summarize(self, request: SummaryRequest) -> SummaryReply:
        """Fold turns into the conversation's running summary: one chat completion, not streamed."""
        endpoint = self._endpoints.get(request.model, request.entry)
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
