"""An owner's ledger: one long-lived workflow per owner (`contract.owner.ledger_id`) that holds
the owner's limits (`AGENT_OWNER_LIMITS`, and an admin's) across every conversation, worker
and host. Turns lease their share by Update (`lease`, sent by their worker's
`lease_owner_share` activity, which starts the ledger if need be) and give back what they did
not use by signal when they end; an ask the limits do not allow waits here, in order, and its
conversation is signalled once it is granted. The decisions are `rules.owner_ledger`'s.

A lease whose conversation closed without giving it back (terminated, say) is taken back, as
spent, when something has waited a while (the `closed_conversations` activity looks); the
ledger continues as new when its history grows, carrying its state whole."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import FailureError

from ..contract.owner import (
    CLOSED_ACTIVITY,
    GIVE_BACK_SIGNAL,
    LEASE_GRANTED_SIGNAL,
    LEASE_UPDATE,
    LEDGER_QUERY,
    LEDGER_WORKFLOW_TYPE,
    SET_LIMITS_UPDATE,
    GiveBack,
    Lease,
    LeaseAsk,
    LedgerState,
    LedgerView,
    SetLimits,
)
from ..rules import owner_ledger as ledger
from .failures import ACTIVITY_FAILURES, failure_reason


@workflow.defn(name=LEDGER_WORKFLOW_TYPE)
class OwnerLedgerWorkflow:
    @workflow.init
    def __init__(self, state: LedgerState) -> None:
        self._state = state
        self._changed = True  # something may be granted: the main loop looks
        self._looked = workflow.now()  # when leases' holders were last looked at
        self._alarm_at: datetime | None = None  # when the alarm set last rings
        self._rang = False  # an alarm rang since the main loop last looked
        self._alarms: set[asyncio.Task[None]] = set()  # set, not rung yet

    @workflow.run
    async def run(self, state: LedgerState) -> None:
        while True:
            self._set_alarm()
            await workflow.wait_condition(
                lambda: self._changed or self._rang or self._handover_due())
            self._changed = self._rang = False
            self._today()
            if self._state.waiting and workflow.now() - self._looked >= self._look_after():
                await self._take_back_closed()
            await self._tell(ledger.grant_waiting(self._state, workflow.now()))
            if self._handover_due() and not self._changed:
                await workflow.wait_condition(workflow.all_handlers_finished)
                workflow.logger.info("ledger of %s continuing as new", self._state.owner)
                workflow.continue_as_new(self._state, initial_versioning_behavior=(
                    workflow.ContinueAsNewVersioningBehavior.AUTO_UPGRADE))

    @workflow.update(name=LEASE_UPDATE)
    def lease(self, asked: LeaseAsk) -> Lease:
        self._today()
        answer = ledger.ask(self._state, asked, workflow.now())
        self._changed = self._changed or not answer.granted  # a wait: look again in a while
        return answer

    @workflow.signal(name=GIVE_BACK_SIGNAL)
    def give_back(self, given: GiveBack | None = None) -> None:
        if given is not None and ledger.give_back(self._state, given):
            self._changed = True

    @workflow.update(name=SET_LIMITS_UPDATE)
    async def set_limits(self, change: SetLimits) -> LedgerView:
        """An admin's limits; what they let go on is granted before the answer, which shows
        the ledger after."""
        ledger.set_limits(self._state, change)
        workflow.logger.info("limits of %s set by %s: %s", self._state.owner, change.by,
                             self._state.limits)
        await self._tell(ledger.grant_waiting(self._state, workflow.now()))
        return ledger.view(self._state)

    @workflow.query(name=LEDGER_QUERY)
    def view(self) -> LedgerView:
        return ledger.view(self._state)

    def _today(self) -> None:
        if ledger.new_day(self._state, workflow.now().date().isoformat()):
            self._changed = True

    def _next_look(self) -> timedelta | None:
        """While something waits, wake at the next UTC midnight (a new day's budget) and in a
        while (are the holders of leases still there?); else only a message wakes it."""
        if not self._state.waiting:
            return None
        now = workflow.now()
        midnight = datetime.combine(now.date() + timedelta(days=1), datetime.min.time(),
                                    tzinfo=now.tzinfo)
        return max(timedelta(seconds=1), min(midnight - now, self._look_after()))

    def _set_alarm(self) -> None:
        """A timer for the next look (`_next_look`), unless one set before rings by then. A timer
        is never cancelled: one that rings early costs a look that finds nothing to do, where a
        cancelled timer in the same workflow task as an Update's answer once ordered its events
        so that the history did not replay (TMPRL1100, "Update machine does not handle this
        event: TimerCanceled")."""
        after = self._next_look()
        if after is None:
            return
        at = workflow.now() + after
        if self._alarm_at is not None and workflow.now() < self._alarm_at <= at:
            return
        self._alarm_at = at
        alarm = asyncio.create_task(self._ring(after), name="ledger alarm")
        self._alarms.add(alarm)
        alarm.add_done_callback(self._alarms.discard)

    async def _ring(self, after: timedelta) -> None:
        await workflow.sleep(after, summary="next look")
        self._rang = True

    def _look_after(self) -> timedelta:
        return timedelta(seconds=self._state.look_after_s)

    def _handover_due(self) -> bool:
        info = workflow.info()
        return (info.is_continue_as_new_suggested()
                or info.get_current_history_length() >= self._state.handover_events)

    async def _take_back_closed(self) -> None:
        self._looked = workflow.now()
        holders = sorted({h.conversation_id for h in self._state.held.values()}
                         | {w.ask.conversation_id for w in self._state.waiting})
        try:
            closed = await workflow.execute_local_activity(
                CLOSED_ACTIVITY, holders, result_type=list[str],
                start_to_close_timeout=timedelta(seconds=30),
                retry_policy=RetryPolicy(maximum_attempts=3), summary="closed holders")
        except ACTIVITY_FAILURES as err:
            workflow.logger.warning("could not look at leases' holders: %s", failure_reason(err))
            return
        if taken := ledger.reclaim(self._state, set(closed)):
            workflow.logger.warning("took back %d lease(s) of closed conversations", taken)

    async def _tell(self, granted: list[tuple[str, Lease]]) -> None:
        """Signal each conversation its grant; one that has closed gives it back unused."""
        async def tell(conversation_id: str, lease: Lease) -> None:
            try:
                await workflow.get_external_workflow_handle(conversation_id).signal(
                    LEASE_GRANTED_SIGNAL, lease)
            except FailureError:
                ledger.give_back(self._state, GiveBack(key=lease.key))
                self._changed = True

        await asyncio.gather(*(tell(cid, lease) for cid, lease in granted))
