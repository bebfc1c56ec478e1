"""How a model endpoint's failures read: an HTTP error told apart as transient (retried, after
its Retry-After), of the model entry (a fallback may answer), a prompt longer than the model's
window (with the window and the prompt's size where the endpoint says them), or the request's
own fault; and an error inside a stream, such as a server's parser failing on the model's
output."""

from __future__ import annotations

import re
from collections.abc import Awaitable
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from typing import Any, TypeVar

import openai
from temporalio.exceptions import ApplicationError

from ..contract.bounds import valid_text

T = TypeVar("T")

# Statuses a retry can cure; every other HTTP error is the request's fault and is final.
RETRYABLE_STATUSES = frozenset({408, 409, 429})
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
    detail = valid_text(error_detail(exc)[:MAX_DETAIL_CHARS])  # it goes into the history
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


async def classified(call: Awaitable[T]) -> T:
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


def error_detail(exc: openai.APIStatusError) -> str:
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
