"""An MCP server that asks the client's model during a call (`sampling/createMessage`).

Only servers whose entry in the `mcpServers` file says `"sampling": true` are told this client
samples (the others are not offered the capability, and a request from one is refused by the
SDK). Their requests are answered by the conversation's own model entry, then that entry's
fallbacks, as the call's `SamplingGrant` names it: one chat completion each, with no tools
(a server's request never reaches a tool, of the server's or of the conversation's), within
bounds of tokens and of the call's share of the conversation's budgets, its prompt counted
(`rules.sampling`). Each request becomes a `Sampled` in the call's outcome, which the
conversation counts as a model call of its own and audits.

A request is answered in the activity's context (its span, metrics and log fields), though the
session's own task receives it.
"""

from __future__ import annotations

import asyncio
import contextvars
from typing import Any

import openai
import structlog
from mcp.types import (
    INTERNAL_ERROR,
    INVALID_REQUEST,
    CreateMessageRequestParams,
    CreateMessageResult,
    ErrorData,
    TextContent,
)

from ...contract import ChatMessage, Sampled, SamplingGrant, Usage
from ...contract.bounds import clip, text_size
from ...rules.compaction import estimate_tokens
from ...rules.sampling import RequestPrice, answer_room
from ..endpoints import Endpoint, Endpoints
from ..llm_errors import error_detail
from ..llm_stream import counted
from ..models import OUTPUT_PARAMS

log = structlog.get_logger()

MAX_SAMPLES_PER_CALL = 8  # requests one run of a call may have answered
MAX_SAMPLING_TOKENS = 1_024  # what one answer may take, unless the entry allows less
MAX_PROMPT_BYTES = 32_768  # what one request may ask, its system prompt included
MAX_ASKED_BYTES = 1_000  # what the audit keeps of a request
MAX_STOP_SEQUENCES = 4  # what OpenAI's API takes
PRICED_TOKENS = 1_000_000  # an answer's price per token, as prices are given: per million


