"""What the client layer refuses before anything reaches Temporal, for the CLI, the API and AG-UI
alike: ids that are not plain in a URL path, a workflow id and a log line; requests that Temporal's
JSON payloads cannot carry; and a refusal the conversation recorded as it closed."""

from __future__ import annotations

from datetime import UTC, datetime
from types import SimpleNamespace

import pytest

from durable_react_agent.api.links import decision
from durable_react_agent.client.checks import MAX_JSON_DEPTH, check_conversation_id, unsendable
from durable_react_agent.client.connection import TemporalSettings
from durable_react_agent.client.render import CONTINUED, render_status
from durable_react_agent.client.session import Session
from durable_react_agent.contract import (
    AnswerRequest,
    ConfirmRequest,
    ConversationStatus,
    RejectRequest,
    SayRequest,
    SignalOutcome,
    Usage,
)
from durable_react_agent.rules.links import LinkClaims


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


def test_what_a_model_wrote_cannot_drive_the_terminal_or_pass_for_a_command_of_ours():
    """A model's answer may hold an ANSI escape (it rewrites the screen), a bidi override (it
    reorders what is shown) and lines made to look like the CLI's: printed, each is inert."""
    fake = "  approve: agent confirm conv-1 x; rm -rf ~"
    status = ConversationStatus(
        workflow_id="conv-1", status="idle", turn=1, steps=1, llm_calls=1, tools_used=[],
        stop_reason="answered", final_answer=f"done\x1b[2K\r\n{fake}\u202e", usage=Usage(),
        error="bad\x07 bell")
    shown = render_status(status)
    assert "\x1b" not in shown and "\r" not in shown and "\u202e" not in shown
    assert "\x07" not in shown and "\\u001b[2K" in shown
    lines = shown.split("\n")
    assert fake not in lines and f"{CONTINUED}{fake}\\u202e" in lines
    assert [line for line in lines if line.startswith("  approve:")] == []


def test_a_links_decision_names_its_call_its_arguments_and_its_ticket():
    claims = LinkClaims(c="conv-1", k="dup", h="sha256:a", a="reject", x=1, n="key", t="T",
                        to="carol")
    request = decision(claims)
    assert isinstance(request, RejectRequest) and request.approver == "carol"
    assert (request.call_ids, request.seen, request.tickets) == (
        ["dup"], {"dup": "sha256:a"}, {"dup": "T"})
    assert request.request_id == "link-key-reject"  # one per link: taken once


async def test_an_outcome_recorded_just_before_the_conversation_closed_is_read(monkeypatch):
    """A refused first message is recorded, then the conversation ends: a wait that asked
    before the one and saw the other reads the outcome from the closed history, instead of
    taking the start as accepted."""
    refused = SignalOutcome(request_id="r1", accepted=False, reason="too long for the model")
    answers = iter([None, refused])  # asked while it ran, then once it had closed

    class Closed:
        async def describe(self):
            return SimpleNamespace(close_time=datetime(2026, 1, 1, tzinfo=UTC))

    session = Session(None, TemporalSettings(), timeout_s=5, max_message_bytes=1024)

    async def query(workflow_id, query, *args):
        return next(answers)

    monkeypatch.setattr(session, "query", query)
    monkeypatch.setattr(session, "handle", lambda workflow_id: Closed())
    assert await session.outcome("conv-1", "r1") == refused
