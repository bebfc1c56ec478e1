"""A conversation's live stream with its subagents' streams merged in: what `watch` renders and
what the API's event stream sends, so both show a subagent's events the same way."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import NamedTuple

from temporalio.client import Client
from temporalio.service import RPCError

from ..contract import StreamEvent
from .checks import NotFound
from .session import follow

# A subagent's start is announced in the same workflow task that starts it, so its workflow may
# not exist yet for a moment.
CHILD_APPEARS_TRIES = 50
CHILD_APPEARS_DELAY_S = 0.2
# How long the subagents' streams may go on once the followed conversation's has ended: long
# enough to read a finished one's events, short enough that a stream that is no child of it (a
# squatted child id) cannot hold the tree open.
CHILDREN_GRACE_S = 10.0


class TreeEvent(NamedTuple):
    """An event of the followed conversation or of one of its subagents."""

    agent: str | None  # the subagent's profile path ("researcher/writer"); None: the followed one
    conversation_id: str  # the conversation whose event it is
    event: StreamEvent
    offset: int | None  # its offset in the followed conversation's stream; None for a subagent's


class StreamEnded(NamedTuple):
    """A followed stream ended: its conversation completed (or it could not be read)."""

    agent: str | None  # whose: None for the followed conversation's own


async def follow_tree(client: Client, workflow_id: str, from_offset: int = 0,
                      on_interrupted: Callable[[RPCError, int], None] | None = None
                      ) -> AsyncIterator[TreeEvent]:
    """A conversation's events from an offset, live, with each subagent's events (at any depth)
    merged in as they come. A subagent is followed from its first event when its `child_started`
    is yielded, so one announced before `from_offset` is not followed at all.

    Ends once the conversation has completed and so have the subagents it announced (they have
    by then: it waits for them, or its close cancels them), at most CHILDREN_GRACE_S after it.
    Raises what the conversation's own stream raises; a subagent's stream that fails just ends.
    Close it (`contextlib.aclosing`) to stop following at once: each stream holds a poll."""
    items: asyncio.Queue[TreeEvent | StreamEnded | Exception] = asyncio.Queue()
    followers: list[asyncio.Task[None]] = []

    async def pump(wid: str, start: int, agent: str | None) -> None:
        tries = CHILD_APPEARS_TRIES if agent else 1
        for attempt in range(1, tries + 1):
            try:
                async for item in follow(client, wid, start, on_interrupted):
                    await items.put(TreeEvent(agent, wid, item.data,
                                              None if agent else item.offset))
                    start = item.offset + 1  # a retry goes on from there
                break
            except Exception as err:  # noqa: BLE001 - the followed one's is raised
                if isinstance(err, NotFound) and attempt < tries:
                    await asyncio.sleep(CHILD_APPEARS_DELAY_S)
                    continue
                if agent is None:
                    await items.put(err)
                    return
                break
        await items.put(StreamEnded(agent))

    loop = asyncio.get_running_loop()
    followers.append(asyncio.create_task(pump(workflow_id, from_offset, None)))
    children, deadline = 0, None  # the subagents' streams still open; when to stop waiting
    try:
        while deadline is None or children:
            try:
                item = await asyncio.wait_for(
                    items.get(), None if deadline is None else deadline - loop.time())
            except TimeoutError:
                return
            if isinstance(item, Exception):
                raise item
            if isinstance(item, StreamEnded):
                if item.agent is None:
                    deadline = loop.time() + CHILDREN_GRACE_S
                else:
                    children -= 1
                continue
            e = item.event
            if e.kind == "child_started" and e.text:  # `text`: its id; `tool`: its profile
                name = e.tool or "subagent"
                path = f"{item.agent}/{name}" if item.agent else name
                followers.append(asyncio.create_task(pump(e.text, 0, path)))
                children += 1
            yield item
    finally:
        for task in followers:
            task.cancel()
