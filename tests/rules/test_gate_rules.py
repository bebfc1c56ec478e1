"""Unit tests of the human gate's pure rules."""

from __future__ import annotations

from datetime import datetime, timezone

from durable_react_agent.activities.tools import default_registry
from durable_react_agent.contract import ApprovalPolicy, Decision, Question
from durable_react_agent.rules.gate import (
    AnswerCheck,
    PendingCall,
    Refusal,
    args_hash,
    check_answer,
    check_edited_args,
    needs_approval,
    select_calls,
)

TOOLS = {t.name: t for t in default_registry().definitions()}


def pending(call_id: str, decided: bool = False) -> PendingCall:
    p = PendingCall(call_id, TOOLS["create_note"], {"title": "t", "body": "b"})
    if decided:
        p.decision = Decision(call_id=call_id, tool="create_note", approved=True, approver="ann",
                              at=datetime(2026, 1, 1, tzinfo=timezone.utc), args_hash="x")
    return p


def test_default_policy_gates_every_non_safe_tool():
    policy = ApprovalPolicy()
    assert not needs_approval(TOOLS["get_weather"], policy)
    assert not needs_approval(TOOLS["list_notes"], policy)
    assert needs_approval(TOOLS["create_note"], policy)
    assert needs_approval(TOOLS["delete_note"], policy)


def test_policy_can_auto_approve_by_name_or_relax_by_risk():
    assert not needs_approval(TOOLS["create_note"], ApprovalPolicy(auto_approve=["create_note"]))
    only_destructive = ApprovalPolicy(require_approval_for=["destructive"])
    assert not needs_approval(TOOLS["create_note"], only_destructive)
    assert needs_approval(TOOLS["delete_note"], only_destructive)


def test_select_calls_names_undecided_calls_or_refuses():
    table = {"a": pending("a"), "b": pending("b", decided=True), "c": pending("c")}
    past = {"old": "it was already approved by ann"}
    assert select_calls([], True, table, past) == ["a", "c"]
    assert select_calls(["c", "a"], False, table, past) == ["c", "a"]
    assert select_calls(["b"], False, table, past) == Refusal("call b was already approved by ann")
    assert select_calls(["old"], False, table, past) == Refusal("call old is stale: it was already approved by ann")
    # what a result on its way may still bring is not refused for good (`final` False)
    assert select_calls(["zzz"], False, table, past) == Refusal("unknown call id zzz", final=False)
    assert select_calls(["a", "a"], False, table, past) == Refusal("a call id is named twice")
    assert select_calls([], False, table, past) == Refusal("name at least one call id, or all")
    assert select_calls(["a"], True, table, past) == Refusal("name call ids or all, not both")
    assert select_calls([], True, {"b": table["b"]}, past) == Refusal(
        "no call is waiting for a decision", final=False)


def test_edited_args_must_name_one_call_and_fit_the_schema():
    p = pending("a")
    assert check_edited_args(p, {"title": "x", "body": "y"}, ["a"]) is None
    assert "exactly one call id" in check_edited_args(p, {"title": "x", "body": "y"}, []).reason
    assert "'body' is a required property" in check_edited_args(p, {"title": "x"}, ["a"]).reason
    assert "must be a JSON object" in check_edited_args(p, ["x"], ["a"]).reason


def test_args_hash_is_canonical():
    assert args_hash({"a": 1, "b": "é"}) == args_hash({"b": "é", "a": 1})
    assert args_hash({"a": 1}) != args_hash({"a": 2})
    assert args_hash({}).startswith("sha256:")


def test_answers_are_checked_by_kind():
    choice = Question(kind="choice", message="?", options=["red", "blue"])
    assert check_answer(choice, ["blue"]) == AnswerCheck("blue", ["blue"])
    assert check_answer(choice, ["green"]).reason.startswith("'green' is not one of the options")
    assert check_answer(choice, ["red", "blue"]) == Refusal("choose exactly one option")
    multi = Question(kind="multi_choice", message="?", options=["a", "b", "c"])
    assert check_answer(multi, ["c", "a"]).text == '["c", "a"]'
    assert check_answer(multi, ["a", "a"]) == Refusal("an option is chosen twice")
    assert isinstance(check_answer(multi, ["d"]), Refusal)
    confirm = Question(kind="confirm", message="?")
    assert check_answer(confirm, ["YES"]).text == "yes"
    assert check_answer(confirm, ["n"]).text == "no"
    assert check_answer(confirm, ["perhaps"]) == Refusal("answer yes or no")
    free = Question(kind="input", message="?")
    assert check_answer(free, ["two", "words"]).text == "two words"
    assert check_answer(free, ["  "]) == Refusal("the answer is empty")