class CallSampler:
    """The conversation's model as one run of one call's server may ask it."""

    def __init__(self, endpoints: Endpoints, grant: SamplingGrant, server: str):
        self._endpoints, self._grant, self._server = endpoints, grant, server
        self.sampled: list[Sampled] = []
        self._context = contextvars.copy_context()  # the activity's

    async def sample(self, params: CreateMessageRequestParams
                     ) -> CreateMessageResult | ErrorData:
        return await asyncio.create_task(self._answer(params), context=self._context.copy())

    async def _answer(self, params: CreateMessageRequestParams
                      ) -> CreateMessageResult | ErrorData:
        bound = log.bind(server=self._server, purpose="sampling")
        messages = _prompt(params)
        refusal = messages if isinstance(messages, str) else self._refusal()
        if refusal is not None:
            bound.warning("mcp sampling request refused", reason=refusal)
            return ErrorData(code=INVALID_REQUEST, message=refusal)
        assert not isinstance(messages, str)
        asked = clip(_asked(params), MAX_ASKED_BYTES) or ""
        prompt_tokens = estimate_tokens([ChatMessage.model_validate(m) for m in messages])
        tried: list[str] = []
        unfit: list[str] = []  # why the entries not asked could not be
        for endpoint in self._chain():
            room = answer_room(self._grant, self._used(), prompt_tokens,
                               self._price(endpoint, prompt_tokens))
            if isinstance(room, str):
                unfit.append(room)
                bound.info("mcp sampling: model entry not asked", entry=endpoint.name,
                           reason=room, prompt_tokens=prompt_tokens)
                continue
            try:
                result, usage = await self._complete(endpoint, params, messages, room)
            except openai.APIError as err:
                why = error_detail(err) if isinstance(err, openai.APIStatusError) else str(err)
                tried.append(f"{endpoint.name}: {why}")
                bound.warning("mcp sampling: model entry failed", entry=endpoint.name, error=why)
                continue
            self.sampled.append(Sampled(server=self._server, asked=asked, entry=endpoint.name,
                                        usage=usage))
            bound.info("mcp sampling request answered", entry=endpoint.name,
                       total_tokens=usage.total_tokens, stop_reason=result.stop_reason)
            return result
        if not tried:  # no entry could be asked within the budgets: no model call was made
            refusal = clip("; ".join(dict.fromkeys(unfit)), MAX_ASKED_BYTES) or "no model entry"
            bound.warning("mcp sampling request refused", reason=refusal)
            return ErrorData(code=INVALID_REQUEST, message=refusal)
        why = clip("; ".join(tried), MAX_ASKED_BYTES) or "no model entry"
        self.sampled.append(Sampled(server=self._server, asked=asked, usage=Usage(failed_calls=1),
                                    error=why))
        return ErrorData(code=INTERNAL_ERROR, message=f"the client's model failed: {why}")

    def _refusal(self) -> str | None:
        """Why the call may not have another request answered whatever it asks, or None."""
        if len(self.sampled) >= MAX_SAMPLES_PER_CALL:
            return (f"this client answers at most {MAX_SAMPLES_PER_CALL} sampling requests "
                    "during one tool call")
        return self._grant.spent

    def _used(self) -> Usage:
        """What this run of the call's requests used so far."""
        return sum((s.usage for s in self.sampled), Usage())

    def _price(self, endpoint: Endpoint, prompt_tokens: int) -> RequestPrice | None:
        """What a request costs at the entry, where a cost budget needs it (None: unknown)."""
        if self._grant.usd_left is None:
            return None
        prices, model = endpoint.prices, endpoint.spec.model
        prompt, note = prices.cost(model, Usage(prompt_tokens=prompt_tokens))
        answer, _ = prices.cost(model, Usage(completion_tokens=PRICED_TOKENS))
        if prompt is None or answer is None:
            log.warning("mcp sampling: model entry has no known price", entry=endpoint.name,
                        note=note)
            return None
        return RequestPrice(prompt_usd=prompt, usd_per_answer_token=answer / PRICED_TOKENS)

    def _chain(self) -> list[Endpoint]:
        """The entry the conversation's model names, then that entry's fallbacks."""
        first = self._endpoints.get(self._grant.model, None)
        fallbacks = self._endpoints.models.fallbacks.get(first.name, [])
        return [first, *(self._endpoints.get(None, name) for name in fallbacks)]

    @staticmethod
    def _max_tokens(endpoint: Endpoint, asked: int, room: int | None) -> int:
        """What the answer may take: what the server asked, within this client's bound, the
        entry's, and the room its call's grant leaves it (`rules.sampling.answer_room`)."""
        spec = endpoint.spec
        bounds = [asked, MAX_SAMPLING_TOKENS, spec.max_output_tokens, room,
                  *(spec.params[p] for p in OUTPUT_PARAMS if isinstance(spec.params.get(p), int))]
        return max(1, min(b for b in bounds if b is not None))

    async def _complete(self, endpoint: Endpoint, params: CreateMessageRequestParams,
                        messages: list[dict[str, str]], room: int | None
                        ) -> tuple[CreateMessageResult, Usage]:
        spec = endpoint.spec
        extra = {k: v for k, v in spec.params.items() if k not in OUTPUT_PARAMS}
        asked: dict[str, Any] = {}
        if params.temperature is not None and "temperature" not in extra:
            asked["temperature"] = params.temperature
        if params.stop_sequences:
            asked["stop"] = params.stop_sequences[:MAX_STOP_SEQUENCES]
        with endpoint.traced({"agent.purpose": "sampling", "agent.mcp.server": self._server},
                             content={"gen_ai.input.messages": messages}) as call:
            completion = await endpoint.in_slot(endpoint.client.chat.completions.create(
                model=spec.model, messages=messages,  # type: ignore[arg-type]
                max_tokens=self._max_tokens(endpoint, params.max_tokens, room),
                extra_body=extra or None, **asked))
            choice = completion.choices[0] if completion.choices else None
            text = (choice.message.content or "") if choice is not None else ""
            usage = endpoint.prices.priced(spec.model, counted(completion.usage))
            call.answered(usage, content={"gen_ai.output.messages": [
                {"role": "assistant", "content": text}]})
        stop = "maxTokens" if choice is not None and choice.finish_reason == "length" else "endTurn"
        return CreateMessageResult(role="assistant", content=TextContent(type="text", text=text),
                                   model=spec.model, stop_reason=stop), usage


def _prompt(params: CreateMessageRequestParams) -> list[dict[str, str]] | str:
    """The request as chat messages, or why it cannot be answered: text only, no tools, and
    within the bound of what one request may ask."""
    if params.tools:
        return "this client gives sampling requests no tools"
    messages = [{"role": "system", "content": params.system_prompt}] if params.system_prompt \
        else []
    for message in params.messages:
        parts = message.content if isinstance(message.content, list) else [message.content]
        if not all(isinstance(part, TextContent) for part in parts):
            kinds = sorted({getattr(part, "type", "unknown") for part in parts} - {"text"})
            return f"this client samples text only, not {', '.join(kinds)}"
        messages.append({"role": message.role,
                         "content": "\n".join(part.text for part in parts)})  # type: ignore[union-attr]
    if not any(m["role"] != "system" for m in messages):
        return "the sampling request has no messages"
    size = sum(text_size(m["content"]) for m in messages)
    if size > MAX_PROMPT_BYTES:
        return (f"the sampling request is {size:,} bytes, over this client's limit of "
                f"{MAX_PROMPT_BYTES:,}")
    return messages


def _asked(params: CreateMessageRequestParams) -> str:
    """What the request asks, for the audit: its last message's text."""
    last = params.messages[-1].content
    parts = last if isinstance(last, list) else [last]
    return "\n".join(getattr(part, "text", "") for part in parts)
