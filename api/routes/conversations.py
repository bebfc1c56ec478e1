"""A conversation as a resource: start one, list them, read one's status, audit trail and the
schemas of its pending calls."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse

from ...client.cases import export as export_case
from ...client.cases import fork as fork_case
from ...client.checks import Refused, UsageError, budget_of, new_conversation_id
from ...client.listing import ConversationRow
from ...contract import AuditRecord, ConversationInput, ConversationStatus, Status
from ...contract.case import Case
from ..access import Verdict
from ..bodies import ForkBody, StartBody, StrictJsonRoute
from ..deps import Cid, Conversations, Who, allowed, caller_trace
from ..errors import errors

router = APIRouter(tags=["conversations"], route_class=StrictJsonRoute)

# The routes of a conversation, linked from its start for clients (and schemathesis) to follow.
OF_A_CONVERSATION = ("conversation", "history", "schemas", "events", "say", "confirm", "reject",
                     "answer", "decline", "end", "stop", "export", "fork", "grants", "revoke",
                     "result")
LINKS = {name: {"operationId": name, "parameters": {"cid": "$response.body#/workflow_id"}}
         for name in OF_A_CONVERSATION}
read = errors(404, 502, 503)


@router.post("/conversations", status_code=201, response_model=ConversationStatus,
             responses={201: {"links": LINKS},
                        200: {"model": ConversationStatus, "links": LINKS,
                              "description": "it already existed"},
                        **errors(409, 413, 502, 503)})
async def start(body: StartBody, s: Conversations, who: Who, request: Request) -> Any:
    """Start a conversation (201), owned by the token's name. With an `id` already in use,
    nothing new starts: the answer is that conversation's status (200), or, if it is not
    the caller's to read, a 409. A first message too long for the model's window is refused
    as a message would be (409, the reason), and the conversation it began ends. A W3C
    `traceparent` header makes the first turn's trace a continuation of the caller's."""
    who.check_start()
    cid = body.id or new_conversation_id()
    inp = ConversationInput(prompt=body.prompt, system_prompt=body.system_prompt,
                            model=body.model, max_steps=body.max_steps,
                            max_parallel_tools=body.max_parallel_tools,
                            max_parallel_subagents=body.max_parallel_subagents,
                            max_calls_per_step=body.max_calls_per_step,
                            one_shot=body.one_shot, max_message_bytes=s.max_message_bytes,
                            max_cost_usd=body.max_cost_usd, output_schema=body.output_schema,
                            owner=who.name, trace_parent=caller_trace(request),
                            **budget_of(body.context_budget_tokens))
    started = await s.start(inp, cid, source="the HTTP API", existing_ok=True)
    if not started and who.may("read", await s.owner(cid)) is not Verdict.ALLOWED:
        raise Refused(f"the id {cid} is in use")
    current = await s.status(cid)
    return current if started else JSONResponse(current.model_dump(mode="json"), 200)


@router.get("/conversations", response_model=list[ConversationRow],
            responses=errors(502))
async def conversations(s: Conversations, who: Who,
                        status: Status | None = None,
                        limit: Annotated[int, Query(ge=1, le=1000)] = 100,
                        version: Annotated[str | None, Query(
                            max_length=600, description="only those running on this Worker "
                            "Deployment Version, `NAME:ID`")] = None) -> Any:
    """Conversations, newest first, optionally those in one status or on one version; for a
    `user`, those they started."""
    return await s.conversations(status, limit, owner=None if who.sees_all else who.name,
                                 version=version)


@router.get("/conversations/{cid}", response_model=ConversationStatus,
            responses=read)
async def conversation(cid: Cid, s: Conversations, _: Annotated[None, allowed("read")]
                      ) -> Any:
    """The status, with the keys of `agent status --json`."""
    return await s.status(cid)


@router.get("/conversations/{cid}/history", response_model=list[AuditRecord], responses=read)
async def history(cid: Cid, s: Conversations, _: Annotated[None, allowed("read")]
                 ) -> Any:
    """The audit trail: a record per step, with who decided what."""
    return await s.history(cid)


@router.get("/conversations/{cid}/schemas", response_model=dict[str, dict[str, Any]],
            responses=read)
async def schemas(cid: Cid, s: Conversations, _: Annotated[None, allowed("read")]
                 ) -> Any:
    """The JSON Schema of each pending call's arguments, by call id: edited args are checked
    against it (and again by the conversation)."""
    return await s.pending_schemas(cid)


@router.get("/conversations/{cid}/export", response_model=Case, response_model_by_alias=True,
            responses=errors(404, 409, 502, 503))
async def export(cid: Cid, s: Conversations, _: Annotated[None, allowed("read")]) -> Any:
    """The conversation as a case (`docs/evals.md`): its messages, tool calls and results,
    decisions and answers, final answer and usage, as `agent export` writes it."""
    return await export_case(s, cid)


@router.post("/conversations/{cid}/fork", status_code=201, response_model=ConversationStatus,
             responses=errors(404, 409, 413, 502, 503))
async def fork(cid: Cid, body: ForkBody, s: Conversations, who: Who,
               _: Annotated[None, allowed("read")]) -> Any:
    """Start a new conversation, owned by the caller, from this one's messages before a step
    (its `at_step`); nothing before it runs again. 409 past the last step."""
    who.check_start()
    new_id = body.id or new_conversation_id()
    try:
        await fork_case(s, cid, body.at_step, new_id, who.name, model=body.model,
                        system_prompt=body.system_prompt, turn=body.turn)
    except UsageError as err:  # a valid body, for a step this conversation does not have
        raise Refused(str(err)) from None
    return await s.status(new_id)
