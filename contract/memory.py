"""Memory across conversations (DESIGN "Memory across conversations"): what an owner asked the
agent to remember, as the store keeps it, the API and the CLI show it, and a turn recalls it.
Plain data, safe in the workflow sandbox."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, BaseModel

from .bounds import KiB, valid_text

RECALL_ACTIVITY = "recall_memories"  # before a turn: the owner's memories most relevant to it
REMEMBER_TOOL, RECALL_TOOL, FORGET_TOOL = "remember", "recall", "forget"
MEMORY_TOOLS = frozenset({REMEMBER_TOOL, RECALL_TOOL, FORGET_TOOL})

MAX_MEMORY_BYTES = 4 * KiB  # one memory's text, in UTF-8
MAX_RECALLED_BYTES = 4 * KiB  # the recalled memories a turn's model sees, together
MAX_RECALL_QUERY_BYTES = 2 * KiB  # of a turn's first message, what a recall searches with
DEFAULT_RECALL = 5  # AGENT_MEMORY_RECALL
MAX_RECALLED = 50  # the most AGENT_MEMORY_RECALL may be
DEFAULT_MAX_PER_OWNER = 500  # AGENT_MEMORY_MAX


class Memory(BaseModel):
    """One memory: `{"id", "owner", "text", "created_at", "conversation_id"}`."""

    id: str
    owner: str
    text: Annotated[str, AfterValidator(valid_text)]  # the owner's words: outside text
    created_at: str  # ISO 8601, UTC
    conversation_id: str | None = None  # where it was remembered (None: stored from outside one)


class RecallRequest(BaseModel):
    """A turn's recall: the owner's memories most relevant to its first message."""

    owner: str
    query: str


class Recalled(BaseModel):
    """What a turn recalled, most relevant first, within the worker's count and byte bounds."""

    memories: list[Memory] = []
