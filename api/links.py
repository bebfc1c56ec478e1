"""One-time approval links (DESIGN "Reaching the human"): `GET /links/{token}` shows what the
link would decide and changes nothing (mail scanners and chat unfurlers fetch links); a `POST`
decides, once. A link is signed with `AGENT_LINK_SECRET` (shared by the worker, which writes
them into deliveries, and the API) and expires; it names the exact call it was made for
(`rules.links`): the conversation that owns the call, the call's id there, its
ticket and the sha256 of its arguments. It decides only that call, with those arguments, and
only through the conversation that owns it: never a look-alike call of a subagent or a later
call that reuses the id.

The conversation is the once-only record: the decision goes to it with the arguments and the
ticket the link names, and a decided call is stale, so a second POST is refused by the
conversation itself, whichever API process it reaches. The approver is the link's addressee
(the webhook's `addressee`), or `link`; with tokens, an addressee must be someone whose role
may decide that conversation. Under four eyes, a link decides only as an addressee other than
the owner (the conversation refuses a decision that names no person, too). The pages are plain
HTML forms: no JavaScript, and readable on a phone.

A `decline` link says no to an MCP server's question (kind `elicitation`) the same way: it names
the call that asks and the request's digest, and answers only that question, declined (the
server is told decline); its answer, a form of the server's schema, is the console's."""

from __future__ import annotations

import html
import json
import time
from typing import Any

from fastapi import APIRouter
from fastapi.responses import HTMLResponse

from ..client.checks import NotFound, NoWorker, Refused
from ..client.session import Session
from ..contract import (
    AnswerRequest,
    ConfirmRequest,
    ConversationStatus,
    PendingConfirmation,
    PendingQuestion,
    RejectRequest,
)
from ..rules.links import LinkClaims, LinkError, read_link
from .access import TokenBook, Verdict

LINK_APPROVER = "link"  # the approver of a link that names nobody


def link_routes(secret: str | None, tokens: TokenBook, session: Any) -> APIRouter:
    router = APIRouter(include_in_schema=False)

    async def opened(token: str) -> tuple[LinkClaims, Session,
                                          PendingConfirmation | PendingQuestion]:
        """The link's claims and the call (or question) it names, still waiting and decidable
        by it."""
        if secret is None:
            raise LinkError("one-time links are off (AGENT_LINK_SECRET is not set)", 404)
        claims, s = read_link(secret, token, time.time()), session()
        status = await status_of(s, claims)
        waiting = question_of(status, claims) if claims.a == "decline" else call_of(status, claims)
        refusal = decider_refusal(claims, waiting, status, tokens)
        if refusal is not None:
            raise LinkError(refusal, 403)
        return claims, s, waiting

    @router.get("/links/{token}", response_class=HTMLResponse)
    async def show(token: str) -> HTMLResponse:
        """What the link would decide; nothing changes."""
        try:
            claims, _, call = await opened(token)
        except LinkError as err:
            return page("Link", f"<p>{esc(err)}</p>", err.status)
        if isinstance(call, PendingQuestion):
            return page(f"Decline {call.server}'s question?", f"""
<p>Conversation <code>{esc(claims.c)}</code> waits for an answer to a question of the MCP server
<strong>{esc(call.server)}</strong>, for its tool <strong>{esc(call.tool)}</strong>:</p>
<pre>{esc(call.message)}</pre>
<p>To answer it, open <a href="/#/c/{esc(claims.c)}">the conversation</a>. To say no, decline:
the server is told so. You decline as <strong>{esc(claims.to or LINK_APPROVER)}</strong>. The
link works once.</p>
<form method="post"><button type="submit" class="reject">Decline</button></form>""")
        verb = "Approve" if claims.a == "approve" else "Reject"
        return page(f"{verb} {call.tool}?", f"""
<p>Conversation <code>{esc(claims.c)}</code> waits for a decision on
<strong>{esc(call.tool)}</strong> (<span class="risk">{esc(call.risk)}</span>), call
<code>{esc(call.call_id)}</code>, with these arguments:</p>
<pre>{esc(json.dumps(call.args, indent=2, ensure_ascii=False))}</pre>
<p>You decide as <strong>{esc(claims.to or LINK_APPROVER)}</strong>. The link works once.</p>
<form method="post"><button type="submit" class="{claims.a}">{verb}</button></form>""")

    @router.post("/links/{token}", response_class=HTMLResponse)
    async def decide(token: str) -> HTMLResponse:
        """Decide, once: exactly the call, the ticket and the arguments the link names, in the
        conversation that owns the call."""
        try:
            claims, s, call = await opened(token)
            await s.update(claims.c, decision(claims))
        except LinkError as err:
            return page("Link", f"<p>{esc(err)}</p>", err.status)
        except (Refused, NotFound) as err:
            return page("Not decided", f"<p>The conversation refused: {esc(err)}</p>", 409)
        except NoWorker:
            return page("Link", "<p>No worker answered; try again in a moment.</p>", 503)
        if isinstance(call, PendingQuestion):
            return page("Question declined", f"<p>The question of <strong>{esc(call.server)}"
                                             f"</strong> is declined, as "
                                             f"{esc(claims.to or LINK_APPROVER)}.</p>")
        done = "approved" if claims.a == "approve" else "rejected"
        return page(f"{call.tool} {done}", f"<p><strong>{esc(call.tool)}</strong> call "
                                           f"<code>{esc(call.call_id)}</code> is {done}, as "
                                           f"{esc(claims.to or LINK_APPROVER)}.</p>")

    return router


