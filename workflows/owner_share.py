"""A conversation's share of its owner's limits (`AGENT_OWNER_LIMITS`, held by the owner's
ledger: `workflows.owner_ledger`). Before each model call a turn holds enough of the owner's
daily budget for that call (and, before its first, a slot among the owner's running turns); it
asks the ledger when what it holds falls short, through its worker's `lease_owner_share`
activity, and waits if the ledger says so: the status (`held`), the stream and the webhooks
say why, and the ledger's signal lets it go on. When the turn ends it gives back what it did
not use. A subagent's turns run in their parent's slot, and spend from the same budget."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import FailureError

from ..contract import ConversationInput
from ..contract.bounds import keep_last
from ..contract.owner import (
    ANONYMOUS,
    GIVE_BACK_SIGNAL,
    LEASE_ACTIVITY,
    GiveBack,
    HeldTurn,
    Lease,
    ShareRequest,
    TurnShare,
    ledger_id,
)
from ..contract.state import ConversationState
from .reporting import Reporter

EARLY = 4  # grants kept for an ask not yet made (a turn has one ask at a time)


class OwnerShare:
    def __init__(self, inp: ConversationInput, state: ConversationState, reporter: Reporter,
                 sync: Callable[[], None]) -> None:
        self._input, self._state, self._reporter, self._sync = inp, state, reporter, sync

    @property
    def owner(self) -> str:
        return self._input.owner or ANONYMOUS

    async def before_call(self, reserve: Callable[[], tuple[int, int]]) -> None:
        """Hold enough of the owner's share for the next model call (`reserve`: its tokens at
        most, and its reply's), asking the ledger (and waiting for it) when what the turn holds
        falls short. Nothing without limits on the worker."""
        if not self._state.owner_limits:
            return
        need, output = reserve()
        turn = self._state.current
        share = turn.share
        if share is None:
            share = turn.share = TurnShare(key=f"{workflow.info().workflow_id}#{turn.number}")
        tokens_left, usd_left = share.left()
        if share.seq and (tokens_left is None or tokens_left >= need) and \
                (usd_left is None or usd_left >= share.call_usd):
            return
        share.seq += 1
        request = ShareRequest(
            owner=self.owner, key=share.key, conversation_id=workflow.info().workflow_id,
            seq=share.seq, slot=share.seq == 1 and self._input.profile is None, call=need,
            output_share=output / need if need else 0.0, tokens_left=tokens_left,
            usd_left=usd_left, model=self._input.model)
        lease = await workflow.execute_local_activity(
            LEASE_ACTIVITY, request, result_type=Lease,
            start_to_close_timeout=timedelta(seconds=30),
            retry_policy=RetryPolicy(maximum_interval=timedelta(seconds=10)),
            summary=f"owner share of turn {turn.number}")
        for early in [*self._state.early_grants, lease]:
            share.take(early)
        self._state.early_grants = []
        if share.granted == share.seq:  # at once (or signalled before the answer came)
            return
        share.waiting = HeldTurn(limit=lease.waits_for or "running_turns",
                                 message=lease.why or "waiting for the owner's share",
                                 since=workflow.now())
        self._held(share.waiting)
        await workflow.wait_condition(lambda: share.granted == share.seq)
        self._reporter.emit("turn_resumed", text="the owner's share allows it: going on")
        workflow.logger.info("turn %d goes on", turn.number)
        self._sync()

    def granted(self, lease: Lease) -> None:
        """The ledger's grant of the turn's ask, taken now or, if the turn has not made the
        ask yet as this run sees it, when it does."""
        share = self._state.current.share
        if share is not None and lease.key == share.key and lease.seq == share.seq:
            share.take(lease)
        else:
            self._state.early_grants = keep_last([*self._state.early_grants, lease], EARLY)

    async def give_back(self) -> None:
        """The turn ended: what it used, and the rest of its lease back to the ledger. A
        turn that never asked has nothing to give back."""
        share = self._state.current.share
        if share is None or not share.seq:
            return
        self._state.current.share = None
        try:
            await workflow.get_external_workflow_handle(ledger_id(self.owner)).signal(
                GIVE_BACK_SIGNAL, GiveBack(key=share.key, used_tokens=share.used_tokens,
                                           used_usd=round(share.used_usd, 10)))
        except FailureError as err:  # no ledger to give back to: nothing is held either
            workflow.logger.warning("turn's share not given back: %s", err)

    def _held(self, held: HeldTurn) -> None:
        turn = self._state.current
        workflow.logger.info("turn %d held: %s", turn.number, held.message)
        self._reporter.emit("turn_held", text=held.message)
        if self._input.profile is None:
            self._reporter.notifier.notify("turn_held", turn.number, limit=held.limit,
                                           message=held.message)
        self._sync()
