"""An owner's ledger, as pure decisions over its state (`contract.owner.LedgerState`): whether a
turn's ask is granted or waits and why, what the waiting asks get once something is given back,
and what a day's turn or a closed conversation's lease leaves. `workflows.owner_ledger` runs
them in a workflow, so a worker or server crash loses and doubles nothing.

A lease is tokens and dollars set aside for a turn's next model calls: the day's spending plus
every running turn's lease never passes the day's limit, so however many conversations spend at
once, the owner's spending stays within it (as far as a call keeps to what it was set aside:
its prompt as estimated and its reply's reserve). Asks wait in the order they came: a slot for a
turn waits behind the slots asked before it, tokens behind the tokens asked before."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from ..contract.owner import (
    GiveBack,
    Held,
    HeldTurn,
    Lease,
    LeaseAsk,
    LedgerState,
    LedgerView,
    LimitName,
    OwnerLimits,
    SetLimits,
    Waiting,
)

BUDGETS: tuple[LimitName, ...] = ("daily_tokens", "daily_usd")


def new_day(state: LedgerState, day: str) -> bool:
    """Today's counts start again on a new (UTC) day; what running turns hold stays held."""
    if state.day == day:
        return False
    state.day, state.used_tokens, state.used_usd = day, 0, 0.0
    return True


def held_tokens(state: LedgerState) -> int:
    return sum(h.tokens for h in state.held.values())


def held_usd(state: LedgerState) -> float:
    return sum(h.usd for h in state.held.values())


def running(state: LedgerState) -> int:
    return sum(1 for h in state.held.values() if h.slot)


def ask(state: LedgerState, asked: LeaseAsk, now: datetime) -> Lease:
    """A turn's ask: granted at once if the owner's limits allow it and nobody asked first for
    what it asks, else queued; an ask sent again (a retried activity) gets the same answer."""
    state.configured = asked.configured
    held = state.held.get(asked.key)
    if held is not None and held.seq >= asked.seq and held.last is not None:
        return held.last
    for waiting in state.waiting:
        if waiting.ask.key == asked.key:
            return _waits(waiting)
    room = _Room.of(state, state.waiting)
    blocked = _blocked(state, asked, room)
    if blocked is None:
        return _grant(state, asked, now, room)
    waiting = Waiting(ask=asked, since=now, waits_for=blocked[0], why=blocked[1])
    state.waiting.append(waiting)
    return _waits(waiting)


def grant_waiting(state: LedgerState, now: datetime) -> list[tuple[str, Lease]]:
    """The waiting asks the limits allow now, in the order they came (each with its
    conversation, for the ledger to tell): after a turn gave its lease back, an admin raised a
    limit, or a new day began. Those still waiting are told why again, as things stand now.
    One pass: what the leases hold is summed once and kept up as asks are granted."""
    granted: list[tuple[str, Lease]] = []
    still: list[Waiting] = []
    room = _Room.of(state, [])
    for waiting in state.waiting:
        blocked = _blocked(state, waiting.ask, room)
        if blocked is None:
            granted.append((waiting.ask.conversation_id, _grant(state, waiting.ask, now, room)))
        else:
            still.append(waiting.model_copy(update={"waits_for": blocked[0], "why": blocked[1]}))
            room.behind(still[-1])
    state.waiting = still
    return granted


def give_back(state: LedgerState, given: GiveBack) -> bool:
    """A turn ended: what it used is today's spending, the rest of its lease is free again, and
    an ask of it still waiting (a turn stopped while it waited) is withdrawn. A give-back of a
    lease the ledger does not hold (sent again, or taken back already) changes nothing."""
    held = state.held.pop(given.key, None)
    waited = len(state.waiting)
    state.waiting = [w for w in state.waiting if w.ask.key != given.key]
    if held is None:
        return len(state.waiting) < waited
    state.used_tokens += max(0, given.used_tokens)
    state.used_usd += max(0.0, given.used_usd)
    return True


def reclaim(state: LedgerState, closed: set[str]) -> int:
    """Leases whose conversations closed without giving them back (terminated, say): all they
    held counts as spent (what they used is not known, and the limit must hold), their slots
    are free, their asks withdrawn. How many were taken back."""
    gone = [key for key, held in state.held.items() if held.conversation_id in closed]
    for key in gone:
        held = state.held.pop(key)
        state.used_tokens += held.tokens
        state.used_usd += held.usd
    state.waiting = [w for w in state.waiting if w.ask.conversation_id not in closed]
    state.reclaimed += len(gone)
    return len(gone)


