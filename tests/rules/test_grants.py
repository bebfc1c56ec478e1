"""Grants' pure rules (`rules.grants`): what may be remembered, which grant covers a call, and
when a grant stops (in conversations: tests/workflows/test_policy.py)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from durable_react_agent.rules.grants import (
    covering,
    describe,
    grant_note,
    live,
    new_grant,
    remember_refusal,
    ungrantable,
    used,
)

AT = datetime(2026, 12, 4, 10, 2, tzinfo=timezone.utc)


@pytest.mark.parametrize(("remember", "for_s", "uses", "says"), [
    ("forever", None, None, "remember must be one of call, args, conversation, owner"),
    (None, 600.0, None, "for and uses apply to a remembered approval"),
    ("call", None, 3, "for and uses apply to a remembered approval"),
    ("conversation", 0.0, None, "for must be more than 0 s and at most 30 days"),
    ("conversation", 31 * 86400.0, None, "at most 30 days"),
    ("args", None, 0, "uses must be between 1 and 10,000"),
])
def test_a_remember_that_cannot_be_taken_says_why(remember, for_s, uses, says):
    assert says in remember_refusal(remember, for_s, uses)


def test_what_may_be_remembered():
    assert remember_refusal("conversation", 600.0, 5) is None and remember_refusal(None, None, None) is None
    assert ungrantable("create_note", "sensitive", None, (), owned=True) is None
    assert "it is destructive" in ungrantable("delete_note", "destructive", None, (), owned=True)
    assert ungrantable("delete_note", "destructive", True, (), owned=True) is None  # a rule says so
    assert "a policy rule says so" in ungrantable("create_note", "sensitive", False, (), owned=True)
    assert "four eyes covers" in ungrantable("create_note", "sensitive", True, ("sensitive",), owned=True)
    # a conversation with no recorded owner has nobody four eyes holds to
    assert ungrantable("create_note", "sensitive", None, ("sensitive",), owned=False) is None
    assert "asks 2 different people" in ungrantable("pay", "sensitive", True, (), True, quorum=2)


def test_the_narrowest_grant_covers_a_call_until_it_expires_or_is_used_up():
    tool_wide = new_grant(1, "create_note", "conversation", "h1", "alice", AT, 600.0, None)
    these_args = new_grant(2, "create_note", "args", "h2", "bob", AT, None, 1)
    grants = [tool_wide, these_args]
    assert tool_wide.args_hash is None and these_args.args_hash == "h2"
    assert covering(grants, "create_note", "h2", AT) == these_args
    assert covering(grants, "create_note", "h9", AT) == tool_wide
    assert covering(grants, "delete_note", "h2", AT) is None
    later = AT + timedelta(seconds=600)
    assert covering(grants, "create_note", "h9", later) is None  # expired on workflow time
    spent = used(these_args)
    assert (spent.uses_left, spent.used) == (0, 1)
    assert live([tool_wide, spent], AT) == [tool_wide]
    assert used(tool_wide).uses_left is None


def test_the_audit_names_the_granter_the_time_and_the_reach():
    grant = new_grant(3, "create_note", "conversation", "h", "alice", AT, 600.0, 2, ["approver"])
    assert grant_note(grant) == ("allowed by alice's grant g3 of 2026-12-04 10:02 UTC for "
                                 "create_note in this conversation")
    assert describe(grant) == ("g3: create_note in this conversation (until 2026-12-04 10:12:00 "
                               "UTC, 2 use(s) left)")
    assert grant.roles == ["approver"]
