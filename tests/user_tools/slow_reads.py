"""A safe read that takes a while, for killing a worker while it runs in the workflow task."""

from __future__ import annotations

import asyncio

from durable_react_agent import ToolContext, tool


@tool
async def slow_lookup(query: str, ctx: ToolContext) -> str:
    """Look something up in the archive (it takes three seconds).

    Args:
        query: what to look up
    """
    runs = ctx.settings.data_dir / "slow_lookup.runs"
    runs.parent.mkdir(parents=True, exist_ok=True)
    with runs.open("a") as out:  # one line per run that began
        out.write(f"{ctx.call_id}\n")
    await asyncio.sleep(3)
    return f"the archive has {query}"


@tool(local=False)
async def archive_scan(query: str) -> str:
    """Scan the whole archive (a long read: it runs as an activity of its own).

    Args:
        query: what to scan for
    """
    return f"scanned for {query}"
