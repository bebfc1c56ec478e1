"""An MCP stdio server whose tools ask their client in the middle of a call: for input (form
elicitation), and for a completion of its model (sampling); and one that changes its list of
tools. It writes down every run of a call and what it was told, for the tests of servers that
ask back. `ASKING_LOG` names the file."""

from __future__ import annotations

import json
import os

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
