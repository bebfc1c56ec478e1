"""Calls a model writes again. A small model often recaps its last call in a ```` ```json ````
fence ("I called `create_note` with the following arguments: ..."), and writes one call twice in
one reply: each fence read as a new call put three identical notes before a person, and
`confirm --all` approved them. So identical calls of one reply are one call, and a call read
from the text that repeats one that ran this turn is answered with that call's result, never put
to a person as new. Pure functions."""

from __future__ import annotations

import hashlib
import json

from ..contract import ChatMessage, ToolCall
from ..contract.bounds import canonical_json, clip_bytes
from ..contract.state import RanCall

MAX_RAN_CALLS = 32  # of a turn, kept to know a restated call
MAX_RESULT_BYTES = 2048  # of the earlier result, told again


def call_key(name: str, arguments: dict | str) -> str:
    """What makes two calls the same: the tool, and its arguments as JSON means them (keys in
    any order, any spacing); arguments that are no JSON, as written."""
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments or "{}")
        except (ValueError, RecursionError):
            return _digest(f"{name}\n{arguments}")
    try:
        return _digest(f"{name}\n{canonical_json(arguments)}")
    except (TypeError, ValueError, RecursionError):
        return _digest(f"{name}\n{arguments!r}")


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def distinct(calls: list[ToolCall]) -> list[ToolCall]:
    """The calls without those identical to one before them (the first of each kept)."""
    seen: set[str] = set()
    kept = []
    for call in calls:
        key = call_key(call.function.name, call.function.arguments)
        if key not in seen:
            seen.add(key)
            kept.append(call)
    return kept


def repeated_in_reply(calls: list[ToolCall]) -> dict[str, str]:
    """Each call identical to one before it in the same reply: its id, and that call's."""
    first: dict[str, str] = {}
    repeats = {}
    for call in calls:
        key = call_key(call.function.name, call.function.arguments)
        if key in first:
            repeats[call.id] = first[key]
        else:
            first[key] = call.id
    return repeats


def ran_before(call: ToolCall, ran: list[RanCall]) -> RanCall | None:
    """The call that ran this turn that `call` is identical to, if one did."""
    key = call_key(call.function.name, call.function.arguments)
    return next((r for r in reversed(ran) if r.key == key), None)


def restated(calls: list[ToolCall], ran: list[RanCall]) -> dict[str, RanCall]:
    """Each call identical to one that ran this turn: its id, and that call."""
    return {c.id: earlier for c in calls if (earlier := ran_before(c, ran)) is not None}


def ran_call(name: str, arguments: dict | str, call_id: str) -> RanCall:
    return RanCall(tool=name, key=call_key(name, arguments), call_id=call_id)


def repeat_observation(first_id: str) -> str:
    return (f"Not run: the same call as {first_id} in this reply (the same tool and arguments), "
            "which runs once; its result is that call's.")


def restated_observation(ran: RanCall, messages: list[ChatMessage]) -> str:
    """What the model reads for a call it restated: that it ran this turn, and its result."""
    result = next((m.content for m in reversed(messages)
                   if m.role == "tool" and m.tool_call_id == ran.call_id), None)
    told = (f"Its result: {clip_bytes(result, MAX_RESULT_BYTES, 'result')}" if result is not None
            else "Its result is earlier in this conversation.")
    return (f"Not run again: {ran.tool} with these arguments already ran in this turn (call "
            f"{ran.call_id}). {told} Do not call it again for the same thing; if the task is "
            "done, answer the user.")
