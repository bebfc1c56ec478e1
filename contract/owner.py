"""An owner's fair share (DESIGN "Control of a running turn, and limits"): the limits of
`AGENT_OWNER_LIMITS` (turns running at once, tokens and dollars a day), the ledger workflow
that holds them for one owner, and what a conversation asks of it and is answered.

A turn leases its share from its owner's ledger (`workflows.owner_ledger`): a slot among the
owner's running turns, and tokens and dollars enough for its next model call, before it makes
it. What the turn did not use goes back when it ends. A lease the ledger cannot give waits in
the ledger's queue, and the turn says why it waits (`HeldTurn`) until the ledger signals it."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

ANONYMOUS = "anonymous"  # who names nobody: the API's principal without tokens, an owner unset
LEDGER_WORKFLOW_TYPE = "OwnerLedger"
LEASE_UPDATE = "lease"  # a turn's ask: answered at once, granted or queued
SET_LIMITS_UPDATE = "set_limits"  # an admin's: the owner's limits from now on
GIVE_BACK_SIGNAL = "give_back"  # a turn's end: what it used, the rest of its lease back
LEDGER_QUERY = "ledger"
LEASE_GRANTED_SIGNAL = "owner_lease_granted"  # the ledger's, to a conversation that waited
LEASE_ACTIVITY = "lease_owner_share"  # a conversation's ask, sent to the ledger by its worker
CLOSED_ACTIVITY = "closed_conversations"  # the ledger's look at leases' holders that are gone

MAX_OWNERS = 10_000  # entries of an AGENT_OWNER_LIMITS file
OUTPUT_RESERVE_TOKENS = 4_096  # what a model call's reply is reserved, its entry setting none
LimitName = Literal["running_turns", "daily_tokens", "daily_usd"]


def ledger_id(owner: str) -> str:
    """The workflow id of an owner's ledger."""
    return f"owner-ledger:{owner}"


class OwnerLimits(BaseModel):
    """An owner's limits; None: none of that kind."""

    running_turns: int | None = Field(default=None, ge=1, le=10_000)
    daily_tokens: int | None = Field(default=None, ge=1)
    daily_usd: float | None = Field(default=None, gt=0)

    def over(self, other: OwnerLimits) -> OwnerLimits:
        """These limits where they are set, `other`'s where they are not."""
        return OwnerLimits(**{**other.model_dump(), **self.model_dump(exclude_none=True)})

    def any(self) -> bool:
        return any(value is not None for value in self.model_dump().values())


class FileLimits(OwnerLimits):
    """Limits as a person writes them in the file: a name it does not know is refused, not
    ignored (a typo would leave an owner without the limit meant)."""

    model_config = ConfigDict(extra="forbid")


class OwnerLimitsFile(BaseModel):
    """`AGENT_OWNER_LIMITS`: every owner's limits (`default`), and some owners' own, which
    stand over the default where they say."""

    model_config = ConfigDict(extra="forbid")
    default: FileLimits = Field(default_factory=FileLimits)
    owners: dict[str, FileLimits] = Field(default_factory=dict, max_length=MAX_OWNERS)

    def of(self, owner: str) -> OwnerLimits:
        own = self.owners.get(owner, FileLimits())
        return own.over(self.default)


class ShareRequest(BaseModel):
    """A conversation's ask, to the `lease_owner_share` activity: for a turn (`key`, its
    `seq`-th ask), a slot among the owner's running turns (`slot`: a turn's first ask; a
    subagent's turns run in their parent's), and enough for its next model call of `call`
    tokens (`output_share` of them its reply's) beyond what its lease has left (None: no
    limit). The worker prices the call with its model entry's prices."""

    owner: str = Field(max_length=400)
    key: str = Field(max_length=400)  # `conversation id#turn`
    conversation_id: str = Field(max_length=400)
    seq: int = Field(ge=1)
    slot: bool = False
    call: int = Field(ge=0)
    output_share: float = Field(default=0.0, ge=0, le=1)
    tokens_left: int | None = 0
    usd_left: float | None = 0.0
    model: str | None = None


class LeaseAsk(BaseModel):
    """What the ledger is asked (the `lease` Update): a `ShareRequest` in tokens and dollars,
    with the limits the worker's AGENT_OWNER_LIMITS gives the owner."""

    key: str = Field(max_length=400)
    conversation_id: str = Field(max_length=400)
    seq: int
    slot: bool = False
    tokens: int = 0
    need_tokens: int = 0
    usd: float = 0.0
    need_usd: float = 0.0
    call_usd: float = 0.0
    configured: OwnerLimits = Field(default_factory=OwnerLimits)


