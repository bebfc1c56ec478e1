"""An MCP stdio server whose tool asks its client for input in the middle of a call (form
elicitation), and writes down every run of the call and what it was told, for the tests of
durable elicitation. `ASKING_LOG` names the file."""

from __future__ import annotations

import json
import os

from mcp.server.mcpserver import Context, MCPServer
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


if __name__ == "__main__":
    server.run()
