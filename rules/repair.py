"""Making odd model output usable: tool calls put in `content`, and missing or repeated ids."""

from __future__ import annotations

import json
import string
from collections.abc import Collection
from typing import Any

from ..contract import ChatMessage, FunctionCall, ToolCall
from ..contract.bounds import (
    MAX_CALL_ID_BYTES,
    MAX_REPLY_TEXT_BYTES,
    MAX_TOOL_NAME_BYTES,
    Limits,
    clip,
    clip_bytes,
    text_size,
)
from .text_calls import calls_in_text

FENCE = "```"
# What a call id may hold in runs with safe ids: it is printed in commands people paste into a
# shell, in the Temporal UI, and in a subagent's workflow id after its parent's and a `/`.
SAFE_ID_CHARS = frozenset(string.ascii_letters + string.digits + "_-")


def fence_inside(text: str) -> str | None:
    """What is between the fences of a text that is one Markdown code fence (```` ```json ...
    ``` ````), its language tag left out, or None. Linear in the text, where a backtracking
    pattern took cubic time on a fence and a few thousand spaces, holding the GIL, so the whole
    worker froze on one reply."""
    if len(text) < 2 * len(FENCE) or not text.startswith(FENCE) or not text.endswith(FENCE):
        return None
    return text[len(FENCE):-len(FENCE)].removeprefix("json")


def fenced(text: str) -> str | None:
    """The inside of a reply that is one code fence, stripped, or None."""
    inside = fence_inside(text)
    return None if inside is None else inside.strip()


def recover_tool_calls(message: ChatMessage, known_tools: Collection[str]) -> ChatMessage:
    """A reply whose whole `content` is a JSON tool call (some providers do this when streaming)
    becomes a proper tool call. Anything that is not clearly a call of a known tool is left alone."""
    if message.tool_calls or not message.content:
        return message
    text = message.content.strip()
    inside = fenced(text)
    if inside is not None:
        text = inside
    if not text.startswith(("{", "[")):
        return message
    try:
        payload = json.loads(text)
    except (ValueError, RecursionError):  # not JSON, or past the parser's limits
        return message
    items = payload.get("tool_calls") if isinstance(payload, dict) and "tool_calls" in payload else payload
    items = items if isinstance(items, list) else [items]
    calls = [_as_call(item) for item in items]
    if not calls or any(c is None or c.function.name not in known_tools for c in calls):
        return message
    return ChatMessage(role="assistant", content=None, tool_calls=calls)


def calls_from_text(message: ChatMessage, offered: Collection[str]
                    ) -> tuple[ChatMessage, list[str]]:
    """A reply whose text holds calls of offered tools (`rules.text_calls`), as a
    reply of those calls and the words around them; and, when no call could be read, the
    offered tools whose calls the text seems to hold anyway."""
    if message.tool_calls or not message.content:
        return message, []
    found = calls_in_text(message.content, offered)
    if not found.calls:
        return message, found.unread
    calls = [ToolCall(id="", function=FunctionCall(
        name=call.name, arguments=json.dumps(call.arguments, ensure_ascii=False)))
        for call in found.calls]
    return ChatMessage(role="assistant", content=found.words, tool_calls=calls), []


def _as_call(item: Any) -> ToolCall | None:
    if not isinstance(item, dict):
        return None
    spec = item.get("function") if isinstance(item.get("function"), dict) else item
    name = spec.get("name")
    args = next((spec[k] for k in ("arguments", "parameters", "args") if k in spec), {})
    if not isinstance(name, str):
        return None
    arguments = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
    return ToolCall(id=str(item.get("id") or ""), function=FunctionCall(name=name, arguments=arguments))


def unique_call_ids(
    calls: list[ToolCall], seen: Collection[str], turn: int, step: int,
) -> list[ToolCall]:
    """Give every call an id that is non-empty, short and unused in this conversation, only of
    `SAFE_ID_CHARS` (a model's `x;curl ...|sh` is not printed in a command) and not starting
    with `-` (which a printed `confirm ID -rf` would read as an option),
    deterministically, so that each tool message answers exactly one call. The id given is the
    one the model reads back too: a chat completion only asks that the tool messages answer
    the ids of the calls before them."""
    taken = set(seen)
    fixed = []
    for i, call in enumerate(calls):
        call_id = call.id
        if not call_id or call_id in taken or text_size(call_id) > MAX_CALL_ID_BYTES or (
                not SAFE_ID_CHARS.issuperset(call_id)) or call_id.startswith("-"):
            base = f"call_t{turn}s{step}_{i}"
            call_id, n = base, 1
            while call_id in taken:
                n += 1
                call_id = f"{base}_{n}"
            call = call.model_copy(update={"id": call_id})
        taken.add(call_id)
        fixed.append(call)
    return fixed


def bound_reply(message: ChatMessage, limits: Limits) -> tuple[ChatMessage, dict[str, str]]:
    """A reply within the bounds of what the context keeps: its text cut to a size, its calls to
    a number, and calls whose arguments would pass the size budget refused. Returns the message and
    the refused calls' observations by call id."""
    update: dict[str, Any] = {}
    if message.content is not None:
        update["content"] = clip_bytes(message.content, MAX_REPLY_TEXT_BYTES, "reply text")
    calls, refused = list(message.tool_calls or []), {}
    if limits.calls_per_reply is not None and len(calls) > limits.calls_per_reply:
        calls = calls[: limits.calls_per_reply]
        update["tool_calls"] = calls
        last = calls[-1].id
        left_out = len(message.tool_calls or []) - len(calls)
        refused[last] = (
            f"Error: not run: your reply had {len(message.tool_calls or [])} tool calls, and at "
            f"most {limits.calls_per_reply} are taken from one reply: this one and the "
            f"{left_out} after it did not run. Make them in a later step."
        )
    if limits.args_bytes is not None:
        budget, kept = limits.args_bytes, []
        for call in calls:
            if text_size(call.function.name) > MAX_TOOL_NAME_BYTES:  # no tool has such a name
                call = call.model_copy(update={"function": call.function.model_copy(
                    update={"name": clip(call.function.name, MAX_TOOL_NAME_BYTES)})})
            size = text_size(call.function.arguments)
            if size > budget:
                refused[call.id] = (
                    f"Error: the arguments of {call.function.name} are {size:,} bytes, over what "
                    f"one reply may send ({limits.args_bytes:,} bytes in all). Send less."
                )
                call = call.model_copy(update={"function": call.function.model_copy(
                    update={"arguments": "{}"})})
            else:
                budget -= size
            kept.append(call)
        if kept != calls:
            update["tool_calls"] = kept
    return (message.model_copy(update=update) if update else message), refused
