"""An owner's limits (`AGENT_OWNER_LIMITS`), held by the owner's ledger: anyone sees their own
(and an admin anyone's), with today's spending and who waits; an admin sets them, and the
turns that waited go on at once. Another owner's ledger is as absent (404) to a user as one
that never was."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path
from pydantic import BaseModel, ConfigDict, Field

from ...client.checks import NotFound
from ...client.limits import ledger_of, no_ledger, set_owner_limits
from ...contract.owner import LedgerView, OwnerLimits, SetLimits
from ..access import Forbidden
from ..bodies import StrictJsonRoute
from ..deps import Conversations, Who
from ..errors import errors

router = APIRouter(tags=["limits"], route_class=StrictJsonRoute)
Owner = Annotated[str, Path(max_length=200, description="the owner, as conversations record it")]


class LimitsBody(BaseModel):
    """An admin's limits for the owner: those given stand over the worker's
    AGENT_OWNER_LIMITS; `reset` drops the ones an admin set before."""

    model_config = ConfigDict(extra="forbid")
    running_turns: int | None = Field(default=None, ge=1, le=10_000,
                                      description="turns running at once")
    daily_tokens: int | None = Field(default=None, ge=1, description="tokens a day")
    daily_usd: float | None = Field(default=None, gt=0, description="dollars a day")
    reset: bool = False


@router.get("/owners/{owner}/limits", response_model=LedgerView,
            responses=errors(404, 502, 503))
async def limits(owner: Owner, s: Conversations, who: Who) -> Any:
    """The owner's limits in force, today's spending, what running turns hold, and the turns
    that wait and why: a user's own, an admin's anyone's."""
    view = await ledger_of(s.client, owner) if owner == who.name or who.is_admin else None
    if view is None:  # (another's is as absent as none: the same words)
        raise NotFound(no_ledger(owner))
    return view


@router.put("/owners/{owner}/limits", response_model=LedgerView,
            responses=errors(403, 404, 413, 502, 503))
async def set_limits(owner: Owner, body: LimitsBody, s: Conversations, who: Who) -> Any:
    """Set the owner's limits (an admin's): the turns they let go on, go on now."""
    if not who.is_admin:
        raise Forbidden(f"{who.describe()} may not set limits (an admin's)")
    change = SetLimits(limits=OwnerLimits(**body.model_dump(exclude={"reset"})),
                       reset=body.reset, by=who.name)
    return await set_owner_limits(s.client, owner, change)
