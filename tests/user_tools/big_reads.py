"""A read whose result is large (kept by reference), counting its runs, for killing a worker
while it stores the result (tests/e2e/test_worker_killed.py)."""

from __future__ import annotations

from durable_react_agent import ToolContext, tool

LINE = "SECRET-ARCHIVE entry {:07d}: what the archive holds, line by line\n"


def document(size: int) -> str:
    return "".join(LINE.format(i) for i in range(size // len(LINE.format(0)) + 1))[:size]


@tool(local=False)
async def big_document(size: int, ctx: ToolContext) -> str:
    """Read a whole document from the archive.

    Args:
        size: how many bytes of it
    """
    runs = ctx.settings.data_dir / "big_document.runs"
    runs.parent.mkdir(parents=True, exist_ok=True)
    with runs.open("a") as out:  # one line per run that began
        out.write(f"{ctx.call_id}\n")
    return document(size)
