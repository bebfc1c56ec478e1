"""An MCP stdio server that cannot list its tools while a test says so, as a flapping server
would: while the file named by FLAKY_LISTINGS holds a number above zero, each listing fails and
counts it down. Its one tool is read-only (safe to the agent) and notes each run in the file
named by FLAKY_RUNS, so a test sees whether it ran."""

from __future__ import annotations

import os
from pathlib import Path

from mcp.server.mcpserver import MCPServer
from mcp.types import Tool, ToolAnnotations


class FlakyServer(MCPServer):
    async def list_tools(self) -> list[Tool]:
        failing = Path(os.environ["FLAKY_LISTINGS"])
        left = int(failing.read_text() or 0) if failing.exists() else 0
        if left > 0:  # the toolbox drops the session; the next one is a new process: count in a file
            failing.write_text(str(left - 1))
            raise RuntimeError("cannot list tools right now")
        return await super().list_tools()


server = FlakyServer("flaky")


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def peek(what: str) -> str:
    """Reads `what`."""
    with open(os.environ["FLAKY_RUNS"], "a") as runs:
        runs.write(f"{what}\n")
    return f"peeked at {what}"


if __name__ == "__main__":
    server.run()
