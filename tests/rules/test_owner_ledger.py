"""An owner's ledger as pure decisions (`rules.owner_ledger`): what is granted, what waits and
why, in which order waiting asks are granted, and that no sequence of asks, uses and give-backs
takes an owner past a daily limit."""

from __future__ import annotations

from datetime import datetime, timezone

from hypothesis import given, settings
from hypothesis import strategies as st

from durable_react_agent.contract.owner import (
    GiveBack,
    LeaseAsk,
    LedgerState,
    OwnerLimits,
    SetLimits,
)
from durable_react_agent.rules import owner_ledger as ledger

NOW = datetime(2026, 12, 4, 10, tzinfo=timezone.utc)


def asked(conversation: str, seq: int = 1, slot: bool = True, tokens: int = 0, need: int = 0,
          **limits) -> LeaseAsk:
    return LeaseAsk(key=f"{conversation}#1", conversation_id=conversation, seq=seq, slot=slot,
                    tokens=tokens, need_tokens=need, configured=OwnerLimits(**limits))


def test_turns_past_the_limit_wait_in_order_and_a_give_back_lets_the_first_go():
    state = LedgerState(owner="alice", day="2026-12-04")
    assert ledger.ask(state, asked("a", running_turns=2), NOW).granted
    assert ledger.ask(state, asked("b", running_turns=2), NOW).granted
    third = ledger.ask(state, asked("c", running_turns=2), NOW)
    assert (third.granted, third.waits_for) == (False, "running_turns")
    assert third.why == "queued behind 2 running turn(s) of alice (at most 2 at once)"
    fourth = ledger.ask(state, asked("d", running_turns=2), NOW)
    assert fourth.why == ("queued behind 2 running turn(s) of alice and 1 more waiting (at most "
                          "2 at once)")
    assert ledger.ask(state, asked("c", running_turns=2), NOW) == third  # sent again: the same
    assert ledger.grant_waiting(state, NOW) == []
    assert ledger.give_back(state, GiveBack(key="a#1"))
    granted = ledger.grant_waiting(state, NOW)
    assert [(cid, lease.granted) for cid, lease in granted] == [("c", True)]
    assert [w.ask.conversation_id for w in state.waiting] == ["d"]
    assert state.waiting[0].why == "queued behind 2 running turn(s) of alice (at most 2 at once)"
    assert ledger.view(state).running == ["b", "c"]


def test_an_ask_sent_again_after_it_was_granted_gets_the_same_grant_and_no_more():
    state = LedgerState(owner="alice")
    first = ledger.ask(state, asked("a", tokens=10, need=5, daily_tokens=100), NOW)
    assert (first.granted, first.tokens) == (True, 10)
    assert ledger.ask(state, asked("a", tokens=10, need=5, daily_tokens=100), NOW) == first
    assert ledger.held_tokens(state) == 10
    top_up = ledger.ask(state, asked("a", seq=2, slot=False, tokens=20, need=5,
                                     daily_tokens=100), NOW)
    assert (top_up.granted, top_up.tokens, ledger.held_tokens(state)) == (True, 20, 30)


def test_a_budget_grants_what_is_free_down_to_the_need_and_a_turn_that_needs_more_waits():
    state = LedgerState(owner="bob", day="2026-12-04", used_tokens=80)
    lease = ledger.ask(state, asked("a", tokens=30, need=10, daily_tokens=100), NOW)
    assert (lease.granted, lease.tokens) == (True, 20)  # 20 were free; it needed 10
    waits = ledger.ask(state, asked("b", tokens=30, need=10, daily_tokens=100), NOW)
    assert waits.waits_for == "daily_tokens"
    assert waits.why == ("bob's daily budget of 100 tokens is spent: 80 tokens used today and "
                         "20 tokens set aside for running turns; the next model call needs 10 "
                         "tokens (it goes on when turns end, at 00:00 UTC, or when an admin "
                         "raises the limit)")
    ledger.give_back(state, GiveBack(key="a#1", used_tokens=5))  # 15 of its 20 come back
    [(cid, lease)] = ledger.grant_waiting(state, NOW)
    assert (cid, lease.tokens, state.used_tokens) == ("b", 15, 85)


