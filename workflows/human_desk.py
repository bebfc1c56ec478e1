"""The human side of a conversation: pending decisions, the open question, and signal outcomes.

The desk is given the conversation's state, where decisions, stale call ids and outcomes live (and
cross continue-as-new); what is pending lives only here, since a run hands over when nothing is.
The pure rules are in `rules.gate`; the workflow owns the waiting. Every refusal leaves
the state untouched and is recorded, so the CLI can report it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from temporalio import workflow

from ..contract import (
    AnswerRequest,
    ConfirmRequest,
    Decision,
    PendingConfirmation,
    PendingQuestion,
    Question,
    RejectRequest,
    SayRequest,
    SignalOutcome,
    Status,
    ToolDefinition,
)
from ..contract.bounds import (
    MAX_APPROVER_BYTES,
    MAX_QUEUED_MESSAGES,
    MAX_REASON_BYTES,
    MAX_REMEMBERED_CALLS,
    MAX_REMEMBERED_SIGNALS,
    MAX_REQUEST_ID_BYTES,
    MAX_TURN_DECISIONS,
    MAX_WAITING_REQUESTS,
    Limits,
    Tail,
    check_message,
    clip,
    keep_last,
    text_size,
)
from ..contract.state import ConversationState
from ..rules import gate, tracing
from ..rules.gate import PendingCall, Refusal
from ..rules.questions import DECLINED
from . import telemetry

HumanRequest = ConfirmRequest | RejectRequest | AnswerRequest
# What became of a human request: the decisions it took, the answer's text, or a refusal.
Ruling = list[Decision] | str | Refusal


@dataclass
class Taken:
    """A human request, and what became of it (None while it waits for a result)."""

    request: HumanRequest
    verdict: Ruling | None = None


class HumanDesk:
    """What waits for a human, and the requests (decisions, answers) that humans send.

    A request may wait too. Temporal can deliver a signal in the same workflow task as the
    result that makes its call pending (a model reply naming the call, a tool asking a
    question), and applies the signal first; the run that recorded the history may have applied
    that result in an earlier task whose completion was lost (a server restart), and the signal
    in the next one. So a request naming what is not there yet is not refused while such a
    result is on its way: it waits, and is taken where the conversation makes a call pending or
    asks (`settle`), or refused once nothing is on its way. It then has one outcome however the
    two arrive, live and on replay (`tests/test_decision_order.py`)."""

    def __init__(self, state: ConversationState, limits: Limits, *, owner: str | None = None,
                 on_settled: Callable[[list[Taken]], None] = lambda taken: None,
                 too_long: Callable[[str], str | None] | None = None) -> None:
        self._state = state
        self._limits = limits
        self.pending: dict[str, PendingCall] = {}
        self.owner = owner  # who started the conversation (four eyes)
        # why a message is too long for the model whatever is folded (`ModelStep.message_refusal`)
        self.too_long = too_long
        self.results_pending = 0  # model calls, tools and subagents the conversation awaits
        # calls the round will hold once its safe calls have run: a request naming one waits
        # for it, as for a result on its way
        self.coming: set[str] = set()
        self._waiting: list[Taken] = []
        self.on_settled = on_settled  # announces requests settled together (`settle`)
        queue_bound = MAX_QUEUED_MESSAGES if limits.inbox_bytes is not None else 2**31
        self._inbox = Tail(state.inbox, queue_bound, limits.inbox_bytes, text_size)
        self.question_lock = asyncio.Lock()
        self._question: PendingQuestion | None = None
        self._asked_at: datetime | None = None
        self._answer: str | None = None
        self.declined = False  # the human withdrew the open question instead of answering it
        self.cancelled = False  # ...and said so as cancel (an MCP elicitation's third answer)

    # ----- messages -----

    def message_refusal(self, text: str, one_shot: bool, closed: bool) -> str | None:
        """Why a message cannot be queued for a turn, or None. Changes nothing."""
        if one_shot:
            return "a one-shot conversation takes no more messages"
        if self._state.end_requested or closed:
            return "the conversation is ending"
        reason = check_message(text, self._limits.message_bytes)
        if reason is None and self.too_long is not None:
            reason = self.too_long(text)
        if reason is None and not self._inbox.fits(text_size(text)):
            reason = (f"{len(self._state.inbox)} message(s) of {self._inbox.bytes:,} bytes are "
                      "already waiting; send it once the conversation has caught up")
        return reason

    def take_message(self, request: SayRequest, one_shot: bool, closed: bool) -> SignalOutcome:
        """Queue a message for its turn, or refuse it (ending, empty, too large, queue full)."""
        if isinstance(seen := self.repeated(request.request_id), SignalOutcome):
            return seen
        reason = self.message_refusal(request.text, one_shot, closed)
        if reason is not None:
            return self._refused(request.request_id, reason)
        self._inbox.append(request.text)
        return self.accept(request.request_id,
                           turn=self._state.current.number + len(self._state.inbox))

    def take_first_message(self, text: str, request_id: str | None) -> str | None:
        """The conversation's first message (`text`, taken at its start), judged once the
        model's window is known (after the handshake) as a `say` of it would be: refused, and
        left out, if it cannot fit the model whatever is folded; else taken as turn 1, under
        its request id. Returns why it was refused."""
        first = self._state.inbox[:1] == [text]
        reason = self.too_long(text) if first and self.too_long is not None else None
        if reason is None:
            self.accept(request_id, turn=1)
            return None
        self._inbox.pop_first()
        self._state.notice(f"the first message was refused: {reason}")
        self._refused(request_id, reason)
        return reason

    def next_message(self) -> str:
        return self._inbox.pop_first()

    # ----- rounds -----

    def expect(self, call_ids: set[str]) -> None:
        """The calls this round holds once its safe calls have run: a request that names one
        waits until it is held, not refused while the reads run."""
        self.coming = call_ids

    def hold(self, call_id: str, tool: ToolDefinition, args: dict[str, Any],
             now: datetime | None = None, ticket: str | None = None) -> None:
        self.pending[call_id] = PendingCall(call_id=call_id, tool=tool, args=args, asked_at=now,
                                            ticket=ticket)
        self.coming.discard(call_id)

    def close_round(self) -> None:
        """The round's calls all have results: their ids become stale."""
        for call_id, pending in self.pending.items():
            d = pending.decision
            verdict = "approved" if d and d.approved else "rejected"
            self.remember_call(call_id, f"it was already {verdict} by {d.approver if d else 'nobody'}")
        self.pending = {}

    def abandon_round(self, reason: str, now: datetime) -> None:
        """The round stops half-way: its undecided calls are rejected by the system, and its
        open question goes with it (nobody can answer it now)."""
        for call_id, pending in self.pending.items():
            if pending.decision is None:
                self.decide_by_system(call_id, reason, now)
        self.close_round()
        self._question = self._answer = None

    def remember_call(self, call_id: str, what: str) -> None:
        self._state.past_calls = keep_last([*self._state.past_calls, (call_id, what)],
                                           MAX_REMEMBERED_CALLS)

    # ----- human requests: taken now, or once the result they wait for is in -----

    def take(self, request: HumanRequest, now: datetime) -> Taken:
        """Take a decision or an answer now, refuse it now, or (a request that a result still
        on its way may make valid) keep it waiting: its `verdict` stays None until `settle`."""
        if len(self._waiting) < MAX_WAITING_REQUESTS and self._waits(request):  # past: refused
            self._waiting.append(Taken(request))
            return self._waiting[-1]
        return Taken(request, self._apply(request, now))

    def settle(self, now: datetime, final: bool = False) -> None:
        """Take or refuse the waiting requests that a result made decidable (or, `final`, all:
        the conversation ends or hands over); `on_settled` announces them."""
        settled = []
        for taken in list(self._waiting):
            if not final and self._waits(taken.request):
                continue
            taken.verdict = self._apply(taken.request, now)
            self._waiting.remove(taken)
            settled.append(taken)
        if settled:
            self.on_settled(settled)

    @contextmanager
    def awaiting_results(self) -> Iterator[None]:
        """While the conversation awaits a model call, a tool or a subagent. What came before
        it is settled first: a request that waited for a result now in, and not made valid by
        it, is refused before the conversation starts on something new (and also as soon as
        nothing more is on its way: `settle_when_nothing_comes`)."""
        self.settle(workflow.now())
        self.results_pending += 1
        try:
            yield
        finally:
            self.results_pending -= 1

    async def settle_when_nothing_comes(self) -> None:
        """(for the conversation's lifetime) A request that waited for a result is
        answered as soon as nothing more is on its way, not at the next decision: one call's tool
        may finish while another call waits for a human. A condition is looked at only once the
        workflow has nothing else to do, so a result's own effects (the calls a reply brings
        held, the question a tool asks) are in by then."""
        while True:
            await workflow.wait_condition(lambda: bool(self._waiting) and not self._on_its_way())
            self.settle(workflow.now())

    def _on_its_way(self) -> bool:
        return bool(self.results_pending or self.coming)

    def _waits(self, request: HumanRequest) -> bool:
        """Whether a request must wait: it cannot be taken now, and a result on its way may
        change that (`Refusal.final` False)."""
        if not self._on_its_way():
            return False
        plan: object
        if isinstance(request, ConfirmRequest):
            plan = self.plan_confirm(request)
        elif isinstance(request, RejectRequest):
            plan = self.plan_reject(request)
        else:
            plan = self.plan_answer(request)
        return isinstance(plan, Refusal) and not plan.final

    def _apply(self, request: HumanRequest, now: datetime) -> Ruling:
        if isinstance(request, ConfirmRequest):
            return self.confirm(request, now)
        if isinstance(request, RejectRequest):
            return self.reject(request, now)
        return self.answer(request)

    def repeated(self, request_id: str | None) -> SignalOutcome | Taken | None:
        """What became of a request id already taken, refused or waiting, when ids are
        deduplicated (a retried request, or one sent again with the same id, acts once)."""
        if request_id is None:
            return None
        waiting = next((t for t in self._waiting if t.request.request_id == request_id), None)
        return waiting or self.outcome(request_id)

    # ----- decisions -----

    def is_decided(self, call_id: str) -> bool:
        return self.pending[call_id].decision is not None

    def plan_confirm(self, request: ConfirmRequest) -> list[str] | Refusal:
        """The calls a confirm would approve, or why it must be refused. Changes nothing."""
        targets = self.plan_reject(request)
        if isinstance(targets, Refusal) or request.args is None:
            return targets
        problem = gate.check_edited_args(self.pending[targets[0]], request.args,
                                         request.call_ids, self._limits.args_bytes)
        return problem or targets

    def plan_reject(self, request: ConfirmRequest | RejectRequest) -> list[str] | Refusal:
        """The calls a decision names, or why it must be refused. Changes nothing."""
        targets = gate.select_calls(request.call_ids, request.all, self.pending,
                                    dict(self._state.past_calls))
        if isinstance(targets, Refusal):
            return targets
        return (gate.check_seen(targets, self.pending, request.seen)
                or gate.check_tickets(targets, self.pending, request.tickets)
                or gate.four_eyes_refusal(targets, self.pending,
                                          clip(request.approver, MAX_APPROVER_BYTES) or "",
                                          self.owner, self._state.four_eyes)
                or targets)

    def confirm(self, request: ConfirmRequest, now: datetime) -> list[Decision] | Refusal:
        """Approve the named calls, or refuse the whole request and change nothing."""
        targets = self.plan_confirm(request)
        if isinstance(targets, Refusal):
            return self.refuse(request.request_id, targets.reason)
        decided = []
        for call_id in targets:
            pending = self.pending[call_id]
            if request.args is not None:
                pending.args = request.args
            decided.append(self._decide(pending, True, request.approver, now, None,
                                        request.trace_parent))
        self.accept(request.request_id)
        return decided

    def reject(self, request: RejectRequest, now: datetime) -> list[Decision] | Refusal:
        targets = self.plan_reject(request)
        if isinstance(targets, Refusal):
            return self.refuse(request.request_id, targets.reason)
        reason = request.reason.strip() or "no reason given"
        decided = [self._decide(self.pending[c], False, request.approver, now, reason,
                                request.trace_parent) for c in targets]
        self.accept(request.request_id)
        return decided

    def decide_by_system(self, call_id: str, reason: str, now: datetime) -> Decision:
        return self._decide(self.pending[call_id], False, "system", now, reason)

    def _decide(
        self, pending: PendingCall, approved: bool, approver: str, now: datetime, reason: str | None,
        decided_in: str | None = None,
    ) -> Decision:
        """Record a decision (`decided_in`: the span of the request that carried it, which the
        approval's span links to)."""
        pending.decision = Decision(
            call_id=pending.call_id, tool=pending.tool.name, approved=approved,
            approver=clip(approver, MAX_APPROVER_BYTES) or "unknown", at=now,
            args_hash=gate.args_hash(pending.args), reason=clip(reason, MAX_REASON_BYTES),
        )
        turn = self._state.current
        turn.decisions = keep_last([*turn.decisions, pending.decision], MAX_TURN_DECISIONS)
        asked = pending.asked_at or now
        outcome, waited = "approved" if approved else "rejected", (now - asked).total_seconds()
        telemetry.emit(f"approval {pending.tool.name}",
                       tracing.child_span(turn.trace, f"approval/{pending.call_id}"),
                       turn.trace, asked, now,
                       {"gen_ai.tool.name": pending.tool.name,
                        "gen_ai.tool.call.id": pending.call_id, "agent.tool.risk": pending.tool.risk,
                        "agent.approval.approver": pending.decision.approver,
                        "agent.approval.outcome": outcome,
                        "agent.approval.reason": pending.decision.reason,
                        "agent.approval.wait_s": waited},
                       links=[decided_in] if decided_in else None)
        telemetry.approval_waited(pending.tool.name, outcome, waited)
        return pending.decision

    # ----- questions -----

    def ask(self, call_id: str, question: Question) -> None:
        self._question = PendingQuestion(call_id=call_id, **question.model_dump())
        self._asked_at = workflow.now() if workflow.in_workflow() else None
        self._answer = None
        self.declined = self.cancelled = False

    def has_answer(self) -> bool:
        """Whether the open question was answered or declined."""
        return self._answer is not None or self.declined

    def _open_question(self) -> PendingQuestion | None:
        return None if self.has_answer() else self._question

    def take_answer(self) -> str | None:
        answer, self._question, self._answer = self._answer, None, None
        return answer

    def plan_answer(self, request: AnswerRequest) -> gate.AnswerCheck | Refusal:
        """The answer as the tool will receive it, or why it must be refused. Changes nothing."""
        open_question = self._open_question()
        if open_question is None:
            return Refusal("no question is waiting for an answer", final=False)
        if request.call_id is not None and request.call_id != open_question.call_id:
            return Refusal(f"the question of call {request.call_id} is not the one open "
                           f"(call {open_question.call_id})", final=False)
        if request.declined or request.cancelled:
            return gate.AnswerCheck(text=DECLINED, values=[])
        return gate.check_answer(open_question.question(), request.values,
                                 self._limits.message_bytes)

    def answer(self, request: AnswerRequest) -> str | Refusal:
        """The accepted answer's text, or the refusal."""
        checked = self.plan_answer(request)
        if isinstance(checked, Refusal):
            return self.refuse(request.request_id, checked.reason)
        if request.declined or request.cancelled:
            self.declined, self.cancelled = True, request.cancelled
        else:
            self._answer = checked.text
        self.accept(request.request_id)
        self._trace_answer(request, checked.text)
        return checked.text

    def _trace_answer(self, request: AnswerRequest, text: str) -> None:
        """The question's span: from when it was asked to its answer, and who gave it."""
        question, turn = self._question, self._state.current
        if question is None or not workflow.in_workflow():
            return
        now = workflow.now()
        asked = self._asked_at or now
        telemetry.emit(f"question {question.kind}",
                       tracing.child_span(turn.trace, f"question/{question.call_id}/"
                                                        f"{tracing.ns(asked)}"),
                       turn.trace, asked, now,
                       {"gen_ai.tool.call.id": question.call_id, "agent.question.kind": question.kind,
                        "agent.question.answered_by": request.sender,
                        "agent.question.declined": request.declined,
                        "agent.question.wait_s": (now - asked).total_seconds()},
                       content={"agent.question.message": question.message,
                                "agent.question.answer": text})

    # ----- what the status shows -----

    def waiting_status(self) -> Status | None:
        if any(p.decision is None for p in self.pending.values()):
            return "waiting_for_confirmation"
        if self._open_question() is not None:
            return "waiting_for_input"
        return None

    def pending_confirmations(self) -> list[PendingConfirmation]:
        return [
            PendingConfirmation(call_id=p.call_id, tool=p.tool.name, args=p.args, risk=p.tool.risk,
                                ref=p.call_id, args_hash=gate.args_hash(p.args),
                                four_eyes=self.owner is not None
                                and p.tool.risk in self._state.four_eyes, ticket=p.ticket)
            for p in self.pending.values()
            if p.decision is None
        ]

    def pending_schemas(self) -> dict[str, dict[str, Any]]:
        return {call_id: p.tool.parameters for call_id, p in self.pending.items()
                if p.decision is None}

    def pending_question(self) -> PendingQuestion | None:
        open_question = self._open_question()
        if open_question is None:
            return None
        return open_question.model_copy(update={"ref": open_question.call_id})

    # ----- signal outcomes -----

    def outcome(self, request_id: str) -> SignalOutcome | None:
        return next((o for o in reversed(self._state.outcomes) if o.request_id == request_id), None)

    def accept(self, request_id: str | None, turn: int | None = None) -> SignalOutcome:
        outcome = SignalOutcome(request_id=request_id or "", accepted=True, turn=turn)
        self._record(request_id, outcome)
        return outcome

    def refuse(self, request_id: str | None, reason: str) -> Refusal:
        return Refusal(self._refused(request_id, reason).reason or "")

    def _refused(self, request_id: str | None, reason: str) -> SignalOutcome:
        """A refusal, clipped, logged and remembered under its request id."""
        reason = clip(reason, MAX_REASON_BYTES) or ""
        workflow.logger.info("signal refused: %s", reason)
        outcome = SignalOutcome(request_id=request_id or "", accepted=False, reason=reason)
        self._record(request_id, outcome)
        return outcome

    def _record(self, request_id: str | None, outcome: SignalOutcome) -> None:
        if request_id is None:
            return
        if text_size(request_id) > MAX_REQUEST_ID_BYTES:
            workflow.logger.warning("a signal's request id is too long to remember (%d chars)",
                                    len(request_id))
            return
        kept = [o for o in self._state.outcomes if o.request_id != request_id]
        self._state.outcomes = keep_last([*kept, outcome], MAX_REMEMBERED_SIGNALS)
