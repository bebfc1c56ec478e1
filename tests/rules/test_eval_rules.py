"""What an eval decides without a server: `--answer contains` (the new answer must hold the
recorded one, not the other way), and a call repeated more often in the run than once gets the
case's results in the order they were recorded."""

from __future__ import annotations

from durable_react_agent.contract.case import Case, CaseCall, CaseDecision, CaseStep
from durable_react_agent.rules.cases import RecordedTools
from durable_react_agent.rules.scores import compare_answer, score

RECORDED = "It is 12°C and mild in Paris."


def answering(text: str) -> Case:
    return Case(name="paris", conversation_id="c", final_answer=text)


def contains(now: str):
    return compare_answer(answering(RECORDED), answering(now), "contains")


def test_answer_contains_passes_a_longer_answer_holding_the_recorded_one():
    check = contains(f"Checked just now: {RECORDED} Take a light jacket.")
    assert check.passed and check.detail == "contains the recorded answer"
    assert score(answering(RECORDED), answering(f"Well. {RECORDED}"), "off", "contains").passed


def test_answer_contains_fails_a_fragment_of_the_recorded_answer_and_an_empty_one():
    for now in ("mild in Paris", "", "   "):
        check = contains(now)
        assert not check.passed, now
        assert check.detail == "does not contain the recorded answer"
        assert (check.expected, check.got) == (RECORDED, now)


def test_a_repeated_call_gets_the_recorded_results_in_order_then_the_last_again():
    paris = {"location": "Paris"}
    case = Case(name="twice", conversation_id="c", steps=[
        CaseStep(index=1, turn=1, step=1, calls=[
            CaseCall(id="a", tool="get_weather", args=paris, result="first: 12°C")]),
        CaseStep(index=2, turn=1, step=2, calls=[
            CaseCall(id="b", tool="get_weather", args=paris, result="second: 14°C"),
            CaseCall(id="c", tool="create_note", args={"title": "t"}, result="Created note 1",
                     decision=CaseDecision(approved=True, by="alice"))]),
        CaseStep(index=3, turn=1, step=3, calls=[
            CaseCall(id="d", tool="create_note", args={"title": "t"}, result="rejected",
                     decision=CaseDecision(approved=False, by="bob", reason="once is enough"))]),
    ])
    book = RecordedTools(case)
    assert [book.result("get_weather", {"location": "Paris"}) for _ in range(3)] == [
        "first: 12°C", "second: 14°C", "second: 14°C"]
    assert [book.decision("create_note", {"title": "t"}).by for _ in range(3)] == [
        "alice", "bob", "bob"]
    assert book.result("get_weather", {"location": "Lyon"}) is None  # never recorded
