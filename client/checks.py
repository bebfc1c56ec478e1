"""What a request must be before it is sent, and how a failure reads: the errors the CLI and
the API answer with, conversation ids, what a payload may hold, and a decision's targets."""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel

from ..contract.bounds import DEFAULT_MESSAGE_BYTES, MAX_CONTEXT_BUDGET_TOKENS
from ..rules.schemas import MAX_DEPTH


class CliError(Exception):
    """A failure to report as one line (the CLI exits 1)."""


class NotFound(CliError):
    """No such conversation (or no such running one, for what needs it running)."""


class NoWorker(CliError):
    """No worker answered within the deadline."""


class Unavailable(CliError):
    """A store the request needs cannot be reached (the memory store)."""


class UsageError(Exception):
    """A request that cannot be sent as it is (the CLI exits 2)."""


# A conversation id a user may choose: it is a path segment of the REST API, a Temporal workflow id
# and a log field, so only characters that are plain in all three. A subagent's id has a `/` (its
# parent's id, then its call), so no user can take one.
CONVERSATION_ID_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9_.:@+=-]{0,199}$"
_CONVERSATION_ID = re.compile(CONVERSATION_ID_PATTERN)


def check_conversation_id(cid: str) -> str | None:
    """Why `cid` cannot name a new conversation, or None."""
    if _CONVERSATION_ID.fullmatch(cid):
        return None
    return (f"a conversation id is 1-200 letters, digits and _ . : @ + = - (not starting with "
            f". : @ + = or -), not {cid[:60]!r}{'…' if len(cid) > 60 else ''}")


# The nesting a tool's arguments may have, so what the conversation accepts can also be sent.
MAX_JSON_DEPTH = MAX_DEPTH


def unsendable(value: Any) -> str | None:
    """Why a request cannot travel in a Temporal payload, or None: text that is not valid
    Unicode (a lone surrogate such as "\\ud800", valid in JSON but not in UTF-8), or nesting deeper
    than MAX_JSON_DEPTH. Checked before anything is sent, so such input is a usage error with
    nothing changed, not a failure in the middle of sending it."""
    if isinstance(value, BaseModel):
        value = value.model_dump()
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if depth > MAX_JSON_DEPTH:
            return f"the request nests deeper than {MAX_JSON_DEPTH} levels"
        if isinstance(item, str):
            try:
                item.encode()
            except UnicodeEncodeError:
                return "the request holds text that is not valid Unicode (a lone surrogate)"
        elif isinstance(item, dict):
            stack.extend((v, depth + 1) for v in (*item.keys(), *item.values()))
        elif isinstance(item, list | tuple):
            stack.extend((v, depth + 1) for v in item)
    return None


def check_sendable(value: Any) -> None:
    reason = unsendable(value)
    if reason is not None:
        raise UsageError(reason)


class Refused(Exception):
    """What the conversation refused, or would refuse: nothing changed (the CLI exits 1)."""


def targets(call_ids: list[str], all_: bool, all_name: str) -> tuple[list[str], bool]:
    """A decision names its calls, or all of them (`all_name`: how the caller spells it)."""
    if bool(call_ids) == all_:
        raise UsageError(f"name the call ids to decide, or {all_name}")
    return call_ids, all_


MIN_CONTEXT_TOKENS = 256  # a context budget smaller than this holds no useful prompt


def budget_of(context_tokens: int | None) -> dict[str, int]:
    """A start's context budget, as `ConversationInput` takes it (none given: its default)."""
    if context_tokens is None:
        return {}
    if not MIN_CONTEXT_TOKENS <= context_tokens <= MAX_CONTEXT_BUDGET_TOKENS:
        raise UsageError(f"the context budget must be {MIN_CONTEXT_TOKENS}-"
                         f"{MAX_CONTEXT_BUDGET_TOKENS} tokens, not {context_tokens}")
    return {"context_budget_tokens": context_tokens}


DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
# bounded repeats: each place it is tried at costs a few steps, whatever the text (no backtracking
# over a long run of digits: tests/e2e/test_hostile_patterns.py)
_DURATION = re.compile(r"(\d{1,9}(?:\.\d{1,6})?)([smhd])")
MAX_DURATION_CHARS = 40


def parse_duration(text: str) -> float:
    """`90s`, `10m`, `2h`, `1d` or a sum of them (`1h30m`) as seconds; UsageError otherwise."""
    given = text.strip().lower()
    parts = _DURATION.findall(given) if len(given) <= MAX_DURATION_CHARS else []
    if not given or "".join(n + u for n, u in parts) != given:
        raise UsageError(f"a duration is a number and a unit (s, m, h or d), as in 90s, 10m, 2h "
                         f"or 1h30m; not {text[:40]!r}")
    seconds = sum(float(n) * DURATION_UNITS[u] for n, u in parts)
    if seconds <= 0:
        raise UsageError(f"a duration must be more than 0 s, not {text[:40]!r}")
    return seconds


def new_conversation_id() -> str:
    return f"conv-{uuid.uuid4().hex[:12]}"


def clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def max_message_bytes_of(env: Mapping[str, str]) -> int:
    """`AGENT_MAX_MESSAGE_BYTES`: the largest message to send, at most the default."""
    raw = env.get("AGENT_MAX_MESSAGE_BYTES")
    if not raw:
        return DEFAULT_MESSAGE_BYTES
    try:
        value = int(raw)
    except ValueError:
        raise UsageError(f"AGENT_MAX_MESSAGE_BYTES must be a number of bytes, not {raw!r}") from None
    if not 1 <= value <= DEFAULT_MESSAGE_BYTES:
        raise UsageError(f"AGENT_MAX_MESSAGE_BYTES must be between 1 and {DEFAULT_MESSAGE_BYTES}")
    return value
