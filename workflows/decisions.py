"""A person's decisions and answers, from any channel, as one table: each kind is a signal and
its Update twin (and `decide` takes several kinds as one), which `Decisions` plans and takes.

One plan (`Decisions.plan`, over `rules.decisions` and `rules.gate`) serves an Update's
validator, which refuses before anything reaches the history, and the handler. It routes each
part to the conversation that owns what it names: this one, or the subagent whose waiting call
(or question) this one holds from its reports, at any depth. A subagent's part is signalled to
it, which takes it as its own and signals back what became of it; so a decision is one request
from the client however deep its call is. The signal drops a request it cannot read
(`signal_guard.sent`)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from temporalio import workflow
from temporalio.exceptions import FailureError

from ..contract import (
    CLOSED_STATUSES,
    AnswerRequest,
    ConfirmRequest,
    Decision,
    HumanRequest,
    PendingConfirmation,
    PendingQuestion,
    RejectRequest,
    RoutedDecision,
    SignalOutcome,
    Status,
    names,
)
from ..contract.bounds import MAX_REMEMBERED_SIGNALS, MAX_WAITING_REQUESTS
from ..contract.state import ConversationState
from ..rules import decisions
from ..rules.decisions import Part
from ..rules.gate import Refusal
from .approvals import Approvals
from .question import OpenQuestion
from .request_memory import RequestMemory
from .signal_guard import sent

# What became of a request: the decisions it took, the answer's text, or its refusal.
Result = list[Decision] | str | Refusal
# What the status shows waiting: the calls (this conversation's and its subagents') and the
# question.
Shown = tuple[list[PendingConfirmation], PendingQuestion | None]


@dataclass
class Received:
    """A person's request, and what became of it (None while it waits for a result)."""

    request: HumanRequest
    result: Result | None = None