class Lease(BaseModel):
    """The ledger's answer to an ask, and its grant to a turn that waited (by signal): what it
    may spend (None: no limit of that kind, so there is no need to ask again); or why it waits."""

    key: str
    seq: int
    granted: bool
    tokens: int | None = None
    usd: float | None = None
    waits_for: LimitName | None = None
    why: str | None = None
    call_usd: float = 0.0  # what the call asked for costs, as the worker priced it


class GiveBack(BaseModel):
    """A turn's end (the `give_back` signal): what its leases paid for, the rest returned."""

    key: str
    used_tokens: int = 0
    used_usd: float = 0.0


class SetLimits(BaseModel):
    """An admin's limits for one owner (the `set_limits` Update): they stand over the worker's
    AGENT_OWNER_LIMITS where they say; `reset` drops the ones set before."""

    limits: OwnerLimits = Field(default_factory=OwnerLimits)
    reset: bool = False
    by: str | None = None


class Held(BaseModel):
    """A lease the ledger gave: a turn's slot, and what it may spend so far."""

    key: str
    conversation_id: str
    slot: bool = False
    tokens: int = 0
    usd: float = 0.0
    seq: int = 0
    last: Lease | None = None  # the answer to its latest ask (an ask sent again gets it again)
    since: datetime


class Waiting(BaseModel):
    """An ask the ledger could not grant yet, in the order asks came."""

    ask: LeaseAsk
    since: datetime
    waits_for: LimitName
    why: str


class LedgerState(BaseModel):
    """An owner's ledger: its limits, today's spending, the leases held and the asks waiting.
    Carried across continue-as-new whole."""

    owner: str
    configured: OwnerLimits = Field(default_factory=OwnerLimits)  # the worker's, latest seen
    override: OwnerLimits = Field(default_factory=OwnerLimits)  # an admin's
    day: str = ""  # the UTC day today's counts are of (ISO)
    used_tokens: int = 0
    used_usd: float = 0.0
    held: dict[str, Held] = {}
    waiting: list[Waiting] = []
    reclaimed: int = 0  # leases taken back from conversations that had closed
    # how long something waits before the ledger looks for holders that closed without giving
    # their leases back (terminated, say)
    look_after_s: float = Field(default=60.0, gt=0)
    handover_events: int = Field(default=5_000, ge=20)  # a fresh run past this many events

    @property
    def limits(self) -> OwnerLimits:
        return self.override.over(self.configured)


class HeldTurn(BaseModel):
    """A turn waiting for its owner's share (status `held`): the limit it met, why, since when."""

    conversation_id: str | None = None
    limit: LimitName
    message: str
    since: datetime


class LedgerView(BaseModel):
    """What `agent limits OWNER` shows: the limits in force, today's spending and what the
    running turns hold, and who waits for what."""

    owner: str
    limits: OwnerLimits
    configured: OwnerLimits
    override: OwnerLimits
    day: str
    used_tokens: int
    used_usd: float
    held_tokens: int
    held_usd: float
    running: list[str]  # the conversations with a running turn
    waiting: list[HeldTurn]


class TurnShare(BaseModel):
    """What a turn holds of its owner's share (`TurnState.share`): its lease so far (None: no
    limit of that kind), what its own model calls used of it, its latest ask, and why it waits,
    while it waits for the ledger."""

    key: str
    seq: int = 0
    slot: bool = False
    tokens: int | None = 0
    usd: float | None = 0.0
    used_tokens: int = 0
    used_usd: float = 0.0
    call_usd: float = 0.0  # a call's dollars, as its worker priced the last ask
    granted: int = 0  # the latest ask granted (its grant may come before the ask's answer)
    waiting: HeldTurn | None = None

    def left(self) -> tuple[int | None, float | None]:
        """What is left of the lease: tokens and dollars (None: no limit)."""
        return (None if self.tokens is None else self.tokens - self.used_tokens,
                None if self.usd is None else self.usd - self.used_usd)

    def take(self, lease: Lease) -> None:
        """A grant of the latest ask, answered at once or signalled by the ledger (once)."""
        if not lease.granted or lease.seq != self.seq or self.granted >= lease.seq:
            return
        self.granted = lease.seq
        self.tokens = None if lease.tokens is None or self.tokens is None \
            else self.tokens + lease.tokens
        self.usd = None if lease.usd is None or self.usd is None else self.usd + lease.usd
        self.call_usd = lease.call_usd
        self.waiting = None
