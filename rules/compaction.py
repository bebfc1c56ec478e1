"""Keeping the prompt bounded once the history passes a token budget. Deterministic and pure.

A "round" is an assistant message with tool calls plus the tool messages that answer it. The
latest round is never touched: the model is working with it. Older rounds are first kept with
their observations elided, then dropped whole and counted in one note, so a tool call is never
separated from its result and the history stays valid for any OpenAI-compatible endpoint.
"""

from __future__ import annotations

import re
from collections import Counter

from ..contract import ChatMessage
from ..contract.bounds import clip

CHARS_PER_TOKEN = 4
MESSAGE_OVERHEAD_TOKENS = 4
ELIDED_PREFIX = "[elided to bound the context:"
DROPPED_NOTE = "[{steps} earlier tool steps dropped to bound the context: {tools}]"
NOTE_RESERVE_TOKENS = 64  # room for the note that replaces the dropped rounds
NOTE_TOOLS = 8  # tool names the note lists in full; past them, the most used few, clipped
NOTE_TOP_TOOLS, MAX_NOTE_TOOL_BYTES = 3, 24
_DROPPED = re.compile(r"^\[(\d+) earlier tool steps dropped")


def message_tokens(m: ChatMessage) -> int:
    chars = len(m.content or "")
    for call in m.tool_calls or []:
        chars += len(call.function.name) + len(call.function.arguments)
    return chars // CHARS_PER_TOKEN + MESSAGE_OVERHEAD_TOKENS


def estimate_tokens(messages: list[ChatMessage]) -> int:
    """A rough count (about 4 characters a token) that is the same on every replay."""
    return sum(message_tokens(m) for m in messages)


def model_steps(messages: list[ChatMessage]) -> int:
    """The model steps behind `messages`: its assistant messages, and the steps notes stand for."""
    steps = 0
    for m in messages:
        if m.role == "assistant":
            steps += 1
        elif m.role == "system" and (found := _DROPPED.match(m.content or "")):
            steps += int(found.group(1))
    return steps


def rounds(messages: list[ChatMessage]) -> list[tuple[int, int]]:
    """(start, end) index ranges, end exclusive, of each tool round in order."""
    found, i = [], 0
    while i < len(messages):
        if messages[i].role == "assistant" and messages[i].tool_calls:
            j = i + 1
            while j < len(messages) and messages[j].role == "tool":
                j += 1
            found.append((i, j))
            i = j
        else:
            i += 1
    return found


def compact(messages: list[ChatMessage], budget_tokens: int | None) -> list[ChatMessage]:
    """The messages, with older rounds elided and then dropped until they fit `budget_tokens`."""
    if budget_tokens is None or estimate_tokens(messages) <= budget_tokens:
        return messages
    older = rounds(messages)[:-1]
    out = list(messages)
    total = estimate_tokens(out)
    for start, end in older:
        for i in range(start + 1, end):
            if total <= budget_tokens:
                return out
            elided = _elide(out[i])
            total += message_tokens(elided) - message_tokens(out[i])
            out[i] = elided
    if total <= budget_tokens:
        return out
    return _drop_rounds(out, older, budget_tokens, total)


def tool_counts(tools: Counter[str]) -> str:
    """`get_weather x3, list_notes x1`. Past a few names, the most used ones, clipped, and the
    rest counted: a model calling a new made-up name at every step keeps the note small."""
    if len(tools) <= NOTE_TOOLS:
        return ", ".join(f"{name} x{n}" for name, n in sorted(tools.items()))
    top = sorted(tools.most_common(NOTE_TOP_TOOLS))
    rest = sum(tools.values()) - sum(n for _, n in top)
    return ", ".join([*(f"{clip(name, MAX_NOTE_TOOL_BYTES)} x{n}" for name, n in top),
                      f"{rest} call(s) of {len(tools) - len(top)} other tool(s)"])


def _elide(m: ChatMessage) -> ChatMessage:
    content = m.content or ""
    if content.startswith(ELIDED_PREFIX):
        return m
    note = f"{ELIDED_PREFIX} {len(content.encode())} bytes; call the tool again if needed]"
    return m if len(note) >= len(content) else m.model_copy(update={"content": note})


def _drop_rounds(
    out: list[ChatMessage], older: list[tuple[int, int]], budget: int, total: int
) -> list[ChatMessage]:
    dropped: set[int] = set()
    tools: Counter[str] = Counter()
    for start, end in older:
        if total <= budget - NOTE_RESERVE_TOKENS:
            break
        dropped.update(range(start, end))
        total -= sum(message_tokens(out[i]) for i in range(start, end))
        tools.update(c.function.name for c in out[start].tool_calls or [])
    if not dropped:
        return out
    summary = tool_counts(tools)
    steps = sum(1 for start, _ in older if start in dropped)
    note = ChatMessage(role="system", content=DROPPED_NOTE.format(steps=steps, tools=summary))
    first = min(dropped)
    kept = [m for i, m in enumerate(out) if i not in dropped]
    position = sum(1 for i in range(first) if i not in dropped)
    return [*kept[:position], note, *kept[position:]]
