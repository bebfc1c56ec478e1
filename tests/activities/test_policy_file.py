"""The worker's approval policy (`activities.policy`): a file refused whole with the rule and the
reason, the strongest effect of the matching rules, CEL over the call and the conversation's
facts, failing closed, and bounded in the work a call's arguments can cause (in conversations:
tests/workflows/test_policy.py)."""

from __future__ import annotations

import json
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from durable_react_agent.activities.policy import PolicyError, load_policy, parse_policy
from durable_react_agent.contract.policy import PolicyCall, PolicyFacts, PolicyRequest

AT = datetime(2026, 12, 4, 10, 2, tzinfo=timezone.utc)
ISSUE_POLICY = {"rules": [
    {"name": "drafts are free", "tools": ["create_note"],
     "when": "args.title.startsWith('draft')", "effect": "allow"},
    {"name": "never delete the index", "tools": ["delete_note"], "when": "args.note_id == 1",
     "effect": "deny"},
    {"name": "big payments need two", "tools": ["pay*"], "when": "args.amount > 1000",
     "effect": "ask", "approvers": ["approver"], "quorum": 2},
]}


def judge(policy: dict, tool: str, args: dict[str, Any], risk: str = "sensitive",
          floor: frozenset[str] | None = None, **facts: Any):
    request = PolicyRequest(calls=[PolicyCall(call_id="c", tool=tool, risk=risk, args=args)],
                            facts=PolicyFacts(at=AT, **facts))
    return parse_policy(policy).judge(request, floor).verdicts[0]


def rule(**fields: Any) -> dict:
    return {"rules": [{"name": "r", "tools": ["t"], "effect": "deny", **fields}]}


def test_the_issues_policy_allows_a_draft_denies_the_index_and_asks_two_for_a_big_payment():
    revision = parse_policy(ISSUE_POLICY).revision[:12]
    draft = judge(ISSUE_POLICY, "create_note", {"title": "draft: plan", "body": ""})
    assert (draft.effect, draft.rule) == ("allow", f"rule 'drafts are free' of policy {revision}")
    assert judge(ISSUE_POLICY, "create_note", {"title": "final", "body": ""}).effect is None
    assert judge(ISSUE_POLICY, "delete_note", {"note_id": 1}, "destructive").effect == "deny"
    assert judge(ISSUE_POLICY, "delete_note", {"note_id": 2}, "destructive").effect is None
    paid = judge(ISSUE_POLICY, "pay_invoice", {"amount": 1500})
    assert (paid.effect, paid.approvers, paid.quorum) == ("ask", ["approver"], 2)
    assert judge(ISSUE_POLICY, "pay_invoice", {"amount": 10}).effect is None


def test_deny_wins_over_ask_and_ask_over_allow_whatever_their_order():
    rules = [{"name": "free", "tools": ["*"], "effect": "allow"},
             {"name": "ask", "tools": ["mail__*"], "effect": "ask"},
             {"name": "no", "tools": ["mail__send"], "when": "args.to.endsWith('@rival.example')",
              "effect": "deny"}]
    for order in (rules, rules[::-1]):
        policy = {"rules": order}
        assert judge(policy, "mail__send", {"to": "x@rival.example"}).effect == "deny"
        assert judge(policy, "mail__send", {"to": "x@ours.example"}).effect == "ask"
        assert judge(policy, "notes__list", {}).effect == "allow"


def test_when_reads_the_conversations_facts_the_owner_and_the_time():
    assert judge(rule(when="cost_usd > 2.5"), "t", {}, cost_usd=3.0).effect == "deny"
    assert judge(rule(when="cost_usd > 2.5"), "t", {}, cost_usd=1.0).effect is None
    assert judge(rule(when="calls_of_tool['t'] >= 3"), "t", {},
                 calls_of_tool={"t": 3}).effect == "deny"
    assert judge(rule(when="principal.owner == 'mallory'"), "t", {}, owner="mallory").effect == "deny"
    assert judge(rule(when="now > timestamp('2026-12-04T10:00:00Z')"), "t", {}).effect == "deny"
    assert judge(rule(when="tokens > 10 && turn == 2 && risk == 'sensitive'"), "t", {},
                 tokens=11, turn=2).effect == "deny"