def set_limits(state: LedgerState, change: SetLimits) -> None:
    """An admin's limits: over the worker's where they say (and over the admin's earlier ones,
    unless `reset` drops those first)."""
    state.override = change.limits.over(OwnerLimits() if change.reset else state.override)


def view(state: LedgerState) -> LedgerView:
    return LedgerView(
        owner=state.owner, limits=state.limits, configured=state.configured,
        override=state.override, day=state.day, used_tokens=state.used_tokens,
        used_usd=round(state.used_usd, 10), held_tokens=held_tokens(state),
        held_usd=round(held_usd(state), 10),
        running=sorted({h.conversation_id for h in state.held.values() if h.slot}),
        waiting=[HeldTurn(conversation_id=w.ask.conversation_id, limit=w.waits_for,
                          message=w.why, since=w.since) for w in state.waiting])


def _waits(waiting: Waiting) -> Lease:
    return Lease(key=waiting.ask.key, seq=waiting.ask.seq, granted=False,
                 waits_for=waiting.waits_for, why=waiting.why)


@dataclass
class _Room:
    """What a decision reads of the ledger, worked out once and kept up as it grants: the limits
    in force, the running turns, what their leases hold, and the asks ahead in the queue."""

    limits: OwnerLimits
    running: int
    tokens: int
    usd: float
    slots_ahead: int = 0
    budget_ahead: int = 0

    @classmethod
    def of(cls, state: LedgerState, ahead: list[Waiting]) -> _Room:
        room = cls(state.limits, running(state), held_tokens(state), held_usd(state))
        for waiting in ahead:
            room.behind(waiting)
        return room

    def behind(self, waiting: Waiting) -> None:
        """One more ask waits ahead of those still to be decided."""
        self.slots_ahead += waiting.ask.slot
        self.budget_ahead += waiting.waits_for in BUDGETS


def _blocked(state: LedgerState, asked: LeaseAsk, room: _Room) -> tuple[LimitName, str] | None:
    """Which limit keeps the ask waiting, and why in words; None: it may be granted now."""
    limits, owner = room.limits, state.owner
    held = state.held.get(asked.key)
    if asked.slot and not (held is not None and held.slot) and limits.running_turns is not None:
        queued = room.slots_ahead
        if room.running >= limits.running_turns or queued:
            also = f" and {queued} more waiting" if queued else ""
            return "running_turns", (
                f"queued behind {room.running} running turn(s) of {owner}{also} (at most "
                f"{limits.running_turns} at once)")
    budget_ahead = room.budget_ahead
    spent = (("daily_tokens", limits.daily_tokens, state.used_tokens, room.tokens,
              asked.need_tokens, "tokens"),
             ("daily_usd", limits.daily_usd, state.used_usd, room.usd, asked.need_usd,
              "dollars"))
    for name, limit, used, holding, need, unit in spent:
        if limit is None or (limit - used - holding >= need and not budget_ahead):
            continue
        if limit - used - holding >= need:
            return name, f"queued behind {budget_ahead} turn(s) of {owner} waiting for budget"
        return name, (f"{owner}'s daily budget of {_amount(limit, unit)} is spent: "
                      f"{_amount(used, unit)} used today and {_amount(holding, unit)} set aside "
                      f"for running turns; the next model call needs {_amount(need, unit)} "
                      "(it goes on when turns end, at 00:00 UTC, or when an admin raises the "
                      "limit)")
    return None


def _grant(state: LedgerState, asked: LeaseAsk, now: datetime, room: _Room) -> Lease:
    limits = room.limits
    tokens = usd = None
    if limits.daily_tokens is not None:
        free = limits.daily_tokens - state.used_tokens - room.tokens
        tokens = max(asked.need_tokens, min(asked.tokens, free))
    if limits.daily_usd is not None:
        free_usd = limits.daily_usd - state.used_usd - room.usd
        usd = round(max(asked.need_usd, min(asked.usd, free_usd)), 10)
    held = state.held.get(asked.key) or Held(key=asked.key, conversation_id=asked.conversation_id,
                                              since=now)
    lease = Lease(key=asked.key, seq=asked.seq, granted=True, tokens=tokens, usd=usd,
                  call_usd=asked.call_usd)
    room.running += asked.slot and not held.slot
    room.tokens += tokens or 0
    room.usd += usd or 0.0
    state.held[asked.key] = held.model_copy(update={
        "slot": held.slot or asked.slot, "tokens": held.tokens + (tokens or 0),
        "usd": held.usd + (usd or 0.0), "seq": asked.seq, "last": lease})
    return lease


def _amount(value: float, unit: str) -> str:
    return f"${value:,.4f}".rstrip("0").rstrip(".") if unit == "dollars" else f"{int(value):,} tokens"
