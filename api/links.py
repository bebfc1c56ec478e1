"""One-time approval links (DESIGN "Reaching the human"): `GET /links/{token}` shows what the
link would decide and changes nothing (mail scanners and chat unfurlers fetch links); a `POST`
decides, once. A link is signed with `AGENT_LINK_SECRET` (shared by the worker, which writes
them into deliveries, and the API), expires, and is bound to the conversation, the call and
the sha256 of the arguments it approves: once those arguments changed, it decides nothing.

The conversation is the once-only record: the decision is sent with the arguments the link
names (`seen`), and a decided call is stale, so a second POST is refused by the conversation
itself, whichever API process it reaches. The approver is the link's addressee (the webhook's
`addressee`), or `link`; with tokens, an addressee must be someone whose role may decide that
conversation. Four eyes holds as for any decision. The pages are plain HTML forms: no
JavaScript, and readable on a phone."""

from __future__ import annotations

import html
import json
from typing import Any

from fastapi import APIRouter
from fastapi.responses import HTMLResponse

from activities.webhooks import LinkError, read_link
from api.access import TokenBook, Verdict
from client.session import NotFound, NoWorker, Refused, Session
from workflows.models import ConfirmRequest, ConversationStatus, PendingConfirmation, RejectRequest

LINK_APPROVER = "link"  # the approver of a link that names nobody


def link_routes(secret: str | None, tokens: TokenBook, session: Any) -> APIRouter:
    router = APIRouter(include_in_schema=False)

    def checked(token: str) -> tuple[dict[str, Any], Session]:
        if secret is None:
            raise LinkError("one-time links are off (AGENT_LINK_SECRET is not set)", 404)
        return read_link(secret, token), session()

    @router.get("/links/{token}", response_class=HTMLResponse)
    async def show(token: str) -> HTMLResponse:
        """What the link would decide; nothing changes."""
        try:
            claims, s = checked(token)
            call, status = await pending(s, claims)
        except LinkError as err:
            return page("Link", f"<p>{esc(err)}</p>", err.status)
        verb = "Approve" if claims["a"] == "approve" else "Reject"
        return page(f"{verb} {call.tool}?", f"""
<p>Conversation <code>{esc(status.workflow_id)}</code> waits for a decision on
<strong>{esc(call.tool)}</strong> (<span class="risk">{esc(call.risk)}</span>), call
<code>{esc(call.call_id)}</code>, with these arguments:</p>
<pre>{esc(json.dumps(call.args, indent=2, ensure_ascii=False))}</pre>
<p>You decide as <strong>{esc(claims.get("to") or LINK_APPROVER)}</strong>. The link works once.</p>
<form method="post"><button type="submit" class="{claims["a"]}">{verb}</button></form>""")

    @router.post("/links/{token}", response_class=HTMLResponse)
    async def decide(token: str) -> HTMLResponse:
        """Decide, once: exactly the arguments the link names."""
        try:
            claims, s = checked(token)
            call, status = await pending(s, claims)
            who = claims.get("to") or LINK_APPROVER
            if tokens and claims.get("to"):
                addressee = tokens.named(claims["to"])
                if addressee is None or addressee.may("decide", status.owner) \
                        is not Verdict.ALLOWED:
                    raise LinkError(f"{who} may not decide this conversation", 403)
            request: ConfirmRequest | RejectRequest
            common = {"request_id": f"link-{claims['n']}-{claims['a']}", "approver": who,
                      "call_ids": [call.ref or call.call_id],
                      "seen": {call.ref or call.call_id: claims["h"]}}
            if claims["a"] == "approve":
                request = ConfirmRequest(**common)
            else:
                request = RejectRequest(**common, reason="rejected by its one-time link")
            await s.decide(claims["c"], request, by_update=True)
        except LinkError as err:
            return page("Link", f"<p>{esc(err)}</p>", err.status)
        except Refused as err:
            return page("Not decided", f"<p>The conversation refused: {esc(err)}</p>", 409)
        done = "approved" if claims["a"] == "approve" else "rejected"
        return page(f"{call.tool} {done}", f"<p><strong>{esc(call.tool)}</strong> call "
                                           f"<code>{esc(call.call_id)}</code> is {done}, as "
                                           f"{esc(who)}.</p>")

    return router


async def pending(s: Session, claims: dict[str, Any]) -> tuple[PendingConfirmation,
                                                                ConversationStatus]:
    """The call the link names, still waiting with the arguments it names; else why not."""
    try:
        status = await s.status(claims["c"])
    except NotFound:
        raise LinkError("this conversation no longer exists", 404) from None
    except NoWorker:
        raise LinkError("no worker answered; try again in a moment", 503) from None
    call = next((p for p in status.pending_confirmations
                 if claims["k"] in (p.ref, p.call_id)), None)
    if call is None:
        raise LinkError("this call is no longer waiting for a decision: the link was used, or "
                        "someone decided it", 409)
    if call.args_hash != claims["h"]:
        raise LinkError("the call's arguments are not the ones this link was made for", 409)
    return call, status


def esc(value: object) -> str:
    return html.escape(str(value))


STYLE = """body{font:16px/1.5 system-ui,sans-serif;margin:0 auto;padding:16px;max-width:40rem}
pre{background:#f4f4f5;padding:12px;overflow-x:auto;white-space:pre-wrap;word-break:break-word}
button{font-size:18px;padding:12px 24px;border:0;border-radius:8px;color:#fff;width:100%}
.approve{background:#15803d}.reject{background:#b91c1c}.risk{font-weight:600}"""


def page(title: str, body: str, status: int = 200) -> HTMLResponse:
    return HTMLResponse(f"""<!doctype html><html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="robots" content="noindex"><title>{esc(title)}</title><style>{STYLE}</style></head>
<body><h1>{esc(title)}</h1>{body}</body></html>""", status,
                        headers={"Cache-Control": "no-store", "Referrer-Policy": "no-referrer"})