def test_a_condition_that_cannot_be_read_fails_closed():
    """A field the call lacks, a type the rule did not expect: an ask or a deny matches (and says
    why), an allow does not."""
    denied = judge(rule(when="args.amount > 10"), "t", {"note": "no amount"})
    assert denied.effect == "deny" and "could not be read" in denied.note
    asked = judge(rule(when="args.amount > 10", effect="ask"), "t", {"amount": "ten"})
    assert asked.effect == "ask"
    assert judge(rule(when="args.amount > 10", effect="allow"), "t", {}).effect is None
    assert judge(rule(when="has(args.amount) && args.amount > 10"), "t", {}).effect is None


def test_an_allow_stays_within_auto_approve_when_it_is_set():
    allow = {"rules": [{"name": "free", "tools": ["create_note", "delete_note", "get_weather"],
                        "effect": "allow"}]}
    kept = judge(allow, "delete_note", {"note_id": 3}, "destructive", floor=frozenset({"create_note"}))
    assert kept.effect is None and "does not let a policy approve delete_note" in kept.note
    assert judge(allow, "create_note", {}, floor=frozenset({"create_note"})).effect == "allow"
    assert judge(allow, "get_weather", {}, "safe", floor=frozenset()).effect == "allow"


@pytest.mark.parametrize(("policy", "says"), [
    ([], "an object with one key"),
    ({"rules": [], "extra": 1}, "an object with one key"),
    ({"rules": [{"tools": ["t"], "effect": "deny"}]}, "rule 1 needs a name"),
    (rule(tools=[]), "rule 1 ('r'): \"tools\" must be a non-empty list"),
    (rule(effect="maybe"), "\"effect\" must be one of allow, review, ask, deny, not 'maybe'"),
    (rule(when="args.a >"), "\"when\" is not CEL: Failed to parse"),
    (rule(when="secrets.key == 1"), "\"when\" reads secrets, which it cannot"),
    (rule(when="args.l.all(x, args.l.all(y, x == y))"), "more than one list macro"),
    (rule(when=""), "\"when\" must be a CEL expression"),
    (rule(approvers=["approver"]), "belong to an \"ask\" rule"),
    (rule(effect="ask", approvers=["boss"]), "\"approvers\" must be a list of roles"),
    (rule(effect="ask", quorum=0), "\"quorum\" must be a whole number from 1 to 9"),
    (rule(grantable="yes"), "\"grantable\" must be true or false"),
    (rule(typo=1), "unknown key 'typo'"),
    ({"rules": [{"name": "r", "tools": ["a"], "effect": "deny"},
                {"name": "r", "tools": ["b"], "effect": "allow"}]}, "rule 'r' is named twice"),
])
def test_a_bad_file_is_refused_whole_with_the_rule_and_the_reason(policy: Any, says: str):
    with pytest.raises(PolicyError) as refused:
        parse_policy(policy)
    assert says in str(refused.value) and str(refused.value).startswith("AGENT_POLICY: ")


def test_a_file_that_cannot_be_read_or_is_too_big_is_refused(tmp_path: Path):
    with pytest.raises(PolicyError, match="cannot read"):
        load_policy(tmp_path / "absent.json")
    big = tmp_path / "big.json"
    big.write_text(json.dumps({"rules": [], "pad": "x" * 300_000}))
    with pytest.raises(PolicyError, match="over the limit"):
        load_policy(big)
    (bad := tmp_path / "bad.json").write_text("{rules")
    with pytest.raises(PolicyError, match="is not JSON"):
        load_policy(bad)


def test_the_revision_is_the_rules_digest_whatever_the_files_layout(tmp_path: Path):
    (a := tmp_path / "a.json").write_text(json.dumps(ISSUE_POLICY))
    (b := tmp_path / "b.json").write_text(json.dumps(ISSUE_POLICY, indent=2))
    assert load_policy(a).revision == load_policy(b).revision
    changed = json.loads(json.dumps(ISSUE_POLICY))
    changed["rules"][0]["when"] = "args.title.startsWith('wip')"
    assert parse_policy(changed).revision != load_policy(a).revision


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False)
                    | st.text(max_size=50),
                    lambda inner: st.lists(inner, max_size=6)
                    | st.dictionaries(st.text(max_size=8), inner, max_size=6), max_leaves=40)
