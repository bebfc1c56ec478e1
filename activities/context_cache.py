"""What a worker keeps between a conversation's model calls, so that a call can carry a delta
(`rules.delta`): each conversation's last prompt, and the tool lists seen by digest. Bounded
by an estimate of the bytes held; the least recently used goes first. Losing an entry costs one
fetch of the prompt from the conversation, never a wrong prompt: entries are found by digest."""

from __future__ import annotations

from collections import Counter, OrderedDict
from dataclasses import dataclass
from typing import Any

DEFAULT_MAX_BYTES = 256 * 2**20
MESSAGE_OVERHEAD_BYTES = 160  # a wire message's keys, role and ids, roughly


@dataclass(frozen=True)
class CachedPrompt:
    digest: str
    wire: list[dict[str, Any]]  # the messages as the endpoint receives them
    size: int


def wire_size(messages: list[dict[str, Any]]) -> int:
    """An estimate of the bytes a prompt holds (content and arguments dominate)."""
    size = 0
    for m in messages:
        size += len(m.get("content") or "") + MESSAGE_OVERHEAD_BYTES
        for call in m.get("tool_calls") or ():
            size += len(call["function"]["arguments"]) + MESSAGE_OVERHEAD_BYTES
    return size


class ContextCache:
    def __init__(self, max_bytes: int = DEFAULT_MAX_BYTES):
        self.max_bytes = max_bytes
        self._prompts: OrderedDict[str, CachedPrompt] = OrderedDict()
        self._tools: OrderedDict[str, tuple[list[dict[str, Any]], int]] = OrderedDict()
        self._bytes = 0
        self.rebuilt: Counter[str] = Counter()  # prompts by how they were had: delta, full, fetched

    @property
    def held_bytes(self) -> int:
        return self._bytes

    def __len__(self) -> int:
        return len(self._prompts)

    def prompt(self, conversation: str, digest: str) -> CachedPrompt | None:
        """The conversation's last prompt, if it is the one with this digest."""
        entry = self._prompts.get(conversation)
        if entry is None or entry.digest != digest:
            return None
        self._prompts.move_to_end(conversation)
        return entry

    def keep_prompt(self, conversation: str, digest: str, wire: list[dict[str, Any]]) -> None:
        old = self._prompts.pop(conversation, None)
        if old is not None:
            self._bytes -= old.size
        entry = CachedPrompt(digest=digest, wire=wire, size=wire_size(wire))
        self._prompts[conversation] = entry
        self._bytes += entry.size
        self._evict()

    def tools(self, digest: str) -> list[dict[str, Any]] | None:
        found = self._tools.get(digest)
        if found is None:
            return None
        self._tools.move_to_end(digest)
        return found[0]

    def keep_tools(self, digest: str, tools: list[dict[str, Any]]) -> None:
        if digest in self._tools:
            self._tools.move_to_end(digest)
            return
        size = sum(len(str(t)) for t in tools)
        self._tools[digest] = (tools, size)
        self._bytes += size
        self._evict()

    def _evict(self) -> None:
        # Prompts go first (a conversation refetches its own); tool lists are shared by many.
        while self._bytes > self.max_bytes and len(self._prompts) > 1:
            _, entry = self._prompts.popitem(last=False)
            self._bytes -= entry.size
        while self._bytes > self.max_bytes and len(self._tools) > 1:
            _, (_, size) = self._tools.popitem(last=False)
            self._bytes -= size
