"""Which model endpoint errors a retry can cure, and which end the turn at once."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import httpx
import openai
import pytest

from durable_react_agent.activities.llm_errors import (
    _retry_after,
    classify_status_error,
    is_retryable_status,
)


def status_error(status: int, headers: dict | None = None, message: str | None = None,
                 code: str | None = None) -> openai.APIStatusError:
    request = httpx.Request("POST", "http://model.test/v1/chat/completions")
    response = httpx.Response(status, headers=headers or {}, request=request,
                              json={"error": {"message": message or f"upstream said {status}",
                                              "code": code}})
    body = response.json()
    return openai.APIStatusError(f"Error code: {status}", response=response, body=body)


@pytest.mark.parametrize("status", [408, 409, 429, 500, 502, 503, 504])
def test_transient_statuses_are_retried(status: int):
    assert is_retryable_status(status)
    err = classify_status_error(status_error(status))
    assert not err.non_retryable and err.type == "LLMTransientError"
    assert f"upstream said {status}" in err.message


@pytest.mark.parametrize("status", [400, 401, 403, 404, 422])
def test_request_errors_are_final_with_a_clear_message(status: int):
    assert not is_retryable_status(status)
    err = classify_status_error(status_error(status))
    # the key or the model of this entry (a fallback entry may answer), or the request itself
    assert err.non_retryable and err.type == (
        "LLMModelUnavailable" if status in (401, 403, 404) else "LLMRequestRejected")
    assert err.message.startswith(f"model endpoint rejected the request ({status}): upstream said")


def test_unauthorized_points_at_the_key():
    assert "check OPENAI_API_KEY" in classify_status_error(status_error(401)).message


def test_retry_after_header_sets_the_next_delay():
    err = classify_status_error(status_error(429, {"retry-after": "3"}))
    assert err.next_retry_delay is not None and err.next_retry_delay.total_seconds() == 3
    assert classify_status_error(status_error(429, {"retry-after": "soon"})).next_retry_delay is None
    for odd in ("0", "-5", "nan", ""):
        assert classify_status_error(status_error(503, {"retry-after": odd})).next_retry_delay \
            is None
    assert classify_status_error(status_error(429, {"retry-after": "86400"})) \
        .next_retry_delay.total_seconds() == 60  # at most a minute


def test_retry_after_as_an_http_date():
    now = datetime(2026, 12, 1, 12, 0, 0, tzinfo=UTC)
    later = format_datetime(now + timedelta(seconds=7), usegmt=True)
    assert _retry_after(status_error(429, {"retry-after": later}), now) == timedelta(seconds=7)
    earlier = format_datetime(now - timedelta(seconds=7), usegmt=True)
    assert _retry_after(status_error(429, {"retry-after": earlier}), now) is None


@pytest.mark.parametrize("status, message, code", [
    (400, "This model's maximum context length is 8192 tokens. However, your messages resulted "
          "in 9000 tokens. Please reduce the length of the messages.", "context_length_exceeded"),
    (400, "prompt is too long: 210000 tokens > 200000 maximum", None),  # Anthropic
    (400, "The input token count (1200000) exceeds the maximum number of tokens allowed "
          "(1048576).", None),  # Gemini
    (400, "Prompt contains 40000 tokens and 0 draft tokens, too large for model with 32768 "
          "maximum context length", None),  # Mistral
    (400, "This model's maximum context length is 4096 tokens. However, you requested 5000 "
          "tokens (4000 in the messages, 1000 in the completion).", None),  # vLLM
    (413, "anything at all", "context_length_exceeded"),
])
def test_a_prompt_too_long_for_the_model_is_told_apart(status, message, code):
    err = classify_status_error(status_error(status, message=message, code=code))
    assert err.type == "LLMContextTooLong" and err.non_retryable


@pytest.mark.parametrize("status, message", [
    (400, "Invalid 'messages[2].role': the context of a tool message must follow a call"),
    (429, "maximum context length is 8192 tokens"),  # a rate limit, whatever it says
    (500, "prompt is too long"),
])
def test_other_errors_mentioning_the_context_are_not(status, message):
    assert classify_status_error(status_error(status, message=message)).type != "LLMContextTooLong"
