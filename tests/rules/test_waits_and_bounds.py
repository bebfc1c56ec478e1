"""Pure rules of the seams: when a human request waits for a result, how a pending call is
named across subagents, and the bounds on what a conversation counts and cuts."""

from __future__ import annotations

import json
import re
from collections import Counter
from datetime import datetime, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from durable_react_agent.contract import (
    AnswerRequest,
    ConfirmRequest,
    PendingConfirmation,
    Question,
    RejectRequest,
    ToolDefinition,
)
from durable_react_agent.contract.bounds import text_size, truncate_observation
from durable_react_agent.contract.names import relative_id
from durable_react_agent.contract.state import ContextState, ConversationState
from durable_react_agent.rules.commands import code_span
from durable_react_agent.rules.compaction import tool_counts
from durable_react_agent.rules.decisions import pending_call
from durable_react_agent.rules.gate import Refusal
from durable_react_agent.rules.links import call_ticket
from durable_react_agent.rules.output import unfenced
from durable_react_agent.rules.repair import fenced
from durable_react_agent.workflows.decisions import Decisions
from durable_react_agent.workflows.reporting import MAX_MEMO_TOOLS, OTHER_TOOLS, counted_tools
from tests.decisions_support import decisions, plain_logger
from tests.generated import code_spans

NOW = datetime(2026, 12, 1, tzinfo=timezone.utc)
NOTE = ToolDefinition(name="create_note", description="", risk="sensitive",
                      parameters={"type": "object", "properties": {"title": {"type": "string"}}})


@pytest.fixture(autouse=True)
def outside_a_workflow(monkeypatch):
    plain_logger(monkeypatch)


def desk() -> Decisions:
    return decisions()


def test_a_request_naming_what_a_result_may_bring_waits_for_it_then_is_taken_or_refused():
    d = desk()
    d.results_pending = 1  # a model call is in flight
    early = d.receive(ConfirmRequest(request_id="c1", call_ids=["call_1"], approver="ann"), NOW)
    stray = d.receive(ConfirmRequest(request_id="c2", call_ids=["call_9"]), NOW)
    question = d.receive(AnswerRequest(request_id="a1", values=["yes"]), NOW)
    assert early.result is stray.result is question.result is None  # waiting, not refused
    assert d.memory.outcome("c1") is None

    d.results_pending = 0  # the reply is in: it names call_1
    d.approvals.hold("call_1", NOTE, {"title": "t"})
    d.settle(NOW)
    assert [x.approver for x in early.result] == ["ann"]
    assert stray.result.reason == "unknown call id call_9"
    assert question.result.reason == "no question is waiting for an answer"
    assert d.memory.outcome("c1").accepted and not d.memory.outcome("c2").accepted


def test_with_nothing_on_its_way_a_request_is_refused_at_once_and_a_stale_one_always():
    d = desk()
    assert d.receive(RejectRequest(call_ids=["x"]), NOW).result.reason == "unknown call id x"
    d.approvals.hold("call_1", NOTE, {"title": "t"})
    d.receive(ConfirmRequest(call_ids=["call_1"]), NOW)
    d.results_pending = 1
    again = d.receive(ConfirmRequest(call_ids=["call_1"]), NOW)  # decided: nothing can change that
    assert again.result.reason == "call call_1 was already approved by unknown"


def test_a_decision_binds_to_the_arguments_and_calls_its_human_saw():
    d = desk()
    d.approvals.hold("call_1", NOTE, {"title": "t"})
    d.approvals.hold("call_2", NOTE, {"title": "u"})
    [shown, _] = d.approvals.pending_confirmations()
    wrong = d.receive(ConfirmRequest(call_ids=["call_1"], seen={"call_1": "sha256:00"}), NOW)
    assert "not the ones this decision saw" in wrong.result.reason
    unseen = d.receive(ConfirmRequest(all=True, seen={"call_1": shown.args_hash}), NOW)
    assert "call call_2 is waiting too" in unseen.result.reason
    right = d.receive(ConfirmRequest(call_ids=["call_1"], seen={"call_1": shown.args_hash}), NOW)
    assert [x.call_id for x in right.result] == ["call_1"]


def test_an_answer_binds_to_the_question_its_human_saw():
    d = desk()
    d.question.ask("call_1", Question(kind="confirm", message="ok?"))
    other = d.receive(AnswerRequest(values=["yes"], call_id="call_7"), NOW)
    assert "not the one open" in other.result.reason
    assert d.receive(AnswerRequest(values=["yes"], call_id="call_1"), NOW).result == "yes"


def test_a_request_id_is_taken_once():
    d = desk()
    d.approvals.hold("call_1", NOTE, {"title": "t"})
    d.receive(ConfirmRequest(request_id="r", call_ids=["call_1"]), NOW)
    assert d.repeated("r").accepted
    assert d.repeated(None) is None


PENDING = [
    PendingConfirmation(call_id="call_0", tool="create_note", args={}, risk="sensitive",
                        conversation_id="p/a", ref="a/call_0"),
    PendingConfirmation(call_id="call_0", tool="delete_note", args={}, risk="destructive",
                        conversation_id="p/b", ref="b/call_0"),
    PendingConfirmation(call_id="call_5", tool="create_note", args={}, risk="sensitive",
                        conversation_id="p/a/c", ref="a/c/call_5"),
]


def test_a_pending_call_is_named_by_its_ref_or_an_id_only_one_call_has():
    assert pending_call("b/call_0", PENDING).tool == "delete_note"
    assert pending_call("call_5", PENDING).ref == "a/c/call_5"
    assert pending_call("call_9", PENDING) is None
    ambiguous = pending_call("call_0", PENDING)
    assert isinstance(ambiguous, Refusal)
    assert re.match(r"call_0 names 2 waiting calls: a/call_0 .*b/call_0", ambiguous.reason)
    assert relative_id("p/a/c", "p") == "a/c" and relative_id("q/x", "p") == "q/x"


