"""Owners' limits on the worker's side (`AGENT_OWNER_LIMITS`): the file, read once, and the
local activities that carry a turn's ask to its owner's ledger (`workflows.owner_ledger`) and
tell the ledger which holders of its leases have closed.

A turn's ask is priced here, with the prices of the model entry the call goes to, and sent to
the ledger as an Update with start (the ledger begins with an owner's first ask). Its id is the
turn's key and ask, so an attempt sent again after a crash is the same Update: answered as the
first was, never granted twice (the ledger answers an ask it has seen with its answer too)."""

from __future__ import annotations

import asyncio

import structlog
from temporalio import activity
from temporalio.client import Client, WithStartWorkflowOperation, WorkflowExecutionStatus
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.service import RPCError, RPCStatusCode

from ..contract import Usage
from ..contract.owner import (
    CLOSED_ACTIVITY,
    LEASE_ACTIVITY,
    LEASE_UPDATE,
    LEDGER_WORKFLOW_TYPE,
    Lease,
    LeaseAsk,
    LedgerState,
    ShareRequest,
    ledger_id,
)
from .settings import ActivitySettings

log = structlog.get_logger()
AHEAD = 2  # an ask sets aside this many calls' worth, so that most calls need not ask
MAX_LOOKED = 1_000  # holders one look describes
LOOKS_AT_ONCE = 16


class OwnerLimitActivities:
    def __init__(self, settings: ActivitySettings, client: Client | None) -> None:
        self._settings = settings
        self._client = client
        self._unpriced: set[str] = set()  # models already said to have no price

    @activity.defn(name=LEASE_ACTIVITY)
    async def lease_owner_share(self, request: ShareRequest) -> Lease:
        limits = self._settings.owner_limits
        if limits is None or self._client is None:  # limits off since the turn began
            return Lease(key=request.key, seq=request.seq, granted=True)
        call_usd = self._price(request)
        tokens_left, usd_left = request.tokens_left or 0, request.usd_left or 0.0
        asked = LeaseAsk(
            key=request.key, conversation_id=request.conversation_id, seq=request.seq,
            slot=request.slot, tokens=max(0, request.call * AHEAD - tokens_left),
            need_tokens=max(0, request.call - tokens_left),
            usd=round(max(0.0, call_usd * AHEAD - usd_left), 10),
            need_usd=round(max(0.0, call_usd - usd_left), 10), call_usd=call_usd,
            configured=limits.of(request.owner))
        info = activity.info()
        start = WithStartWorkflowOperation(
            LEDGER_WORKFLOW_TYPE, LedgerState(owner=request.owner), id=ledger_id(request.owner),
            task_queue=info.task_queue, id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING)
        lease = await self._client.execute_update_with_start_workflow(
            LEASE_UPDATE, asked, start_workflow_operation=start, result_type=Lease,
            id=f"{request.key}/{request.seq}")
        log.info("owner share", owner=request.owner, key=request.key, seq=request.seq,
                 granted=lease.granted, tokens=lease.tokens, usd=lease.usd, why=lease.why)
        return lease

    @activity.defn(name=CLOSED_ACTIVITY)
    async def closed_conversations(self, ids: list[str]) -> list[str]:
        """Of these conversations, those no longer running (or never found)."""
        if self._client is None:
            return []
        slots = asyncio.Semaphore(LOOKS_AT_ONCE)

        async def closed(workflow_id: str) -> bool:
            async with slots:
                try:
                    described = await self._client.get_workflow_handle(workflow_id).describe()
                except RPCError as err:
                    if err.status == RPCStatusCode.NOT_FOUND:
                        return True
                    raise
                return described.status != WorkflowExecutionStatus.RUNNING

        looked = ids[:MAX_LOOKED]
        gone = await asyncio.gather(*(closed(i) for i in looked))
        return [i for i, is_gone in zip(looked, gone, strict=True) if is_gone]

    def _price(self, request: ShareRequest) -> float:
        """The dollars of a call of `request.call` tokens on its entry (0 when its price is
        not known: the dollar limit cannot count that model's calls, and the log says so)."""
        _, spec = self._settings.model_entries().resolve(request.model)  # (not a fallback's)
        output = int(request.call * request.output_share)
        cost, note = self._settings.prices.for_entry(spec.base_url, spec.free, spec.price).cost(
            spec.model, Usage(prompt_tokens=request.call - output, completion_tokens=output,
                              total_tokens=request.call))
        if cost is None:
            if spec.model not in self._unpriced:
                self._unpriced.add(spec.model)
                log.warning("owner share: no price", model=spec.model, note=note)
            return 0.0
        return cost
