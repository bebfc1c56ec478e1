"""Deliveries to webhooks (DESIGN "Reaching the human"): each event a webhook asked for is one
`notify` activity, run beside the conversation, never in its way: a receiver that is down for
hours delays nothing, and its deliveries are retried (Temporal's policy, with backoff) for the
worker's retry window, then recorded as failed in the audit trail. A delivery not done when the
conversation hands over to a fresh run is carried in the state and sent again there, with the
same key, so a receiver can drop the repeat.

The key is drawn from the conversation, the event and a counter kept in the state: the same on
every replay, on every attempt, across a handover; no random number is spent on it."""

from __future__ import annotations

import asyncio
import hashlib
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError

from ..contract import NOTIFY_ACTIVITY, AuditRecord, NotifyRequest, Usage
from ..contract.bounds import keep_last
from ..contract.state import ConversationState
from .failures import failure_reason, is_cancelled

MAX_OUTBOX = 64  # deliveries a conversation carries at most (the oldest go first)
DELIVERY_TIMEOUT = timedelta(seconds=15)
# The delivery heartbeats while its request runs: a delivery whose worker died is sent again
# within seconds, not once its whole timeout has passed.
DELIVERY_HEARTBEAT = timedelta(seconds=5)
DRAIN_GRACE = timedelta(seconds=30)  # what a conversation's end waits for deliveries in flight
RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), backoff_coefficient=2.0,
                    maximum_interval=timedelta(minutes=5))


class Notifier:
    def __init__(self, state: ConversationState, record: Any) -> None:
        self._state = state
        self._record = record  # Reporter.record: the audit trail
        self._tasks: list[asyncio.Task[None]] = []

    def notify(self, event: str, turn: int, args_hash: str | None = None,
               ticket: str | None = None, **fields: Any) -> None:
        """Deliver `event` to each webhook that asked for it (nothing without webhooks)."""
        hooks = [h for h in (*self._state.webhooks, *self._state.pushes) if event in h.events]
        if not hooks:
            return
        conversation = workflow.info().workflow_id
        payload = {"event": event, "conversation_id": conversation, "turn": turn,
                   "at": workflow.now().isoformat(),
                   **{k: v for k, v in fields.items() if v is not None}}
        for hook in hooks:
            self._state.notified += 1
            key = hashlib.sha256(f"{conversation}|{event}|{self._state.notified}|"
                                 f"{hook.push or hook.index}".encode()).hexdigest()[:32]
            request = NotifyRequest(webhook=hook.index, host=hook.host, event=event, key=key,
                                    payload=payload, args_hash=args_hash, ticket=ticket,
                                    push=hook.push)
            self._state.outbox = keep_last([*self._state.outbox, request], MAX_OUTBOX)
            self._start(request)

    def resume(self) -> None:
        """Send again what a previous run had not delivered when it handed over."""
        for request in self._state.outbox:
            self._start(request)

    def _start(self, request: NotifyRequest) -> None:
        self._tasks.append(asyncio.ensure_future(self._deliver(request)))

    async def _deliver(self, request: NotifyRequest) -> None:
        try:
            await workflow.execute_activity(
                NOTIFY_ACTIVITY, request, result_type=int,
                start_to_close_timeout=DELIVERY_TIMEOUT, heartbeat_timeout=DELIVERY_HEARTBEAT,
                schedule_to_close_timeout=timedelta(seconds=self._state.webhook_retry_s),
                retry_policy=RETRY, summary=f"notify {request.event} → {request.host}")
            outcome = "delivered"
        except ActivityError as err:
            if is_cancelled(err):  # handing over: the next run sends it again
                return
            outcome = f"failed: {failure_reason(err)}"
            workflow.logger.warning("delivery of %s to %s %s", request.event, request.host,
                                    outcome)
        except asyncio.CancelledError:
            return
        self._state.outbox = [r for r in self._state.outbox if r.key != request.key]
        self._finished(request, outcome)

    def _finished(self, request: NotifyRequest, outcome: str) -> None:
        self._record(AuditRecord(
            at=workflow.now(), turn=int(request.payload.get("turn") or 0), step=0,
            thought=None, tokens=Usage(), kind="notify", by=request.host,
            text=f"{request.event} → {request.host}: {outcome} (delivery {request.key})"))

    async def drain(self, grace: timedelta = DRAIN_GRACE) -> None:
        """At the end: give the deliveries in flight `grace` to finish (a receiver that is down
        must not hold the conversation's result), then give up on the rest, in the audit."""
        try:
            await workflow.wait_condition(lambda: all(t.done() for t in self._tasks),
                                          timeout=grace)
        except asyncio.TimeoutError:
            self.hand_over()
            for request in self._state.outbox:
                self._finished(request, "not delivered: the conversation ended first")
            self._state.outbox = []

    def hand_over(self) -> None:
        """Stop the deliveries in flight: the outbox carries them to the next run."""
        for task in self._tasks:
            if not task.done():
                task.cancel()
