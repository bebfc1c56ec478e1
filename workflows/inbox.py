"""The messages waiting for their turn: each is checked as it comes (ending, empty, too large
for the model whatever is folded, queue full), and taken one turn at a time; a message steered
into the turn in flight waits for its next step instead."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..contract import SayRequest, SignalOutcome
from ..contract.bounds import MAX_QUEUED_MESSAGES, Limits, Tail, check_message, text_size
from ..contract.state import ConversationState
from .request_memory import RequestMemory


class Inbox:
    def __init__(self, state: ConversationState, limits: Limits, memory: RequestMemory,
                 too_long: Callable[[str], str | None], emit: Callable[..., Any]) -> None:
        self._state = state
        self._limits = limits
        self._memory = memory
        # why a message is too long for the model whatever is folded (`ModelStep.message_refusal`)
        self._too_long = too_long
        queue_bound = MAX_QUEUED_MESSAGES if limits.inbox_bytes is not None else 2**31
        self._queue = Tail(state.inbox, queue_bound, limits.inbox_bytes, text_size)
        self._steering = Tail(state.steering, queue_bound, limits.inbox_bytes, text_size)
        self._emit = emit  # an event of the live stream (`Reporter.emit`)

    def refusal(self, text: str, one_shot: bool, closed: bool) -> str | None:
        """Why a message cannot be queued for a turn, or None. Changes nothing."""
        if one_shot:
            return "a one-shot conversation takes no more messages"
        if self._state.end_requested or closed:
            return "the conversation is ending"
        reason = check_message(text, self._limits.message_bytes) or self._too_long(text)
        # (what is steered into a turn joins the queue if the turn ends first: one budget)
        if reason is None and not self._queue.fits(text_size(text) + self._steering.bytes,
                                                   len(self._state.steering)):
            reason = (f"{len(self._state.inbox)} message(s) of {self._queue.bytes:,} bytes are "
                      "already waiting; send it once the conversation has caught up")
        return reason

    def take(self, request: SayRequest, one_shot: bool, closed: bool) -> SignalOutcome:
        """Queue a message for its turn, or refuse it. A request id seen before answers as it
        did the first time."""
        if (seen := self._memory.outcome(request.request_id)) is not None:
            return seen
        reason = self.refusal(request.text, one_shot, closed)
        if reason is not None:
            return self._memory.refuse(request.request_id, reason)
        if request.steer and self._state.current.in_progress:
            self._steering.append(request.text)
            self._emit("steer_queued", text=request.text)
            number = self._state.current.number
            return self._memory.accept(request.request_id, turn=number, did=(
                f"steered into turn {number}: its model gets it at its next step"))
        self._queue.append(request.text)
        return self._memory.accept(request.request_id,
                                   turn=self._state.current.number + len(self._state.inbox))

    def take_first(self, text: str, request_id: str | None) -> str | None:
        """The conversation's first message (`text`, taken at its start), judged once the
        model's window is known (after the handshake) as a `say` of it would be: refused, and
        left out, if it cannot fit the model whatever is folded; else taken as turn 1, under
        its request id. Returns why it was refused."""
        first = self._state.inbox[:1] == [text]
        reason = self._too_long(text) if first else None
        if reason is None:
            self._memory.accept(request_id, turn=1)
            return None
        self._queue.pop_first()
        self._state.notice(f"the first message was refused: {reason}")
        self._memory.refuse(request_id, reason)
        return reason

    def next(self) -> str:
        return self._queue.pop_first()

    def steered(self) -> list[str]:
        """The messages steered into the turn since its last step, taken for its next."""
        taken = list(self._state.steering)
        while self._state.steering:
            self._steering.pop_first()
        return taken

    def unsteered(self) -> None:
        """A turn ended before its model got what was steered into it: the next turn's, first."""
        for text in reversed(self.steered()):
            self._queue.prepend(text)