def decision(claims: LinkClaims) -> ConfirmRequest | RejectRequest | AnswerRequest:
    """The decision a link stands for: its call only, bound to its arguments and its ticket (or
    its question, declined), and one request id per link, which the owning conversation takes
    once."""
    if claims.a == "decline":
        return AnswerRequest(request_id=f"link-{claims.n}-decline", values=[], call_id=claims.k,
                             declined=True, sender=claims.to or LINK_APPROVER)
    common: dict[str, Any] = {
        "request_id": f"link-{claims.n}-{claims.a}", "approver": claims.to or LINK_APPROVER,
        "call_ids": [claims.k], "seen": {claims.k: claims.h},
        "tickets": {claims.k: claims.t} if claims.t else {}}
    if claims.a == "approve":
        return ConfirmRequest(**common)
    return RejectRequest(**common, reason="rejected by its one-time link")


async def status_of(s: Session, claims: LinkClaims) -> ConversationStatus:
    try:
        return await s.status(claims.c)
    except NotFound:
        raise LinkError("this conversation no longer exists", 404) from None
    except NoWorker:
        raise LinkError("no worker answered; try again in a moment", 503) from None


def question_of(status: ConversationStatus, claims: LinkClaims) -> PendingQuestion:
    """The MCP server's question the link names, still asked by the conversation that owns
    it, for the request it names; else why not."""
    asked = status.pending_question
    if asked is None or asked.conversation_id is not None or asked.call_id != claims.k \
            or asked.kind != "elicitation" or asked.request != claims.h:
        raise LinkError("this question is no longer waiting for an answer: the link was used, "
                        "or someone answered it", 409)
    return asked


def call_of(status: ConversationStatus, claims: LinkClaims) -> PendingConfirmation:
    """The call the link names, still waiting in the conversation that owns it with the
    arguments it names; else why not. Only that conversation's own calls count: a subagent's
    call with the same id, shown in its parent's status, is another call."""
    call = next((p for p in status.pending_confirmations
                 if p.conversation_id is None and p.call_id == claims.k
                 and (claims.t is None or p.ticket == claims.t)), None)
    if call is None:
        raise LinkError("this call is no longer waiting for a decision: the link was used, or "
                        "someone decided it", 409)
    if call.args_hash != claims.h:
        raise LinkError("the call's arguments are not the ones this link was made for", 409)
    return call


def decider_refusal(claims: LinkClaims, call: PendingConfirmation | PendingQuestion,
                    status: ConversationStatus, tokens: TokenBook) -> str | None:
    """Why this link may not decide this call, or None: with tokens, its addressee's role must
    let them decide the conversation; under four eyes, it must name someone other than the
    owner (a link that names nobody could be anyone's, the owner's included)."""
    if tokens and claims.to:
        addressee = tokens.named(claims.to)
        if addressee is None or addressee.may("decide", status.owner) is not Verdict.ALLOWED:
            return f"{claims.to} may not decide this conversation"
    if isinstance(call, PendingConfirmation) and call.four_eyes and \
            claims.to in (None, status.owner):
        named = f"names {claims.to}, who started it" if claims.to else "names no one"
        return (f"four eyes: {call.tool} ({call.risk}) must be decided by someone other than "
                f"{status.owner}, and this link {named}; an approver decides it in the console")
    return None


def esc(value: object) -> str:
    return html.escape(str(value))


STYLE = """body{font:16px/1.5 system-ui,sans-serif;margin:0 auto;padding:16px;max-width:40rem}
pre{background:#f4f4f5;padding:12px;overflow-x:auto;white-space:pre-wrap;word-break:break-word}
button{font-size:18px;padding:12px 24px;border:0;border-radius:8px;color:#fff;width:100%}
.approve{background:#15803d}.reject{background:#b91c1c}.risk{font-weight:600}"""


def page(title: str, body: str, status: int = 200) -> HTMLResponse:
    # `same-origin`: the page's form posts with its own Origin, which the API's origin guard
    # checks (`no-referrer` made Chromium send `Origin: null`); the token leaves with no request
    # to another site, as the page loads nothing from one.
    return HTMLResponse(f"""<!doctype html><html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="robots" content="noindex"><title>{esc(title)}</title><style>{STYLE}</style></head>
<body><h1>{esc(title)}</h1>{body}</body></html>""", status,
                        headers={"Cache-Control": "no-store", "Referrer-Policy": "same-origin"})
