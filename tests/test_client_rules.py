"""What the client layer refuses before anything reaches Temporal, for the CLI, the API and AG-UI
alike: ids that are not plain in a URL path, a workflow id and a log line; requests that Temporal's
JSON payloads cannot carry."""

from __future__ import annotations

import pytest

from client.session import MAX_JSON_DEPTH, check_conversation_id, unsendable
from workflows.models import AnswerRequest, ConfirmRequest, SayRequest


@pytest.mark.parametrize("cid", ["conv-1a2b", "web-1", "3f2c8d0e-uuid-v4", "team.alice:42",
                                 "a@b+c=d", "_x", "x" * 200])
def test_plain_ids_name_conversations(cid: str):
    assert check_conversation_id(cid) is None


@pytest.mark.parametrize("cid", ["", "a/b", "../x", "with space", "a?b", "a#b", "line\nbreak",
                                 "tab\t", "%d%s", "conv-\u00e9", "-x", ".hidden", "x" * 201,
                                 "parent/call_0"])
def test_other_ids_are_refused_with_the_rule(cid: str):
    reason = check_conversation_id(cid)
    assert reason is not None and "letters, digits" in reason


def nested(depth: int) -> list:
    value: list = []
    for _ in range(depth - 1):
        value = [value]
    return value


@pytest.mark.parametrize("request_", [
    SayRequest(text="lone \ud800 surrogate"),
    AnswerRequest(values=["\udfff"]),
    ConfirmRequest(call_ids=["c"], args={"\ud83d": 1}),  # in a key too
    ConfirmRequest(call_ids=["c"], args={"deep": nested(MAX_JSON_DEPTH + 1)}),
])
def test_requests_temporal_cannot_carry_are_refused_before_sending(request_):
    assert unsendable(request_) is not None


def test_ordinary_requests_are_sendable():
    assert unsendable(SayRequest(text="emoji 🦀, NUL \x00, BOM \ufeff")) is None
    assert unsendable(ConfirmRequest(call_ids=["c"], args={"deep": nested(MAX_JSON_DEPTH - 2)})) is None
