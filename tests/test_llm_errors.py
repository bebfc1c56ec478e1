"""Which model endpoint errors a retry can cure, and which end the turn at once."""

from __future__ import annotations

import httpx
import openai
import pytest

from activities.llm import classify_status_error, is_retryable_status


def status_error(status: int, headers: dict | None = None) -> openai.APIStatusError:
    request = httpx.Request("POST", "http://model.test/v1/chat/completions")
    response = httpx.Response(status, headers=headers or {}, request=request,
                              json={"error": {"message": f"upstream said {status}"}})
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
    assert err.non_retryable and err.type == "LLMRequestRejected"
    assert err.message.startswith(f"model endpoint rejected the request ({status}): upstream said")


def test_unauthorized_points_at_the_key():
    assert "check OPENAI_API_KEY" in classify_status_error(status_error(401)).message


def test_retry_after_header_sets_the_next_delay():
    err = classify_status_error(status_error(429, {"retry-after": "3"}))
    assert err.next_retry_delay is not None and err.next_retry_delay.total_seconds() == 3
    assert classify_status_error(status_error(429, {"retry-after": "soon"})).next_retry_delay is None
