"""A conversation's events as they happen: its durable stream as SSE (with its subagents'), and
AG-UI runs."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Annotated

from ag_ui.core import RunAgentInput
from ag_ui.encoder import EventEncoder
from fastapi import APIRouter, Depends, Request
from fastapi.responses import StreamingResponse
from fastapi.sse import EventSourceResponse, ServerSentEvent

from ...client.checks import NotFound, UsageError, unsendable
from ...client.tree import follow_tree
from ..agui import run_agui
from ..bodies import StrictJsonRoute
from ..deps import Cid, Conversations, Who, caller_trace, enforce, stream_start
from ..errors import errors
from .conversations import read

router = APIRouter(tags=["streams"], route_class=StrictJsonRoute)


@router.get("/conversations/{cid}/events", response_class=EventSourceResponse,
            responses=read)
async def events(cid: Cid, s: Conversations, offset: Annotated[int, Depends(stream_start)]
                 ) -> AsyncIterator[ServerSentEvent]:
    """The conversation's durable events as SSE: `id` is the stream offset, `event` the
    kind, `data` the event's JSON. Starts at `from_offset`, else after `Last-Event-ID`,
    else at 0; an offset past the end starts at the end. Follows continue-as-new; while
    nothing happens, a `: ping` comment every 15 s; ends with an `end` event when the
    conversation completes (at once, if it has and nothing is left to send).

    A subagent's events come inline, from its first, after the `child_started` that
    announces it (at any depth): they have no `id` (they never move the resume point), and
    their `data` adds `agent` (its profile path from here: `researcher`, or
    `researcher/writer` for a grandchild) and `conversation_id` (its own id). A stream
    resumed after a subagent's `child_started` does not send that subagent's events, even
    those still to come; one that starts at or before it sends them all again. The `end`
    comes once the subagents' streams have ended too (they end with the conversation)."""
    # The stream is open at once, whatever the first read costs (a finished conversation's
    # is a replay on a worker): a client never waits on a response that has not begun.
    yield ServerSentEvent(comment="open")
    async with aclosing(follow_tree(s.client, cid, offset)) as tree:
        async for agent, owner, event, at in tree:
            data = event.model_dump(mode="json", exclude_none=True)
            if agent is None:
                yield ServerSentEvent(id=str(at), event=event.kind, data=data)
            else:
                yield ServerSentEvent(event=event.kind, data={
                    **data, "agent": agent, "conversation_id": owner})
    yield ServerSentEvent(event="end", data={"workflow_id": cid})


@router.post("/agui", response_class=StreamingResponse,
             responses={200: {"content": {"text/event-stream": {}},
                              "description": "AG-UI events"}, **errors(413)})
async def agui(body: RunAgentInput, s: Conversations, who: Who,
               request: Request) -> StreamingResponse:
    """An AG-UI run (`threadId` is the conversation id): starts or continues the
    conversation, streams the turn, and ends in an answer or an interrupt. `resume` entries
    answer the interrupts of the previous run. A thread is the conversation: another
    user's answers 404; a run that resumes decides, any other sends a message."""
    # every event names the thread and the run: ids that no event can carry are a 422 now,
    # not a stream that breaks after its 200
    if (reason := unsendable([body.thread_id, body.run_id])) is not None:
        raise UsageError(f"threadId and runId: {reason}")
    try:
        owner = await s.owner(body.thread_id)
    except NotFound:  # a new thread (or a bad id, which the run refuses)
        if not body.resume:
            who.check_start()
    else:
        enforce(who, "decide" if body.resume else "message", body.thread_id, owner)
    encoder = EventEncoder()

    async def encoded() -> AsyncIterator[str]:
        async for event in run_agui(s, body, who, caller_trace(request)):
            yield encoder.encode(event)

    return StreamingResponse(encoded(), media_type=encoder.get_content_type())

