"""An MCP stdio server whose tools ask their client in the middle of a call: for input (form
elicitation), and for a completion of its model (sampling); one that asks after its call
returned; and one that changes its list of tools. It writes down every run of a call and what
it was told, for the tests of servers that ask back. `ASKING_LOG` names the file."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

from mcp import MCPError
from mcp.server.mcpserver import Context, MCPServer
from mcp.shared.exceptions import NoBackChannelError
from mcp.types import SamplingMessage, TextContent
from pydantic import BaseModel, Field

server = MCPServer("asking")


class Stay(BaseModel):
    nights: int = Field(ge=1, le=30, description="how many nights")
    breakfast: bool = False


def _write(record: dict) -> None:
    with open(os.environ["ASKING_LOG"], "a", encoding="utf-8") as out:
        out.write(json.dumps(record) + "\n")


@server.tool()
async def book(city: str, ctx: Context) -> str:
    """Books a room in `city`, asking the user how many nights."""
    _write({"run": city})
    stay = await ctx.elicit(f"How many nights in {city}?", schema=Stay)
    data = getattr(stay, "data", None)  # only an accepted answer has it
    _write({"city": city, "action": stay.action,
            "data": data.model_dump() if data is not None else None})
    if data is None:
        return f"not booked ({stay.action})"
    return f"booked {data.nights} nights in {city}"


@server.tool()
async def headline(text: str, ctx: Context) -> str:
    """Writes a headline for `text`, asking the client's model for it."""
    _write({"run": text})
    ask = SamplingMessage(role="user", content=TextContent(type="text",
                                                           text=f"A headline for: {text}"))
    try:
        result = await ctx.session.create_message([ask], max_tokens=5_000,
                                                  system_prompt="You write headlines.")
    except NoBackChannelError:
        raise  # the client then speaks the older protocol, which has one
    except MCPError as exc:
        _write({"refused": str(exc)})
        return f"no headline: {exc}"
    _write({"headline": result.content.text, "model": result.model})
    return f"headline: {result.content.text}"


LATER_S = 30  # how long a late question, or `hold`, waits for its moment at most
_LATER: set[asyncio.Task] = set()


def _later_file() -> Path:
    return Path(os.environ["ASKING_LOG"] + ".later")


@server.tool()
async def remind(about: str, ctx: Context) -> str:
    """Promises to ask the user about `about` later: after this call returned, once `hold`
    (of this server process or another) says the moment came."""
    _write({"run": f"remind {about}"})
    await ctx.session.send_ping()  # none on 2026-07-28: the client then speaks the older one
    task = asyncio.create_task(_ask_later(ctx.session, about))
    _LATER.add(task)
    task.add_done_callback(_LATER.discard)
    return f"will ask about {about}"


async def _ask_later(session, about: str) -> None:
    """The late question: with no call of its own in flight, sent on the session's own
    channel (as a server that asks on a timer would)."""
    for _ in range(LATER_S * 20):
        if _later_file().exists():
            break
        await asyncio.sleep(0.05)
    else:
        return
    schema = {"type": "object", "properties": {"still": {"type": "boolean"}}}
    try:
        answer = await session.elicit_form(f"Still want {about}?", schema)
    except MCPError as exc:
        _write({"late": about, "refused": str(exc)})
        return
    _write({"late": about, "action": answer.action})


@server.tool()
async def hold() -> str:
    """Says the moment came for the late questions, and returns once one was asked (answered
    or refused)."""
    _write({"run": "hold"})
    _later_file().touch()
    for _ in range(LATER_S * 20):
        if any("late" in record for record in _records()):
            return "held"
        await asyncio.sleep(0.05)
    return "held: no late question came"


def _records() -> list[dict]:
    with open(os.environ["ASKING_LOG"], encoding="utf-8") as log:
        return [json.loads(line) for line in log]


def vault() -> str:
    """Opens the vault (listed once `unlock` ran)."""
    return "the vault is open"


@server.tool()
async def unlock(ctx: Context) -> str:
    """Adds the tool `vault`, and says the list of tools changed."""
    _write({"run": "unlock"})
    server.add_tool(vault)
    await ctx.notify_tools_changed()  # 2026-07-28: to `subscriptions/listen` streams
    await ctx.session.send_tool_list_changed()  # 2025-11-25: a notification
    return "unlocked"


if __name__ == "__main__":
    server.run()