def test_a_new_day_and_an_admin_s_raise_let_waiting_turns_go_on():
    state = LedgerState(owner="bob", day="2026-12-03", used_tokens=100)
    ledger.ask(state, asked("a", tokens=10, need=10, daily_tokens=100), NOW)
    assert state.waiting and ledger.grant_waiting(state, NOW) == []
    assert ledger.new_day(state, "2026-12-04") and state.used_tokens == 0
    assert [cid for cid, _ in ledger.grant_waiting(state, NOW)] == ["a"]

    state = LedgerState(owner="bob", day="2026-12-04", used_tokens=100)
    ledger.ask(state, asked("a", tokens=10, need=10, daily_tokens=100), NOW)
    ledger.set_limits(state, SetLimits(limits=OwnerLimits(daily_tokens=500)))
    assert state.limits.daily_tokens == 500
    assert [cid for cid, _ in ledger.grant_waiting(state, NOW)] == ["a"]
    ledger.set_limits(state, SetLimits(limits=OwnerLimits(running_turns=3)))
    assert state.limits == OwnerLimits(running_turns=3, daily_tokens=500)
    ledger.set_limits(state, SetLimits(reset=True))
    assert state.limits == OwnerLimits(daily_tokens=100)  # the worker's again


def test_a_closed_conversation_s_lease_counts_as_spent_and_its_ask_is_withdrawn():
    state = LedgerState(owner="carol")
    ledger.ask(state, asked("gone", tokens=40, need=10, running_turns=1, daily_tokens=100), NOW)
    ledger.ask(state, asked("next", tokens=40, need=10, running_turns=1, daily_tokens=100), NOW)
    ledger.ask(state, asked("also-gone", tokens=40, need=10, running_turns=1,
                            daily_tokens=100), NOW)
    assert ledger.reclaim(state, {"gone", "also-gone"}) == 1
    assert state.used_tokens == 40 and [w.ask.conversation_id for w in state.waiting] == ["next"]
    assert ledger.give_back(state, GiveBack(key="gone#1", used_tokens=5)) is False  # booked
    assert state.used_tokens == 40
    assert [cid for cid, _ in ledger.grant_waiting(state, NOW)] == ["next"]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["ask", "use", "give_back", "raise", "day"]),
                          st.integers(0, 7), st.integers(1, 60)), max_size=60),
       st.integers(20, 200))
def test_no_sequence_of_asks_uses_and_give_backs_spends_past_the_day_s_limit(steps, limit):
    """Each turn uses at most what it was granted (what a call's reservation holds it to):
    spending plus what running turns hold never passes the limit in force."""
    state = LedgerState(owner="dan", day="d1",
                        configured=OwnerLimits(running_turns=3, daily_tokens=limit))
    granted: dict[str, int] = {}  # by turn key: tokens granted, used
    used: dict[str, int] = {}
    seqs: dict[str, int] = {}
    day = 1
    for action, who, amount in steps:
        key = f"c{who}#1"
        if action == "ask" and not any(w.ask.key == key for w in state.waiting):
            seqs[key] = seqs.get(key, 0) + 1
            lease = ledger.ask(state, LeaseAsk(
                key=key, conversation_id=f"c{who}", seq=seqs[key], slot=seqs[key] == 1,
                tokens=amount * 2, need_tokens=amount,
                configured=OwnerLimits(running_turns=3, daily_tokens=limit)), NOW)
            if lease.granted:
                granted[key] = granted.get(key, 0) + (lease.tokens or 0)
        elif action == "use" and key in granted:
            used[key] = min(granted[key], used.get(key, 0) + amount)
        elif action == "give_back":
            if ledger.give_back(state, GiveBack(key=key, used_tokens=used.get(key, 0))):
                granted.pop(key, None), used.pop(key, None), seqs.pop(key, None)
        elif action == "raise":
            raised = max(state.limits.daily_tokens or 0, limit + amount)  # (never lowered)
            ledger.set_limits(state, SetLimits(limits=OwnerLimits(daily_tokens=raised)))
        elif action == "day":
            day += 1
            ledger.new_day(state, f"d{day}")
        for _, lease in ledger.grant_waiting(state, NOW):
            granted[lease.key] = granted.get(lease.key, 0) + (lease.tokens or 0)
        in_force = state.limits.daily_tokens
        assert state.used_tokens + ledger.held_tokens(state) <= in_force
        assert ledger.running(state) <= 3
