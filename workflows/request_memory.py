"""What became of each request a person sent, by its request id: a retried request, or one
sent again with the same id, acts once and answers as it did. Kept in the conversation's state
(the latest ones), so it crosses continue-as-new; a client reads it with `signal_outcome`."""

from __future__ import annotations

from temporalio import workflow

from ..contract import SignalOutcome
from ..contract.bounds import (
    MAX_REASON_BYTES,
    MAX_REMEMBERED_SIGNALS,
    MAX_REQUEST_ID_BYTES,
    clip,
    keep_last,
    text_size,
)
from ..contract.state import ConversationState


class RequestMemory:
    def __init__(self, state: ConversationState) -> None:
        self._state = state

    def outcome(self, request_id: str | None) -> SignalOutcome | None:
        if request_id is None:
            return None
        return next((o for o in reversed(self._state.outcomes) if o.request_id == request_id),
                    None)

    def accept(self, request_id: str | None, turn: int | None = None,
               did: str | None = None) -> SignalOutcome:
        """Taken (`did`: what it did, where that is worth saying: a stop with no turn to stop)."""
        outcome = SignalOutcome(request_id=request_id or "", accepted=True, turn=turn, reason=did)
        self._record(request_id, outcome)
        return outcome

    def refuse(self, request_id: str | None, reason: str) -> SignalOutcome:
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
