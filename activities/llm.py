"""The LLM activity: one chat completion against any OpenAI-compatible endpoint."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import openai
import structlog
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.heartbeat import heartbeating
from activities.settings import ActivitySettings
from workflows.models import ChatMessage, FunctionCall, LLMReply, LLMRequest, ToolCall, Usage

log = structlog.get_logger()

# Statuses a retry can cure; every other HTTP error is the request's fault and is final.
RETRYABLE_STATUSES = frozenset({408, 409, 429})
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


class LLMActivities:
    def __init__(self, settings: ActivitySettings, client: openai.AsyncOpenAI | None = None):
        self._default_model = settings.openai_model
        # Local endpoints (Ollama, vLLM) need no key, but the SDK insists on one.
        self._client = client or openai.AsyncOpenAI(
            api_key=settings.openai_api_key or "unset",
            base_url=settings.openai_base_url,
            max_retries=0,  # Temporal's retry policy owns retries.
        )

    @activity.defn(name="llm_call")
    async def llm_call(self, request: LLMRequest) -> LLMReply:
        model = request.model or self._default_model
        kwargs: dict[str, Any] = {
            "model": model,
            "messages": [m.to_openai() for m in request.messages],
        }
        if request.tools:
            kwargs["tools"] = request.tools
            kwargs["tool_choice"] = request.tool_choice
        try:
            completion = await heartbeating(self._client.chat.completions.create(**kwargs))
        except openai.APIStatusError as exc:
            raise classify_status_error(exc) from None
        except openai.APIConnectionError as exc:  # includes APITimeoutError
            raise ApplicationError(
                f"model endpoint unreachable: {exc}", type="LLMTransientError"
            ) from None
        reply = _to_reply(completion, model)
        log.info(
            "llm reply",
            model=model,
            step=request.step,
            turn=request.turn,
            tool_calls=len(reply.message.tool_calls or []),
            finish_reason=reply.finish_reason,
            total_tokens=reply.usage.total_tokens,
        )
        return reply


def _to_reply(completion: Any, model: str) -> LLMReply:
    if not completion.choices:
        return LLMReply(message=ChatMessage(role="assistant", content=""), model=model)
    choice = completion.choices[0]
    msg = choice.message
    calls = [
        ToolCall(
            id=c.id,
            function=FunctionCall(name=c.function.name, arguments=c.function.arguments or ""),
        )
        for c in (msg.tool_calls or [])
        if getattr(c, "function", None) is not None
    ]
    usage = Usage()
    if completion.usage is not None:
        usage = Usage(
            prompt_tokens=completion.usage.prompt_tokens or 0,
            completion_tokens=completion.usage.completion_tokens or 0,
            total_tokens=completion.usage.total_tokens or 0,
        )
    return LLMReply(
        message=ChatMessage(role="assistant", content=msg.content, tool_calls=calls or None),
        usage=usage,
        finish_reason=choice.finish_reason,
        model=completion.model or model,
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
