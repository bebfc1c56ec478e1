"""An MCP stdio server whose tools misbehave on purpose, for the toolbox tests."""

from __future__ import annotations

import os
import sys

import anyio
from mcp.server.mcpserver import Context, MCPServer

server = MCPServer("unruly")


@server.tool()
def pid() -> str:
    """The server's process id, so a test can tell one process from the next."""
    return str(os.getpid())


@server.tool()
def echo(text: str) -> str:
    """Says `text` back."""
    return text


@server.tool()
async def count(to: int, ctx: Context) -> str:
    """Counts to `to`, reporting each number as progress."""
    for i in range(1, to + 1):
        await ctx.report_progress(i, to, f"counted {i}" if i % 2 else None)
    return f"counted to {to}"


@server.tool()
def crash() -> str:
    """Dies in the middle of the call, with a last word on stderr."""
    print("unruly: crashing on purpose", file=sys.stderr, flush=True)
    os._exit(3)


@server.tool()
async def hang() -> str:
    """Never answers."""
    await anyio.sleep_forever()
    return "unreachable"


if __name__ == "__main__":
    server.run()
