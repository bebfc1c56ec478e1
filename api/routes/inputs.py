"""A person's input to a conversation: the next message, decisions on its pending calls, an
answer to its question, a stop of its turn, and its end. Each goes through the conversation's
Update twins, so a refusal is a 409 with the conversation's reason; the approver is the token's
name."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Request

from ...client.checks import Refused
from ...contract import (
    AnswerRequest,
    ConfirmRequest,
    RejectRequest,
    SayRequest,
    SignalOutcome,
)
from ..bodies import (
    AnswerBody,
    ConfirmBody,
    DeclineBody,
    EndBody,
    MessageBody,
    RejectBody,
    StopBody,
    StrictJsonRoute,
)
from ..deps import Cid, Conversations, RequestId, Who, allowed, caller_trace
from ..errors import errors

router = APIRouter(tags=["input"], route_class=StrictJsonRoute)
given = errors(404, 409, 413, 502, 503)


@router.post("/conversations/{cid}/messages", response_model=SignalOutcome,
             responses=given)
async def say(cid: Cid, body: MessageBody, s: Conversations, who: Who,
              _: Annotated[None, allowed("message")], rid: RequestId) -> Any:
    """The next user message; the outcome names the turn that will answer it."""
    return await s.update(cid, SayRequest(text=body.text, request_id=rid, sender=who.name,
                                          steer=body.steer))


@router.post("/conversations/{cid}/confirm", response_model=SignalOutcome,
             responses=given)
async def confirm(cid: Cid, body: ConfirmBody, s: Conversations, who: Who,
                  _: Annotated[None, allowed("decide")], rid: RequestId,
                  request: Request) -> Any:
    """Approve pending call(s), optionally one with edited args. The approver recorded is
    the token's name, with the token's roles. Under four eyes (AGENT_FOUR_EYES), a call of
    those risks is refused (409) to the conversation's owner. With `remember`, the approval
    is remembered as a grant (GET .../grants lists them), or the whole decision is refused
    (409) with why it may not be."""
    return await s.decide(cid, ConfirmRequest(request_id=rid, call_ids=body.call_ids,
                                              all=body.all, args=body.args,
                                              approver=who.name, roles=sorted(who.roles),
                                              seen=body.seen, remember=body.remember,
                                              for_s=body.for_s, uses=body.uses,
                                              trace_parent=caller_trace(request)),
                          by_update=True)


@router.post("/conversations/{cid}/reject", response_model=SignalOutcome,
             responses=given)
async def reject(cid: Cid, body: RejectBody, s: Conversations, who: Who,
                 _: Annotated[None, allowed("decide")], rid: RequestId,
                 request: Request) -> Any:
    """Reject pending call(s); the model reads `rejected by user: <reason>`."""
    return await s.decide(cid, RejectRequest(request_id=rid, call_ids=body.call_ids,
                                             all=body.all, reason=body.reason,
                                             approver=who.name, seen=body.seen,
                                             trace_parent=caller_trace(request)),
                          by_update=True)


@router.post("/conversations/{cid}/answer", response_model=SignalOutcome,
             responses=given)
async def answer(cid: Cid, body: AnswerBody, s: Conversations, who: Who,
                 _: Annotated[None, allowed("decide")], rid: RequestId) -> Any:
    """Answer the pending question: the one `call_id` names (its ref, as the status shows
    it), refused (409) if another question is open by then."""
    return await s.decide(cid, AnswerRequest(request_id=rid, values=body.values,
                                             call_id=body.call_id, sender=who.name),
                          by_update=True)


@router.post("/conversations/{cid}/decline", response_model=SignalOutcome,
             responses=given)
async def decline(cid: Cid, body: DeclineBody, s: Conversations, who: Who,
                  _: Annotated[None, allowed("decide")], rid: RequestId) -> Any:
    """Say no to the pending question instead of answering it: the model reads that it was
    declined; an MCP server's question tells the server decline (or, with `cancel`,
    cancel). Refused (409) if another question is open by then."""
    return await s.decide(cid, AnswerRequest(request_id=rid, values=[], call_id=body.call_id,
                                             declined=True, cancelled=body.cancel,
                                             sender=who.name),
                          by_update=True)


@router.post("/conversations/{cid}/end", response_model=SignalOutcome,
             responses=given)
async def end(cid: Cid, s: Conversations, who: Who, _: Annotated[None, allowed("end")],
              rid: RequestId, body: EndBody | None = None) -> Any:
    """End the conversation: work in flight is cancelled, stop_reason=ended."""
    outcome = await s.end(cid, rid, sender=who.name)
    if outcome is None:
        raise Refused(f"conversation {cid} finished before it took the end")
    return outcome


@router.post("/conversations/{cid}/stop", response_model=SignalOutcome, responses=given)
async def stop(cid: Cid, s: Conversations, who: Who, _: Annotated[None, allowed("message")],
               rid: RequestId, body: StopBody | None = None) -> Any:
    """Stop the turn in flight: its model call and tools are cancelled and what waits for a
    person closes (stop_reason=stopped); the conversation goes on and takes the next message.
    The outcome's `reason` says what it did (a stop with no turn running does nothing)."""
    outcome = await s.stop(cid, rid, sender=who.name)
    if outcome is None:
        raise Refused(f"conversation {cid} finished before it took the stop")
    return outcome