EVERY_KIND = {"rules": [
    {"name": "a", "tools": ["*"], "when": "args.title.startsWith('draft')", "effect": "allow"},
    {"name": "b", "tools": ["*"], "when": "args.items.exists(i, i.amount > 100)", "effect": "ask"},
    {"name": "c", "tools": ["*"], "when": "args.to.matches('^.*@rival\\\\.example$')",
     "effect": "deny"},
    {"name": "d", "tools": ["*"], "when": "size(args) > 3 && args.note_id == 1", "effect": "deny"},
]}


@settings(max_examples=150, deadline=None)
@given(args=st.dictionaries(st.sampled_from(["title", "items", "to", "note_id", "x"]), JSON,
                            max_size=5))
def test_any_arguments_are_judged_without_raising(args: dict[str, Any]):
    verdict = judge(EVERY_KIND, "t", args)
    assert verdict.effect in (None, "allow", "ask", "deny")


def test_a_condition_over_the_largest_arguments_stays_linear():
    """One list macro over 20,000 items (arguments this large are refused before the judge
    sees them): well under a second; two nested would have been 400 million steps."""
    items = [{"amount": i % 50} for i in range(20_000)]
    started = time.perf_counter()
    assert judge({"rules": EVERY_KIND["rules"][1:2]}, "t", {"items": items}).effect is None
    assert time.perf_counter() - started < 5  # a bound on the work, not a timing target


def test_a_review_rule_needs_a_reviewer_entry_and_ranks_between_allow_and_ask(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    from durable_react_agent.activities.settings import ActivitySettings

    reviewed = {"rules": [{"name": "read it", "tools": ["create_note"], "effect": "review"}]}
    (path := tmp_path / "policy.json").write_text(json.dumps(reviewed))
    monkeypatch.setenv("AGENT_POLICY", str(path))
    with pytest.raises(ValueError, match="rule 'read it' hands calls to a reviewer model, and "
                                         "AGENT_REVIEWER names none"):
        ActivitySettings.from_env()
    monkeypatch.setenv("AGENT_REVIEWER", "nope")
    with pytest.raises(ValueError, match="AGENT_REVIEWER names 'nope', which is no model entry"):
        ActivitySettings.from_env()
    monkeypatch.setenv("AGENT_REVIEWER", "default")
    assert ActivitySettings.from_env().reviewer == "default"

    both = {"rules": [*reviewed["rules"], {"name": "free", "tools": ["*"], "effect": "allow"},
                      {"name": "ask", "tools": ["*"], "when": "args.title == 'x'",
                       "effect": "ask"}]}
    assert judge(both, "create_note", {"title": "y"}).effect == "review"
    assert judge(both, "create_note", {"title": "x"}).effect == "ask"
    outside = judge(both, "create_note", {"title": "y"}, floor=frozenset())
    assert outside.effect is None and "reviews it, but this worker does not let" in outside.note
    with pytest.raises(PolicyError, match="belong to an \"ask\" rule"):
        parse_policy(rule(effect="review", quorum=2))


def test_the_reviewers_answer_fails_closed():
    from durable_react_agent.rules.review import read_verdict

    assert read_verdict('{"verdict": "allow", "reason": "fine"}') == (True, "fine")
    assert read_verdict('```json\n{"verdict": "allow"}\n```') == (True, "no reason given")
    assert read_verdict('{"verdict": "ask", "reason": "odd"}') == (False, "odd")
    for text in ("", "allow", "[]", '{"verdict": "deny"}', '{"verdict": "ALLOW"}',
                 '{"verdict": ["allow"]}'):
        allow, reason = read_verdict(text)
        assert not allow and "a person decides" in reason
    allow, reason = read_verdict(json.dumps({"verdict": "ask", "reason": "x" * 5000}))
    assert not allow and len(reason.encode()) < 600