class Decisions:
    """What people decide and answer, planned once, routed to its owner, and taken.

    A request may wait. Temporal can deliver a signal in the same workflow task as the result
    that makes its call pending (a model reply naming the call, a tool asking a question), and
    applies the signal first; the run that recorded the history may have applied that result in
    an earlier task whose completion was lost (a server restart), and the signal in the next
    one. So a request naming what is not there yet is not refused while such a result is on its
    way: it waits, and is taken where the conversation makes a call pending or asks (`settle`),
    or refused once nothing is on its way. It then has one outcome however the two arrive, live
    and on replay (`tests/workflows/test_decision_order.py`)."""

    def __init__(self, state: ConversationState, approvals: Approvals, question: OpenQuestion,
                 memory: RequestMemory, *,
                 shown: Callable[[], Shown],
                 announce: Callable[[Received], None] = lambda received: None) -> None:
        self._state = state
        self.approvals = approvals
        self.question = question
        self.memory = memory
        self._shown = shown  # what the status shows waiting: this one's and its subagents'
        self._announce = announce  # what became of a request, on the stream and in the status
        self.results_pending = 0  # model calls, tools and subagents the conversation awaits
        self._waiting: list[Received] = []
        self._replies: dict[str, SignalOutcome] = {}  # from subagents, by request id
        self._awaited: set[str] = set()

    # ----- one plan, for the validator and the handler -----

    def plan(self, requests: list[HumanRequest], shown: Shown) -> list[Part] | Refusal:
        """The parts the requests come to, by the conversation that owns each (`shown`: what
        the status shows waiting, `self._shown()`, read once for the plan and its check)."""
        calls, question = shown
        parts: list[Part] = []
        for request in requests:
            routed = decisions.route(request, calls, question)
            if isinstance(routed, Refusal):
                return Refusal(decisions.whole(routed.reason, len(requests)))
            parts += routed
        return parts

    def refusal(self, parts: list[Part], shown: Shown) -> str | None:
        """Why the parts must be refused, checked whole before any is taken: this conversation's
        by the gate's rules, a subagent's by what it reported (it checks again, whole)."""
        for part in parts:
            if part.owner is None:
                planned = self._own_plan(part.request)
                reason = planned.reason if isinstance(planned, Refusal) else None
            else:
                reason = decisions.held_refusal(part, shown[0], self.approvals.owner)
            if reason is not None:
                return decisions.whole(reason, len(parts))
        return None

    def check(self, requests: list[HumanRequest], request_id: str | None) -> None:
        """An Update's validator: a request id already taken answers as it did; else what the
        requests would do now must be allowed."""
        if self.repeated(request_id) is not None:
            return
        shown = self._shown()
        parts = self.plan(requests, shown)
        refusal = parts.reason if isinstance(parts, Refusal) else self.refusal(parts, shown)
        if refusal is not None:
            raise ValueError(refusal)

    def _own_plan(self, request: HumanRequest) -> object:
        if isinstance(request, AnswerRequest):
            return self.question.plan(request)
        return self.approvals.plan(request)

    # ----- the handler -----

    async def take(self, requests: list[HumanRequest], request_id: str | None
                   ) -> SignalOutcome:
        """Take the requests, whole, or refuse them; their outcome is recorded under
        `request_id`. A request id seen before answers as it did the first time."""
        if (before := await self._before(request_id)) is not None:
            return before
        shown = self._shown()
        parts = self.plan(requests, shown)
        if isinstance(parts, Refusal):
            return self._refused(requests[0], request_id, parts.reason)
        if len(parts) == 1 and parts[0].owner is None:
            return await self._take_own(parts[0].request, request_id)
        refusal = self.refusal(parts, shown)
        if refusal is not None:
            return self._refused(requests[0], request_id, refusal)
        # this conversation's parts first, then each subagent's, all sent at once
        applied: list[Part] = []
        refused: list[tuple[Part, str]] = []
        for part in (p for p in parts if p.owner is None):
            received = Received(part.request, self._apply(part.request, workflow.now()))
            self._announce(received)
            if isinstance(received.result, Refusal):  # another part of it decided it already
                refused.append((part, received.result.reason))
            else:
                applied.append(part)
        routed = [p for p in parts if p.owner is not None]
        if refused:  # nothing more is sent
            refused += [(part, "not sent, as a part before it was refused") for part in routed]
            routed = []
        for part, outcome in zip(routed, await asyncio.gather(*map(self._route, routed))):
            if outcome.accepted:
                applied.append(part)
            else:
                refused.append((part, outcome.reason or "refused"))
        if refused:
            return self._refused(refused[0][0].request, request_id,
                                 decisions.partly_applied(applied, refused, len(parts)))
        return self.memory.accept(request_id)

    async def _before(self, request_id: str | None) -> SignalOutcome | None:
        """The outcome of a request id taken before (or, waiting, once it is taken)."""
        seen = self.repeated(request_id)
        if isinstance(seen, Received):
            await workflow.wait_condition(lambda: seen.result is not None)
            return _outcome(seen.result, request_id)
        return seen

    async def _take_own(self, request: HumanRequest, request_id: str | None) -> SignalOutcome:
        """This conversation's own request, once it is taken or refused."""
        received = self.receive(request, workflow.now())
        if received.result is None:  # `settle` takes it once its result is in
            await workflow.wait_condition(lambda: received.result is not None)
        outcome = _outcome(received.result, request_id)
        if request_id != request.request_id:  # a part of `decide`: its outcome is the whole's
            if outcome.accepted:
                self.memory.accept(request_id)
            else:
                self.memory.refuse(request_id, outcome.reason or "refused")
        return outcome

    def receive(self, request: HumanRequest, now: datetime) -> Received:
        """Take this conversation's own request now, refuse it now, or (a request that a result
        still on its way may make valid) keep it waiting: its `result` stays None until
        `settle`."""
        if len(self._waiting) < MAX_WAITING_REQUESTS and self._waits(request):  # past: refused
            self._waiting.append(Received(request))
            return self._waiting[-1]
        received = Received(request, self._apply(request, now))
        self._announce(received)
        return received

    def _refused(self, request: HumanRequest, request_id: str | None, reason: str
                 ) -> SignalOutcome:
        outcome = self.memory.refuse(request_id, reason)
        self._announce(Received(request, Refusal(outcome.reason or "")))
        return outcome

    def repeated(self, request_id: str | None) -> SignalOutcome | Received | None:
        """What became of a request id already taken, refused or waiting (a retried request,
        or one sent again with the same id, acts once)."""
        if request_id is None:
            return None
        waiting = next((t for t in self._waiting if t.request.request_id == request_id), None)
        return waiting or self.memory.outcome(request_id)

    def _apply(self, request: HumanRequest, now: datetime) -> Result:
        """Take a request now, or refuse it; its outcome is recorded under its request id."""
        if isinstance(request, AnswerRequest):
            result: Result = self.question.answer(request)
        else:
            result = self.approvals.decide(request, now)
        if isinstance(result, Refusal):
            return Refusal(self.memory.refuse(request.request_id, result.reason).reason or "")
        self.memory.accept(request.request_id)
        return result

    # ----- a subagent's part -----

    async def _route(self, part: Part) -> SignalOutcome:
        """Send a part to the subagent that owns it, and wait for what became of it: refused as
        stale if the subagent has finished."""
        assert part.owner is not None
        request = part.request
        if request.request_id is None:  # a reply is matched to its part by request id
            request = request.model_copy(update={"request_id": f"routed-{workflow.uuid4()}"})
        rid = request.request_id or ""
        self._awaited.add(rid)
        try:
            try:
                await workflow.get_external_workflow_handle(part.owner).signal(
                    names.ROUTED_DECISION_SIGNAL,
                    RoutedDecision.of(workflow.info().workflow_id, request))
            except FailureError:
                return self._stale(part, rid)
            await workflow.wait_condition(lambda: rid in self._replies or self._gone(part.owner))
        finally:
            self._awaited.discard(rid)
        reply = self._replies.get(rid)
        return reply if reply is not None else self._stale(part, rid)

    def replied(self, outcome: SignalOutcome) -> None:
        """What a subagent made of a part sent to it (`decision_reply`)."""
        if outcome.request_id in self._awaited:
            self._replies[outcome.request_id] = outcome
            while len(self._replies) > MAX_REMEMBERED_SIGNALS:
                del self._replies[next(iter(self._replies))]

    def _gone(self, owner: str) -> bool:
        """Whether the subagent that owns a part (or the one of this conversation's that runs
        it) has finished: it then answers nothing more."""
        child = next((c for c in self._state.current.children
                      if owner == c.workflow_id or owner.startswith(f"{c.workflow_id}/")), None)
        return child is None or child.status in CLOSED_STATUSES

    @staticmethod
    def _stale(part: Part, rid: str) -> SignalOutcome:
        request = part.request
        named = ", ".join(getattr(request, "call_ids", [])) or "the question"
        return SignalOutcome(request_id=rid, accepted=False,
                             reason=f"{named} is stale: subagent {part.owner} has finished")

    async def from_ancestor(self, routed: RoutedDecision) -> None:
        """A part of a decision an ancestor routed here: taken as this conversation's own, and
        what became of it sent back (only to an ancestor: the ids of a conversation's subagents
        begin with its own)."""
        part = routed.part()
        if part is None:
            workflow.logger.warning("a routed decision must carry one part; dropped")
            return
        # its call ids are this conversation's own: never routed again (a subagent's call may
        # have the id of one of this conversation's that is decided by now)
        outcome = (await self._before(part.request_id)
                   or await self._take_own(part, part.request_id))
        if not workflow.info().workflow_id.startswith(f"{routed.reply_to}/"):
            workflow.logger.warning("a routed decision asked for its reply to %s, not an "
                                    "ancestor; none sent", routed.reply_to[:200])
            return
        try:
            await workflow.get_external_workflow_handle(routed.reply_to).signal(
                names.DECISION_REPLY_SIGNAL, outcome)
        except FailureError:  # the ancestor has finished: nobody waits for it
            workflow.logger.info("the reply to %s found it finished", routed.reply_to[:200])

    # ----- waiting for what a result may bring -----

    def settle(self, now: datetime, final: bool = False) -> None:
        """Take or refuse the waiting requests that a result made decidable (or, `final`, all:
        the conversation ends or hands over), and announce them."""
        for received in list(self._waiting):
            if not final and self._waits(received.request):
                continue
            received.result = self._apply(received.request, now)
            self._waiting.remove(received)
            self._announce(received)

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
        return bool(self.results_pending or self.approvals.coming)

    def _waits(self, request: HumanRequest) -> bool:
        """Whether a request must wait: it cannot be taken now, and a result on its way may
        change that (`Refusal.final` False)."""
        if not self._on_its_way():
            return False
        plan = self._own_plan(request)
        return isinstance(plan, Refusal) and not plan.final

    # ----- what the status shows -----

    def waiting_status(self) -> Status | None:
        if self.approvals.waiting():
            return "waiting_for_confirmation"
        if self.question.pending_question() is not None:
            return "waiting_for_input"
        return None


