"""An MCP server that asks the client's model during a call (`sampling/createMessage`).

Only servers whose entry in the `mcpServers` file says `"sampling": true` are told this client
samples (the others are not offered the capability, and a request from one is refused by the
SDK). Their requests are answered by the conversation's own model entry, then that entry's
fallbacks, as the call's `SamplingGrant` names it: one chat completion each, with no tools
(a server's request never reaches a tool, of the server's or of the conversation's), within
bounds of tokens and of the conversation's budgets. Each request becomes a `Sampled` in the
call's outcome, which the conversation counts as a model call of its own and audits.

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

from activities.endpoints import Endpoint, Endpoints
from activities.llm_errors import error_detail
from activities.llm_stream import counted
from activities.models import OUTPUT_PARAMS
from contract import Sampled, SamplingGrant, Usage
from contract.bounds import clip, text_size

log = structlog.get_logger()

MAX_SAMPLES_PER_CALL = 8  # requests one run of a call may have answered
MAX_SAMPLING_TOKENS = 1_024  # what one answer may take, unless the entry allows less
MAX_PROMPT_BYTES = 32_768  # what one request may ask, its system prompt included
MAX_ASKED_BYTES = 1_000  # what the audit keeps of a request
MAX_STOP_SEQUENCES = 4  # what OpenAI's API takes


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
        tried: list[str] = []
        for endpoint in self._chain():
            try:
                result, usage = await self._complete(endpoint, params, messages)
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
        why = clip("; ".join(tried), MAX_ASKED_BYTES) or "no model entry"
        self.sampled.append(Sampled(server=self._server, asked=asked, usage=Usage(failed_calls=1),
                                    error=why))
        return ErrorData(code=INTERNAL_ERROR, message=f"the client's model failed: {why}")

    def _refusal(self) -> str | None:
        """Why the call may not have another request answered, or None."""
        if len(self.sampled) >= MAX_SAMPLES_PER_CALL:
            return (f"this client answers at most {MAX_SAMPLES_PER_CALL} sampling requests "
                    "during one tool call")
        used = sum((s.usage for s in self.sampled), Usage())
        grant = self._grant
        if grant.tokens_left is not None and used.total_tokens >= grant.tokens_left:
            return "the conversation's token budget is used up"
        if grant.usd_left is not None and used.known_cost >= grant.usd_left:
            return "the conversation's cost budget is used up"
        return None

    def _chain(self) -> list[Endpoint]:
        """The entry the conversation's model names, then that entry's fallbacks."""
        first = self._endpoints.get(self._grant.model, None)
        fallbacks = self._endpoints.models.fallbacks.get(first.name, [])
        return [first, *(self._endpoints.get(None, name) for name in fallbacks)]

    def _max_tokens(self, endpoint: Endpoint, asked: int) -> int:
        """What the answer may take: what the server asked, within this client's bound, the
        entry's, and what is left of the conversation's token budget."""
        spec = endpoint.spec
        bounds = [asked, MAX_SAMPLING_TOKENS, spec.max_output_tokens,
                  *(spec.params[p] for p in OUTPUT_PARAMS if isinstance(spec.params.get(p), int))]
        if self._grant.tokens_left is not None:
            used = sum(s.usage.total_tokens for s in self.sampled)
            bounds.append(self._grant.tokens_left - used)
        return max(1, min(b for b in bounds if b is not None))

    async def _complete(self, endpoint: Endpoint, params: CreateMessageRequestParams,
                        messages: list[dict[str, str]]) -> tuple[CreateMessageResult, Usage]:
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
                max_tokens=self._max_tokens(endpoint, params.max_tokens),
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
