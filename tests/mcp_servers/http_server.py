"""An MCP server over HTTP for the toolbox tests: `python http_server.py PORT streamable|sse`.

It reads the bearer token it expects from EXPECTED_TOKEN, so a test can check that configured
headers arrive without the token ever being echoed back. Two of its tools ask back in the call's
own stream, as a request of streamable HTTP names its call: `stay` (elicitation) and `headline`
(sampling).
"""

from __future__ import annotations

import json
import os
import sys

import anyio
import uvicorn
from mcp import MCPError
from mcp.server.mcpserver import Context, Image, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import NoBackChannelError
from mcp.types import SamplingMessage, TextContent, ToolAnnotations
from pydantic import BaseModel

# The smallest valid PNG: a 1x1 transparent pixel.
PIXEL_PNG = bytes.fromhex(
    "89504e470d0a1a0a0000000d49484452000000010000000108060000001f15c489"
    "0000000d49444154789c6360000002000154a24f5d0000000049454e44ae426082"
)

server = MCPServer("notes-http")


class Window(BaseModel):
    start: str
    end: str | None = None


class Query(BaseModel):
    text: str
    window: Window
    tags: list[str] = []


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def search_notes(query: Query, limit: int = 10) -> str:
    """Search the notes."""
    return f"found nothing for {query.text!r} (limit {limit})"


DELETED: list[str] = []


@server.tool(annotations=ToolAnnotations(destructive_hint=True))
def delete_note(note_id: str) -> str:
    """Delete a note for good."""
    DELETED.append(note_id)
    return f"deleted {note_id}"


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def deletions() -> str:
    """How many times delete_note ran, as JSON, so tests can count side effects."""
    return json.dumps(DELETED)


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def snapshot() -> Image:
    """A picture of the notes board."""
    return Image(data=PIXEL_PNG, format="png")


@server.tool()
def archive_all() -> str:
    """Always refuses."""
    raise ToolError("the archive is read-only today")


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def whoami(ctx: Context) -> str:
    """Say whether the request carried the expected bearer token."""
    expected = f"Bearer {os.environ['EXPECTED_TOKEN']}"
    return "authorized" if (ctx.headers or {}).get("authorization") == expected else "anonymous"


class Stay(BaseModel):
    nights: int


PARTY_S = 15  # how long a `stay` waits for its party at most
_GATHERING: list[anyio.Event] = []  # the `stay` calls waiting for their party


@server.tool()
async def stay(city: str, ctx: Context, party: int = 1) -> str:
    """Books a stay in `city`, asking the user how many nights once `party` calls of it are
    in flight at once (so that their questions meet)."""
    gathered = anyio.Event()
    _GATHERING.append(gathered)
    if len(_GATHERING) >= party:
        for member in _GATHERING:
            member.set()
        _GATHERING.clear()
    with anyio.move_on_after(PARTY_S):
        await gathered.wait()
    if gathered in _GATHERING:
        _GATHERING.remove(gathered)
    answer = await ctx.elicit(f"How many nights in {city}?", schema=Stay)
    data = getattr(answer, "data", None)
    return f"{data.nights} nights in {city}" if data is not None else f"no stay ({answer.action})"


@server.tool()
async def headline(text: str, ctx: Context) -> str:
    """Writes a headline for `text`, asking the client's model in the call's own stream."""
    ask = SamplingMessage(role="user", content=TextContent(type="text",
                                                           text=f"A headline for: {text}"))
    try:
        result = await ctx.session.create_message([ask], max_tokens=5_000,
                                                  related_request_id=ctx.request_id)
    except NoBackChannelError:
        raise  # the client then speaks the older protocol, which has one
    except MCPError as exc:
        return f"no headline: {exc}"
    return f"headline: {result.content.text}"


if __name__ == "__main__":
    port, transport = int(sys.argv[1]), sys.argv[2]
    app = server.streamable_http_app() if transport == "streamable" else server.sse_app()
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")
