"""The web console: its page, and what it needs to know of the principal."""

from __future__ import annotations

from pathlib import Path as FilePath
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import FileResponse
from pydantic import BaseModel

from ..access import ROLES, Role, Verdict
from ..bodies import StrictJsonRoute
from ..deps import Who

STATIC = FilePath(__file__).parent.parent / "static"
router = APIRouter(tags=["console"], route_class=StrictJsonRoute)


class ConsoleConfig(BaseModel):
    principal: str
    roles: list[Role]
    may_start: bool  # start conversations
    sees_all: bool  # read (and list) every conversation, not only one's own
    decides_all: bool  # decide every conversation's calls, not only one's own
    writes_all: bool  # message and end every conversation (an admin)
    auth_required: bool
    temporal_ui: str
    namespace: str
    trace_url: str | None = None  # a trace viewer's URL, {trace_id} standing for the id


@router.get("/config", response_model=ConsoleConfig)
async def config(who: Who, request: Request) -> Any:
    """Who you are, what your roles let you do, and where the Temporal UI is."""
    settings, temporal = request.app.state.settings, request.app.state.temporal
    return ConsoleConfig(principal=who.name, roles=[r for r in ROLES if r in who.roles],
                         may_start=who.may_start, sees_all=who.sees_all,
                         decides_all=who.may("decide", None) is Verdict.ALLOWED,
                         writes_all=who.may("message", None) is Verdict.ALLOWED,
                         auth_required=settings.auth_required,
                         temporal_ui=settings.temporal_ui, namespace=temporal.namespace,
                         trace_url=settings.trace_url)


@router.get("/", include_in_schema=False)
async def console() -> FileResponse:
    return FileResponse(STATIC / "index.html")
