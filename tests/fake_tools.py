"""Tools that exist only in tests, to exercise retries, size limits and cancellation."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import cast

import httpx
from pydantic import BaseModel
from temporalio import activity

from durable_react_agent.activities.tools import ToolRegistry, ToolSpec
from durable_react_agent.activities.tools.notes import NOTES_TOOLS, CreateNoteArgs, create_note
from durable_react_agent.activities.tools.weather import get_weather

ATTEMPTS: Counter[str] = Counter()  # tool name → attempts started, in this process
NO_HTTP = cast(httpx.AsyncClient, None)  # for tools that make no requests


class NoArgs(BaseModel):
    pass


class SizeArgs(BaseModel):
    size: int = 40_000


async def flaky_read(args: NoArgs, ctx) -> str:
    ATTEMPTS["flaky_read"] += 1
    if activity.info().attempt < 3:
        raise ConnectionError(f"upstream hiccup on attempt {activity.info().attempt}")
    return f"read ok on attempt {activity.info().attempt}"


async def flaky_write(args: NoArgs, ctx) -> str:
    ATTEMPTS["flaky_write"] += 1
    raise RuntimeError("the upstream closed the connection mid-write")


async def big_output(args: SizeArgs, ctx) -> str:
    return "é" + "x" * (args.size - 2)


REPORT_LINE = "SECRET-LEDGER row {:07d}: the quarterly numbers nobody outside may read\n"


def report_text(size: int) -> str:
    """A report of `size` bytes (ASCII) whose every line says it is secret."""
    rows = size // len(REPORT_LINE.format(0)) + 1
    return "".join(REPORT_LINE.format(i) for i in range(rows))[:size]


async def big_report(args: SizeArgs, ctx) -> str:
    return report_text(args.size)


async def slow_tool(args: NoArgs, ctx) -> str:
    ATTEMPTS["slow_tool"] += 1
    try:
        await asyncio.sleep(120)
    except asyncio.CancelledError:
        ATTEMPTS["slow_tool_cancelled"] += 1
        raise
    return "finished"


async def slow_write(args: NoArgs, ctx) -> str:
    """A write that takes a moment: what a decision may arrive during."""
    await asyncio.sleep(2)
    return "written, slowly"


async def odd_text(args: NoArgs, ctx) -> str:
    """Text a tool may return that no payload can carry: a lone surrogate and a NUL."""
    return "before \ud800 after \x00 end"


async def note_then_crash(args: CreateNoteArgs, ctx) -> str:
    """create_note, whose first attempt dies right after its write committed."""
    ATTEMPTS["note_then_crash"] += 1
    done = await create_note(args, ctx)
    if activity.info().attempt == 1:
        raise ConnectionError("the worker died before it could report the write")
    return done


TEST_TOOLS = [
    ToolSpec("flaky_read", "Reads, but fails twice first.", NoArgs, flaky_read, idempotent=True),
    ToolSpec("flaky_write", "Writes, and fails.", NoArgs, flaky_write, idempotent=False),
    ToolSpec("big_output", "Returns a huge text.", SizeArgs, big_output),
    ToolSpec("slow_tool", "Takes two minutes.", NoArgs, slow_tool, timeout_s=300),
    ToolSpec("note_then_crash", "Creates a note; its first attempt crashes after the write.",
             CreateNoteArgs, note_then_crash, idempotent=False, keyed=True),
]


# Tools of the workers that ask for them only: the shared worker's catalog stays the one the
# context budgets of other tests were measured with.
ODD_TOOLS = [
    ToolSpec("odd_text", "Returns text that is not valid Unicode.", NoArgs, odd_text),
    ToolSpec("slow_write", "Writes, in two seconds.", NoArgs, slow_write, risk="sensitive",
             keyed=True),
]


# the payload tests' large read (not among every worker's tools: a tool more in every prompt
# moves the token budgets the context tests are tuned to)
BIG_REPORT = ToolSpec("big_report", "Returns a report of `size` bytes.", SizeArgs, big_report,
                      local=False)


def registry_with_test_tools(*extra: ToolSpec) -> ToolRegistry:
    return ToolRegistry([get_weather, *NOTES_TOOLS, *TEST_TOOLS, *extra])


# account_read, a tool whose risk the worker decides (`registry(risk)`).
class ReadArgs(BaseModel):
    what: str


async def read_handler(args: ReadArgs, ctx) -> str:
    return f"read {args.what}"


def registry(risk: str) -> ToolRegistry:
    return ToolRegistry([get_weather, *NOTES_TOOLS,
                         ToolSpec("account_read", "Reads an account.", ReadArgs, read_handler, risk=risk)])