def _outcome(result: object, request_id: str | None) -> SignalOutcome:
    if isinstance(result, Refusal):
        return SignalOutcome(request_id=request_id or "", accepted=False, reason=result.reason)
    return SignalOutcome(request_id=request_id or "", accepted=True)


# (the signal, its Update twin, the request both carry)
DECISIONS = (
    (names.CONFIRM_SIGNAL, names.DECIDE_CONFIRM.name, ConfirmRequest),
    (names.REJECT_SIGNAL, names.DECIDE_REJECT.name, RejectRequest),
    (names.ANSWER_SIGNAL, names.GIVE_ANSWER.name, AnswerRequest),
)


def decision_signal(name: str, request_type: type) -> Any:
    """The signal of a decision: a request it can read is taken."""
    async def handler(self: Any, request: Any = None) -> None:
        if sent(request, name):
            await self._decisions.take([request], request.request_id)

    handler.__name__ = handler.__qualname__ = name
    handler.__annotations__ = {"request": request_type | None, "return": None}
    return workflow.signal(name=name)(handler)


def decision_update(name: str, request_type: type) -> Any:
    """The Update twin of a decision: refused in its validator if what it would do now is not
    allowed (a request id already taken answers as it did), else taken, with its outcome."""
    async def handler(self: Any, request: Any) -> SignalOutcome:
        return await self._decisions.take([request], request.request_id)

    def check(self: Any, request: Any) -> None:
        self._decisions.check([request], request.request_id)

    for fn, returns in ((handler, SignalOutcome), (check, None)):
        fn.__annotations__ = {"request": request_type, "return": returns}
    handler.__name__ = handler.__qualname__ = name
    check.__name__ = check.__qualname__ = f"_check_{name}"
    update = workflow.update(name=name)(handler)
    update.validator(check)
    return update
