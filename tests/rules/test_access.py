"""Who may do what, as pure rules: the roles of DESIGN "Who may do what", the tokens that carry
them (in the environment or as SHA-256 in a file), and four eyes in the gate."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from pathlib import Path

import pytest

from durable_react_agent.activities.settings import four_eyes
from durable_react_agent.api.access import (
    ADMIN,
    Principal,
    TokenBook,
    TokenError,
    Verdict,
    hash_token,
)
from durable_react_agent.api.settings import ApiSettings, SettingsError
from durable_react_agent.contract import (
    ApprovalPolicy,
    ConfirmRequest,
    RejectRequest,
    ToolDefinition,
)
from durable_react_agent.rules.gate import PendingCall, four_eyes_refusal, needs_approval

A, B = "alice", "bob"
ALLOWED, FORBIDDEN, HIDDEN = Verdict.ALLOWED, Verdict.FORBIDDEN, Verdict.HIDDEN


def who(*roles: str, name: str = A) -> Principal:
    return Principal(name, frozenset(roles))  # type: ignore[arg-type]


# role -> action -> (on alice's own conversation, on bob's, on one with no owner)
EXPECTED = {
    "viewer": {"read": (ALLOWED, ALLOWED, ALLOWED), "message": (FORBIDDEN,) * 3,
               "decide": (FORBIDDEN,) * 3, "end": (FORBIDDEN,) * 3},
    "user": {"read": (ALLOWED, HIDDEN, HIDDEN), "message": (ALLOWED, HIDDEN, HIDDEN),
             "decide": (ALLOWED, HIDDEN, HIDDEN), "end": (ALLOWED, HIDDEN, HIDDEN)},
    "approver": {"read": (ALLOWED,) * 3, "message": (ALLOWED, FORBIDDEN, FORBIDDEN),
                 "decide": (ALLOWED,) * 3, "end": (ALLOWED, FORBIDDEN, FORBIDDEN)},
    "admin": {action: (ALLOWED,) * 3 for action in ("read", "message", "decide", "end")},
}


@pytest.mark.parametrize("role", EXPECTED)
def test_each_role_may_what_the_design_says(role: str):
    principal = who(role)
    for action, verdicts in EXPECTED[role].items():
        got = tuple(principal.may(action, owner) for owner in (A, B, None))  # type: ignore[arg-type]
        assert got == verdicts, (role, action)
    assert principal.may_start == (role != "viewer")
    assert principal.may_write == (role != "viewer")
    assert principal.sees_all == (role != "user")


def test_several_roles_may_what_any_of_them_may():
    both = who("viewer", "user")
    assert both.may("read", B) is ALLOWED  # the viewer's
    assert both.may("message", A) is ALLOWED  # the user's
    assert both.may("message", B) is FORBIDDEN  # seen (as a viewer), so not hidden
    assert both.may_start and both.may_write and both.sees_all
    assert both.describe() == "alice (viewer+user)"


def test_tokens_carry_roles_and_a_token_without_one_is_an_admin():
    book = TokenBook.load("alice:tok-a:user,bob:tok-b:approver+viewer,vic:tok-v:viewer,"
                          "root:tok-r:admin,old:tok-o,colon:x:y:z")
    assert book.find("tok-a") == who("user")
    assert book.find("tok-b") == who("approver", "viewer", name=B)
    assert book.find("tok-o").roles == ADMIN  # as before roles existed
    # a token may hold `:`, as before: only a last part that names roles is taken as roles
    assert book.find("x:y:z").name == "colon" and book.find("x:y:z").roles == ADMIN
    assert book.find("tok-a ") is None and book.find("TOK-A") is None and book.find("") is None


def test_the_book_keeps_no_token_only_its_digest():
    book = TokenBook.load("alice:secret-token:user")
    assert all(entry.digest == hashlib.sha256(b"secret-token").digest() for entry in book.entries)
    assert "secret-token" not in repr(book.entries)


def test_a_tokens_file_holds_sha256_only(tmp_path: Path):
    tokens = tmp_path / "tokens"
    tokens.write_text(f"# who may call\n\nalice:{hash_token('tok-a')}:user\n"
                      f"root:{hash_token('tok-r').upper()}\n")
    book = TokenBook.load("vic:tok-v:viewer", tokens)  # both sources count
    assert book.find("tok-a") == who("user")
    assert book.find("tok-r").roles == ADMIN
    assert book.find("tok-v").roles == {"viewer"}
    assert book.find(hash_token("tok-a")) is None  # the digest is not itself a token
    settings = ApiSettings.from_env({"AGENT_API_TOKENS_FILE": str(tokens),
                                     "AGENT_API_ADDRESS": "0.0.0.0:8000"})
    assert settings.auth_required  # a file alone lets the API listen beyond loopback


@pytest.mark.parametrize("line, why", [
    ("alice:tok-a", "64 hex digits"),  # a token in clear: refused, it belongs in the env
    (f"alice:{'0' * 64}:boss", "not a role"),
    (f"al ice:{'0' * 64}", "is not 1-64 characters"),
    ("alice", "name:<sha256 hex>"),
])
def test_a_bad_tokens_file_line_is_named(tmp_path: Path, line: str, why: str):
    tokens = tmp_path / "tokens"
    tokens.write_text(f"# header\n{line}\n")
    with pytest.raises(TokenError, match=why) as err:
        TokenBook.load("", tokens)
    assert f"{tokens}:2" in str(err.value)


def test_bad_tokens_refuse_to_start(tmp_path: Path):
    for env in [{"AGENT_API_TOKENS": "alice:t,bob:t"},  # one token, two people
                {"AGENT_API_TOKENS": "a\"b:t"},  # a name no query or audit can hold
                {"AGENT_API_TOKENS": "alice:t:user", "AGENT_API_TOKENS_FILE": str(tmp_path)},
                {"AGENT_API_TOKENS_FILE": str(tmp_path / "missing")}]:
        with pytest.raises(SettingsError):
            ApiSettings.from_env(env)
    tokens = tmp_path / "tokens"
    tokens.write_text(f"bob:{hash_token('t')}\n")
    with pytest.raises(SettingsError, match="same token"):
        ApiSettings.from_env({"AGENT_API_TOKENS": "alice:t", "AGENT_API_TOKENS_FILE": str(tokens)})


def test_four_eyes_setting():
    assert four_eyes("") == ()
    assert four_eyes(" Destructive , sensitive,destructive") == ("destructive", "sensitive")
    with pytest.raises(ValueError, match="AGENT_FOUR_EYES names 'safe'"):
        four_eyes("safe")
    with pytest.raises(ValueError, match="'delete'"):
        four_eyes("destructive,delete")


def tool(name: str, risk: str) -> ToolDefinition:
    return ToolDefinition(name=name, description="", risk=risk,  # type: ignore[arg-type]
                          parameters={"type": "object", "properties": {}})


def test_four_eyes_calls_always_wait_for_a_person():
    trusting = ApprovalPolicy(require_approval_for=[], auto_approve=["delete_note"])
    assert not needs_approval(tool("delete_note", "destructive"), trusting)
    assert needs_approval(tool("delete_note", "destructive"), trusting, ["destructive"])
    assert not needs_approval(tool("create_note", "sensitive"), trusting, ["destructive"])


def test_four_eyes_refuses_the_owner_only_on_those_risks():
    pending = {"c1": PendingCall("c1", tool("delete_note", "destructive"), {"note_id": 1}),
               "c2": PendingCall("c2", tool("create_note", "sensitive"), {})}
    refusal = four_eyes_refusal(["c2", "c1"], pending, A, A, ["destructive"])
    assert refusal is not None and refusal.final
    assert refusal.reason.startswith("four eyes: call c1 (delete_note, destructive)")
    assert A in refusal.reason
    assert four_eyes_refusal(["c2"], pending, A, A, ["destructive"]) is None  # not that risk
    assert four_eyes_refusal(["c1"], pending, B, A, ["destructive"]) is None  # someone else
    assert four_eyes_refusal(["c1"], pending, A, None, ["destructive"]) is None  # no owner
    assert four_eyes_refusal(["c1"], pending, A, A, []) is None  # not set on the worker


def test_a_conversation_refuses_the_owners_decision_and_keeps_the_call_pending(monkeypatch):
    from durable_react_agent.contract.state import ContextState, ConversationState
    from durable_react_agent.rules.gate import Refusal
    from tests.decisions_support import decisions, plain_logger

    plain_logger(monkeypatch)
    state = ConversationState(context=ContextState(system_prompt=""), four_eyes=["destructive"])
    desk = decisions(state, owner=A)
    desk.approvals.hold("c1", tool("delete_note", "destructive"), {"note_id": 1})
    now = datetime(2026, 12, 1, tzinfo=UTC)
    for request in (ConfirmRequest(request_id="r1", call_ids=["c1"], approver=A),
                    RejectRequest(request_id="r2", all=True, approver=A, reason="no")):
        result = desk.receive(request, now).result
        assert isinstance(result, Refusal) and result.reason.startswith("four eyes")
        assert desk.waiting_status() == "waiting_for_confirmation"
        assert desk.memory.outcome(request.request_id).accepted is False
    decided = desk.receive(ConfirmRequest(request_id="r3", call_ids=["c1"], approver=B), now).result
    assert [d.approver for d in decided] == [B] and desk.waiting_status() is None
