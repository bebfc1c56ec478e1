"""Memory across conversations, as tools: `remember` (sensitive: a write, approved as any;
keyed, so a retry never stores twice), `recall` (safe) and `forget` (sensitive). Each acts for
the conversation's owner alone (a subagent's: its parent's owner)."""

from __future__ import annotations

import asyncio
from typing import Annotated

import structlog
from pydantic import Field

from ...contract.memory import Memory
from ...rules.memory import memory_text_problem, recalled_text
from .. import telemetry
from ..memory import MemoryRefused, open_store
from ..memory.embeddings import embedding_of
from ..memory.search import search
from .function_tool import tool
from .registry import ToolContext, ToolError

log = structlog.get_logger()


def _owner(ctx: ToolContext) -> str:
    if not ctx.owner:
        raise ToolError("this conversation has no owner to remember for (it was started without "
                        "one), so memory is off for it")
    return ctx.owner


def describe(memory: Memory) -> str:
    """A memory as an answer names it: its id, and its text where the store still has it."""
    return f"[{memory.id}] {memory.text!r}" if memory.text else f"[{memory.id}]"


@tool(risk="sensitive", idempotent=False, keyed=True, timeout_s=15)
async def remember(ctx: ToolContext, text: str) -> str:
    """Remember something about the user for their later conversations (theirs alone). Use it
    when they ask you to remember something.

    Args:
        text: What to remember, as one self-contained sentence
    """
    owner, settings = _owner(ctx), ctx.settings
    problem = memory_text_problem(text)
    if problem is not None:
        raise ToolError(f"nothing was stored: {problem}")
    store = open_store(settings.memory_store_url)
    embedding = await embedding_of(settings, text)
    try:
        stored = await asyncio.to_thread(store.add, owner, text, ctx.idempotency_key,
                                         ctx.conversation_id, settings.memory_max, embedding)
    except MemoryRefused as err:
        raise ToolError(f"nothing was stored: {err}") from None
    if stored.new:
        telemetry.count_memories("stored", 1)
        telemetry.count_memories("evicted", len(stored.evicted))
    log.info("memory stored", memory_id=stored.memory.id, new=stored.new,
             evicted=[m.id for m in stored.evicted])
    said = f"Remembered {describe(stored.memory)}."
    if stored.evicted:
        said += (f" You keep at most {settings.memory_max} memories, so the least used, oldest "
                 f"first, were forgotten to make room: "
                 + "; ".join(describe(m) for m in stored.evicted) + ". Tell the user.")
    return said


@tool(timeout_s=10)
async def recall(ctx: ToolContext, query: str,
                 limit: Annotated[int, Field(ge=1, le=50)] = 5) -> str:
    """Search what the user asked you to remember in earlier conversations, best match first.

    Args:
        query: Words to look for in the memories
        limit: At most this many memories
    """
    found = await search(ctx.settings, _owner(ctx), query, limit)
    telemetry.count_memories("recalled", len(found))
    if not found:
        return f"No memory matches {query!r}."
    return recalled_text(found)


@tool(risk="sensitive", idempotent=False, keyed=True, timeout_s=15)
async def forget(ctx: ToolContext, memory_id: Annotated[str, Field(max_length=64)]) -> str:
    """Forget one of the user's memories, by its id.

    Args:
        memory_id: The id of the memory, as recall shows it (mem-...)
    """
    store = open_store(ctx.settings.memory_store_url)
    gone = await asyncio.to_thread(store.forget, memory_id, _owner(ctx), ctx.idempotency_key,
                                   ctx.owner or "")
    if gone is None:
        raise ToolError(f"the user has no memory {memory_id!r}")
    telemetry.count_memories("forgotten", 1)
    log.info("memory forgotten", memory_id=gone.id, by=ctx.owner)
    # Not its text: the answer is kept in this conversation's history, which forget cannot erase
    return f"Forgot [{gone.id}]."


MEMORY_TOOLS = [remember, recall, forget]
