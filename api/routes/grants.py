"""The approvals a conversation remembers (grants, made by a confirm with `remember`): list
those in force, and take one back. Listing is reading the conversation; revoking is deciding
its calls, so it needs the role that decides them."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path

from ...contract import SignalOutcome
from ...contract.policy import Grant
from ..bodies import StrictJsonRoute
from ..deps import Cid, Conversations, Who, allowed
from ..errors import errors

router = APIRouter(tags=["grants"], route_class=StrictJsonRoute)
GrantId = Annotated[str, Path(max_length=100, description="the grant's id (g1, g2, ...), as "
                                                          "GET .../grants lists it")]


@router.get("/conversations/{cid}/grants", response_model=list[Grant],
            responses=errors(404, 502, 503))
async def grants(cid: Cid, s: Conversations, _: Annotated[None, allowed("read")]) -> Any:
    """The approvals remembered in this conversation and still in force: each lets calls of
    its tool (with its arguments, for `args`) run without asking, until it expires
    (`expires_at`), its uses run out (`uses_left`) or it is revoked."""
    return await s.grants(cid)


@router.delete("/conversations/{cid}/grants/{grant_id}", response_model=SignalOutcome,
               responses=errors(404, 409, 502, 503))
async def revoke(cid: Cid, grant_id: GrantId, s: Conversations, who: Who,
                 _: Annotated[None, allowed("decide")]) -> Any:
    """Take a grant back: its tool's calls ask a person again. The audit trail names the
    token's name as who revoked it. A grant not in force (unknown, expired, used up or
    revoked already) is refused (409) with the reason."""
    return await s.revoke(cid, grant_id, who.name)
