"""The AG-UI rules without a server: how resume entries become requests, and that a run ends with
RUN_FINISHED or RUN_ERROR whatever the layer below raises."""

from __future__ import annotations

import itertools

import pytest
from ag_ui.core import EventType, ResumeEntry, RunAgentInput, UserMessage
from temporalio.service import RPCError, RPCStatusCode

from durable_react_agent.api.agui import run_agui
from durable_react_agent.api.interrupts import plan_resume, question_schema, resume_request_id
from durable_react_agent.client.checks import UsageError
from durable_react_agent.contract import (
    AnswerRequest,
    ConfirmRequest,
    ConversationStatus,
    PendingConfirmation,
    PendingQuestion,
    RejectRequest,
    Usage,
)
from durable_react_agent.rules.questions import DECLINED


def waiting(*calls: str, question: PendingQuestion | None = None) -> ConversationStatus:
    return ConversationStatus(
        workflow_id="t1", status="waiting_for_input" if question else "waiting_for_confirmation",
        turn=1, steps=1, llm_calls=1, tools_used=[], stop_reason=None, final_answer=None,
        usage=Usage(), error=None, pending_question=question,
        pending_confirmations=[PendingConfirmation(call_id=c, ref=c, tool="create_note",
                                                   args={"title": c}, risk="sensitive")
                               for c in calls])


def entry(interrupt_id: str, status: str = "resolved", **payload) -> ResumeEntry:
    return ResumeEntry(interrupt_id=interrupt_id, status=status,
                       payload=payload if status == "resolved" else None)


def test_which_entries_apply_does_not_depend_on_their_order():
    status = waiting("call_a", "call_b")
    entries = [entry("call_a", approved=True), entry("call_b", approved=False, reason="no"),
               entry("call_x", approved=True)]
    plans = [plan_resume(list(order), status, "alice", "run-1")
             for order in itertools.permutations(entries)]
    for plan in plans:
        assert plan.requests == plans[0].requests
        assert [i["interruptId"] for i in plan.ignored] == ["call_x"]
    confirm, reject = plans[0].requests["call_a"], plans[0].requests["call_b"]
    assert isinstance(confirm, ConfirmRequest) and confirm.approver == "alice"
    assert isinstance(reject, RejectRequest) and reject.reason == "no"
    # The same run answering the same interrupt is the same request, whatever its position.
    assert confirm.request_id == resume_request_id("run-1", "call_a")
    assert resume_request_id("run-2", "call_a") != confirm.request_id


@pytest.mark.parametrize("entries, why", [
    ([entry("call_a", approved=True)], "not answered: call_b"),
    ([entry("call_a", approved=True), entry("call_b", approved="yes")], "approved"),
    ([entry("call_a", approved=True), entry("call_b", approved=True, args=[1])], "JSON object"),
    ([entry("call_a", approved=True), entry("call_a", approved=False),
      entry("call_b", approved=True)], "answered twice"),
])
def test_a_resume_that_cannot_apply_whole_applies_nothing(entries, why):
    with pytest.raises(UsageError, match=why):
        plan_resume(entries, waiting("call_a", "call_b"), "alice", "run-1")


def test_a_resume_naming_only_gone_interrupts_reports_what_waits_now():
    """The resume of a lost response, sent again after its interrupts were answered and new ones
    raised: nothing to apply, and no error, so the client learns the new interrupts."""
    plan = plan_resume([entry("call_a", approved=True)], waiting("call_c"), "alice", "run-1")
    assert not plan.requests and [i["interruptId"] for i in plan.ignored] == ["call_a"]


def test_a_question_is_answered_checked_or_declined():
    q = PendingQuestion(call_id="call_q", ref="call_q", kind="choice", message="Which?",
                        options=["red", "blue"])
    status = waiting(question=q)
    answer = plan_resume([entry("call_q", answer="red")], status, "alice", "r").requests["call_q"]
    assert isinstance(answer, AnswerRequest) and answer.values == ["red"]
    assert answer.call_id == "call_q" and not answer.declined
    with pytest.raises(UsageError, match="not one of the options"):
        plan_resume([entry("call_q", answer="green")], status, "alice", "r")
    declined = plan_resume([entry("call_q", "cancelled")], status, "alice", "r").requests["call_q"]
    assert isinstance(declined, AnswerRequest) and declined.declined
    assert DECLINED.startswith("no answer: the user declined")


def test_an_mcp_servers_question_is_an_interrupt_with_its_own_schema():
    schema = {"type": "object", "properties": {"nights": {"type": "integer", "minimum": 1}},
              "required": ["nights"]}
    q = PendingQuestion(call_id="call_m", ref="call_m", kind="elicitation",
                        message="How many nights?", answer_schema=schema, server="hotel",
                        tool="book")
    assert question_schema(q)["properties"]["answer"] == schema
    status = waiting(question=q)
    answer = plan_resume([entry("call_m", answer={"nights": 3})], status, "al", "r"
                         ).requests["call_m"]
    assert isinstance(answer, AnswerRequest) and answer.values == ['{"nights": 3}']
    with pytest.raises(UsageError, match="is less than the minimum of 1"):
        plan_resume([entry("call_m", answer={"nights": 0})], status, "al", "r")
    cancelled = plan_resume([entry("call_m", "cancelled")], status, "al", "r").requests["call_m"]
    assert cancelled.declined and cancelled.cancelled  # the server is told cancel


class Failing:
    """A session whose every call raises `error`."""

    max_message_bytes = 1024

    def __init__(self, error: BaseException):
        self.error = error

    def __getattr__(self, name: str):
        async def fail(*args, **kwargs):
            raise self.error
        return fail


@pytest.mark.parametrize("error", [
    RPCError("internal: secret detail", RPCStatusCode.INTERNAL, b""),
    RuntimeError("secret detail"),
    KeyError("secret detail"),
])
async def test_a_run_always_ends_and_never_echoes_internals(error):
    inp = RunAgentInput(thread_id="t1", run_id="r1", messages=[UserMessage(id="m", content="hi")])
    events = [e async for e in run_agui(Failing(error), inp, "alice")]
    assert [e.type for e in events] == [EventType.RUN_STARTED, EventType.RUN_ERROR]
    assert events[1].code == "internal_error" and "error id" in events[1].message
    assert "secret" not in events[1].message
