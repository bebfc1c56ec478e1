"""What the agent remembers of people (DESIGN "Memory across conversations"): a user sees and
removes their own memories, an admin anyone's. Another owner's memory is as absent (404) as one
that never was. The API reads the workers' store (`AGENT_MEMORY_URL`, or SQLite in
`AGENT_DATA_DIR`)."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

import structlog
from fastapi import APIRouter, Path, Query, Request

from ...activities.memory import MemoryUnavailable, open_store
from ...client.checks import NotFound, Unavailable
from ...contract.memory import MAX_RECALL_QUERY_BYTES, Memory
from ..access import Forbidden
from ..bodies import StrictJsonRoute
from ..deps import RequestId, Who
from ..errors import errors

router = APIRouter(tags=["memories"], route_class=StrictJsonRoute)
log = structlog.get_logger("api")
MemoryId = Annotated[str, Path(max_length=64, description="the memory's id (mem-...)")]


async def in_store(request: Request, method: str, *args: Any) -> Any:
    """A call of the store (in a thread): 404 when memory is off, 503 when it is unreachable."""
    url = request.app.state.settings.memory_url
    if url is None:
        raise NotFound("memory is off on this deployment (AGENT_MEMORY=off)")
    try:
        return await asyncio.to_thread(getattr(open_store(url), method), *args)
    except MemoryUnavailable as err:
        log.error("memory store unavailable", error=str(err))
        raise Unavailable("the memory store cannot be reached") from None


@router.get("/memories", response_model=list[Memory], responses=errors(404, 503))
async def memories(
    request: Request, who: Who,
    query: Annotated[str | None, Query(max_length=MAX_RECALL_QUERY_BYTES,
                                       description="words to look for: best match first")] = None,
    owner: Annotated[str | None, Query(max_length=64,
                                       description="an admin's: this owner's alone")] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> Any:
    """Memories, newest first (or the best match for `query` first): a user's own; an
    admin's, every owner's, or `owner`'s."""
    if owner is not None and owner != who.name and not who.is_admin:
        raise Forbidden(f"{who.describe()} sees their own memories only")
    whose = owner if owner is not None else (None if who.is_admin else who.name)
    return await in_store(request, "list", whose, query, limit)


@router.delete("/memories/{memory_id}", response_model=Memory, responses=errors(404, 503))
async def forget(request: Request, memory_id: MemoryId, who: Who, rid: RequestId) -> Any:
    """Forget a memory (the answer is what was forgotten): a user their own, an admin anyone's.
    The store's log keeps who forgot it and when; a later recall never finds it."""
    if not who.may_write:
        raise Forbidden(f"{who.describe()} may not forget memories")
    gone = await in_store(request, "forget", memory_id, None if who.is_admin else who.name,
                          f"api:{rid}", who.name)
    if gone is None:
        raise NotFound(f"no such memory: {memory_id}")
    log.info("memory forgotten", memory_id=gone.id, owner=gone.owner, by=who.name)
    return gone