def test_an_observation_is_cut_by_its_json_bytes():
    control = "\x01" * 1000  # six bytes each in JSON, one in UTF-8
    cut, full = truncate_observation(control, 600)
    assert full == 6000 and text_size(cut.split("\n…[truncated")[0]) <= 600
    assert truncate_observation("short", 600) == ("short", None)


def test_the_memo_counts_at_most_so_many_tool_names():
    made_up = Counter({f"tool_{n}": 1 for n in range(500)} | {"get_weather": 40})
    counted = counted_tools(made_up)
    assert len(counted) == MAX_MEMO_TOOLS + 1 and counted["get_weather"] == 40
    assert sum(counted.values()) == sum(made_up.values())
    assert counted_tools(Counter(counted) + Counter({"new": 1}))[OTHER_TOOLS] == \
        counted[OTHER_TOOLS] + 1


def test_the_dropped_rounds_note_names_at_most_a_few_tools():
    few = Counter({"get_weather": 3, "list_notes": 1})
    assert tool_counts(few) == "get_weather x3, list_notes x1"  # as before, in full
    made_up = Counter({f"made_up_tool_{n}_with_a_long_name": 1 for n in range(500)})
    made_up["get_weather"] = 9
    note = tool_counts(made_up)
    assert note.startswith("get_weather x9, ") and note.endswith("498 call(s) of 498 other tool(s)")
    assert len(note) < 200  # within the note's reserve, however many names the model made up


# ----- issue 30: tickets, four eyes that wants a person, what is coming, fences, spans -----

DELETE = ToolDefinition(name="delete_note", description="", risk="destructive",
                        parameters={"type": "object"})


def four_eyes_desk(owner: str = "alice") -> Decisions:
    d = decisions(ConversationState(context=ContextState(system_prompt="s"),
                                    four_eyes=["destructive"]), owner=owner)
    return d


def test_a_decision_made_for_one_call_does_not_decide_a_later_call_with_its_id():
    d = desk()
    d.approvals.hold("r1", NOTE, {"title": "t"}, ticket=call_ticket("key-2"))
    old = d.receive(ConfirmRequest(call_ids=["r1"], tickets={"r1": call_ticket("key-1")}), NOW)
    assert "not the call this decision was made for" in old.result.reason
    assert d.approvals.pending["r1"].decision is None
    taken = d.receive(ConfirmRequest(call_ids=["r1"], tickets={"r1": call_ticket("key-2")}), NOW)
    assert [x.approved for x in taken.result] == [True]
    assert call_ticket("key-1") != call_ticket("key-2") == call_ticket("key-2")


@pytest.mark.parametrize("approver", ["alice", "link", "unknown", "", " policy ", "system"])
def test_under_four_eyes_a_decision_names_a_person_other_than_the_owner(approver: str):
    d = four_eyes_desk()
    d.approvals.hold("d1", DELETE, {})
    refused = d.receive(ConfirmRequest(call_ids=["d1"], approver=approver), NOW)
    assert refused.result.reason.startswith("four eyes: call d1 (delete_note, destructive)")
    assert d.approvals.pending["d1"].decision is None
    assert [x.approver for x in d.receive(ConfirmRequest(call_ids=["d1"], approver="carol"),
                                       NOW).result] == ["carol"]



def test_a_request_naming_a_call_the_round_will_hold_waits_while_its_reads_run():
    d = four_eyes_desk()
    d.approvals.expect({"g1"})  # held once the round's safe calls have run
    waiting = d.receive(ConfirmRequest(request_id="c", call_ids=["g1"], approver="carol"), NOW)
    d.settle(NOW)  # a safe call starts: what waited for the reply is settled
    assert waiting.result is None
    d.approvals.hold("g1", NOTE, {"title": "t"})
    d.settle(NOW)
    assert [x.approver for x in waiting.result] == ["carol"] and not d.approvals.coming


FENCE_BEFORE = re.compile(r"^```(?:json)?\s*(.*?)\s*```$", re.DOTALL)
ANSWER_FENCE_BEFORE = re.compile(r"^\s*```(?:json)?\s*\n(.*)\n\s*```\s*$", re.DOTALL)
fence_texts = st.lists(st.sampled_from(["`", "```", "json", "\n", " ", "\t", "{}", "1", "a",
                                        "\u00a0", "\r", "\u2028"]), max_size=14).map("".join)


@settings(max_examples=500, deadline=None, database=None)
@given(fence_texts)
def test_a_fence_reads_as_the_backtracking_patterns_read_it(text: str):
    """The linear scans answer as the patterns they replace did (which took cubic time): the
    same inside of a reply, and the same JSON of a typed answer."""
    stripped = text.strip()
    before = FENCE_BEFORE.match(stripped)
    assert fenced(stripped) == (before.group(1) if before else None)
    old = ANSWER_FENCE_BEFORE.match(text)
    assert parsed(unfenced(text)) == parsed(old.group(1) if old else text)


def parsed(text: str) -> object:
    try:
        return ("json", json.loads(text))
    except ValueError:
        return "not json"


@settings(max_examples=300, deadline=None, database=None)
@given(st.lists(st.sampled_from(["`", "``", "a", " ", "b"]), max_size=10).map("".join))
def test_a_code_span_holds_any_text_whole(text: str):
    """What a model wrote, shown in the Temporal UI's Markdown: one span, as CommonMark reads
    it (a span's one leading and trailing space are its padding)."""
    assert code_spans(f"x {code_span(text)} y") == [text or " "]
