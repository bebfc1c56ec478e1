"""Byte bounds of everything a conversation keeps, and the pure helpers that enforce them.

Sizes are JSON bytes, the way Temporal's payloads carry them (a control character costs six), so a
bound here is a bound on the payload. Together the sections' bounds keep the state carried at
continue-as-new (`workflows.handover`) under `CARRY_BUDGET_BYTES`, half of Temporal's 2 MiB payload
limit, whatever the conversation did; `tests/rules/test_carry_bound.py` measures the worst case.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from pydantic import BaseModel

KiB = 1024
CARRY_BUDGET_BYTES = 1024 * KiB

# What comes in from outside, at the edge.
DEFAULT_MESSAGE_BYTES = 256 * KiB  # a user message (`start`, `say`), unless configured lower
MAX_SYSTEM_PROMPT_BYTES = 32 * KiB
MAX_OUTPUT_SCHEMA_BYTES = 16 * KiB  # a typed result's JSON Schema (sent with every model call)
MAX_OBSERVATION_BYTES = 64 * KiB  # the ceiling of `max_observation_bytes`
MAX_FULL_RESULT_BYTES = 32 * 1024 * KiB  # a tool's whole result, kept by reference (then cut)
MAX_CONTEXT_BUDGET_TOKENS = 128_000  # the ceiling of `context_budget_tokens` (a model request < 2 MiB)
MAX_MODEL_NAME_BYTES = 256
MAX_AUTO_APPROVE = 64
MAX_RESUME_BYTES = 4 * KiB  # what a tool that asked keeps to pick up where it was (`NeedsInput`)

# What the model sends, as kept in the context.
MAX_REPLY_TEXT_BYTES = 32 * KiB  # an assistant message's text (and the turn's final answer)
MAX_CALL_ARGS_BYTES = 32 * KiB  # all tool-call arguments of one reply
MAX_CALLS_PER_REPLY = 64
MAX_CALL_ID_BYTES = 64
MAX_SUMMARY_BYTES = 16 * KiB

# Sections of the carried state.
INBOX_BYTES = 256 * KiB
MAX_QUEUED_MESSAGES = 64
CONTEXT_CARRY_BYTES = 400 * KiB
CATALOG_BYTES = 128 * KiB
AUDIT_BYTES = 40 * KiB
MAX_AUDIT_RECORDS = 500
MAX_AUDIT_RECORD_BYTES = 8 * KiB  # a step with more actions lists the first ones
STREAM_CARRY_BYTES = 32 * KiB
MAX_STREAM_ITEMS = 1000  # in a run; each item is clipped (`MAX_EVENT_TEXT_BYTES`)
MAX_REMEMBERED_SIGNALS = 64
MAX_WAITING_REQUESTS = 16  # decisions and answers waiting for the result they name
MAX_REMEMBERED_CALLS = 64
MAX_SEEN_CALL_IDS = 128
MAX_TURN_DECISIONS = 32
MAX_TURN_SUMMARIES = 20
MAX_TOOLS_USED = 64  # tool names a turn lists as used
MAX_TOOLS_LISTED = 8  # of those, kept in the turn's summary
MAX_CHILDREN = 16  # subagents a turn lists
MAX_NOTICES = 8
MAX_TOOL_NAME_BYTES = 64  # OpenAI's own limit on function names

# Clips of single values, in JSON bytes.
MAX_REQUEST_ID_BYTES = 128
MAX_APPROVER_BYTES = 64
MAX_REASON_BYTES = 256
MAX_ERROR_BYTES = 512
MAX_THOUGHT_BYTES = 2048
MAX_EVENT_TEXT_BYTES = 2048
TOKEN_ITEM_CHARS = 1024  # of a model's text in one item of the live stream
MAX_PREVIEW_BYTES = 512  # tool arguments as shown in events and audit records

T = TypeVar("T")


def valid_text(text: str) -> str:
    """`text` as valid Unicode: a lone surrogate ("\\ud800": valid in JSON's escapes and in a
    Python string, but not in UTF-8, so no payload, hash or size of it can be made) becomes
    U+FFFD. Outside text (model output, tool and MCP results) passes here where it enters."""
    try:
        text.encode()
    except UnicodeEncodeError:
        return "".join("\ufffd" if "\ud800" <= c <= "\udfff" else c for c in text)
    return text


def valid_json(value: Any) -> Any:
    """A JSON value (as `json.loads` makes it) with every string, keys too, made `valid_text`."""
    try:
        json.dumps(value, ensure_ascii=False).encode()
    except UnicodeEncodeError:
        return _valid(value)
    except (TypeError, ValueError, RecursionError):  # not plain JSON: left to the caller's check
        return value
    return value


def _valid(value: Any) -> Any:
    if isinstance(value, str):
        return valid_text(value)
    if isinstance(value, dict):
        return {valid_text(k) if isinstance(k, str) else k: _valid(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_valid(v) for v in value]
    return value


def canonical_json(value: Any) -> str:
    """The one JSON text of a value: sorted keys, no spaces, text as it is (for hashes)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def json_size(value: Any) -> int:
    """The bytes `value` takes in a JSON payload."""
    if isinstance(value, BaseModel):
        return len(value.__pydantic_serializer__.to_json(value))
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str).encode())


def text_size(text: str) -> int:
    """The bytes `text` takes inside a JSON payload (escapes counted, quotes not)."""
    return json_size(text) - 2


def _prefix(text: str, limit: int) -> str:
    """The longest prefix of `text` whose `text_size` is at most `limit`."""
    low, high = 0, min(len(text), max(limit, 0))
    while low < high:
        mid = (low + high + 1) // 2
        if text_size(text[:mid]) <= limit:
            low = mid
        else:
            high = mid - 1
    return text[:low]


def clip(text: str | None, limit: int) -> str | None:
    """`text` within `limit` bytes of JSON, ending in an ellipsis when cut."""
    if text is None or len(text) * 6 <= limit or text_size(text) <= limit:
        return text
    return _prefix(text, limit - 3) + "…"


def clip_bytes(text: str, limit: int, what: str = "text") -> str:
    """`text` within `limit` bytes of JSON, saying how much was cut."""
    size = text_size(text)
    if size <= limit:
        return text
    marker = f"…[cut: {what} of {size} bytes]"
    return _prefix(text, limit - text_size(marker)) + marker


def truncate_observation(text: str, max_bytes: int) -> tuple[str, int | None]:
    """An observation cut to `max_bytes` of JSON (as everything here is measured; control
    characters and quotes cost their escapes) with a clear marker, and its full size if cut."""
    if len(text) * 6 <= max_bytes or (size := text_size(text)) <= max_bytes:
        return text, None
    return _prefix(text, max_bytes) + (
        f"\n…[truncated: {size} bytes, showing the first {max_bytes}]"), size


def preview_args(args: dict[str, Any]) -> dict[str, Any]:
    """Tool arguments small enough to show in an event or an audit record."""
    text = json.dumps(args, ensure_ascii=False, separators=(",", ":"))
    if text_size(text) <= MAX_PREVIEW_BYTES:
        return args
    return {"(arguments)": clip(text, MAX_PREVIEW_BYTES)}


def keep_last(items: list[T], limit: int) -> list[T]:
    return items[-limit:] if len(items) > limit else items


class Tail(Generic[T]):
    """A list of the conversation state that keeps its newest items within a count and a byte
    budget. The list is the state's own object, changed in place; sizes are kept beside it."""

    def __init__(self, items: list[T], max_items: int, max_bytes: int | None,
                 size: Callable[[T], int] = json_size):
        self.items = items
        self._size = size
        self.max_items = max_items
        self.max_bytes = max_bytes
        self._sizes: deque[int] = deque(size(i) for i in items)
        self.bytes = sum(self._sizes)

    def fits(self, size: int, others: int = 0) -> bool:
        """Whether an item of `size` bytes can join without pushing another out (with `others`
        items kept beside the list, within its count, whose bytes `size` holds)."""
        return len(self.items) + others < self.max_items and (
            self.max_bytes is None or self.bytes + size <= self.max_bytes
        )

    def append(self, item: T, size: int | None = None) -> list[T]:
        """Add `item`; return the oldest items pushed out to stay within the budget."""
        size = self._size(item) if size is None else size
        self.items.append(item)
        self._sizes.append(size)
        self.bytes += size
        dropped = []
        while self.items and (
            len(self.items) > self.max_items
            or (self.max_bytes is not None and self.bytes > self.max_bytes)
        ):
            dropped.append(self.items.pop(0))
            self.bytes -= self._sizes.popleft()
        return dropped

    def pop_first(self) -> T:
        self.bytes -= self._sizes.popleft()
        return self.items.pop(0)

    def prepend(self, item: T) -> None:
        """Put `item` first, pushing nothing out (its caller checked the budget when it took it)."""
        size = self._size(item)
        self.items.insert(0, item)
        self._sizes.appendleft(size)
        self.bytes += size

    def pop_last(self) -> T:
        self.bytes -= self._sizes.pop()
        return self.items.pop()


# When a run hands over to a fresh one (continue-as-new) for the size of its history: well below
# Temporal's hard limits (51,200 events, 50 MB) and well above the server's early suggestion
# (4,096 events or 4 MB), so that a turn of 1,000 small steps runs in one run. A step of the delta
# context adds about 12 events and 3 KB. `continue_as_new_after_events` may lower the count.
HANDOVER_EVENTS = 20_000
MAX_HANDOVER_EVENTS = 40_000
HANDOVER_BYTES = 20 * 2**20


@dataclass(frozen=True)
class Limits:
    """The bounds a run enforces where they change what it does (`bounded`, what every run
    enforces). `None` is no bound, for the rules' own tests."""

    message_bytes: int | None = None  # a user message, or the answer to a question
    inbox_bytes: int | None = None
    audit_bytes: int | None = None  # when audit records fall off (the memo records them)
    catalog_bytes: int | None = None  # tool schemas kept from discovery
    args_bytes: int | None = None  # a reply's tool-call arguments, or a call's edited args
    calls_per_reply: int | None = None
    auto_approve: int | None = None  # names an approval policy may list

    @classmethod
    def bounded(cls, message_bytes: int) -> Limits:
        return cls(
            message_bytes=min(max(message_bytes, 1), DEFAULT_MESSAGE_BYTES), inbox_bytes=INBOX_BYTES,
            audit_bytes=AUDIT_BYTES, catalog_bytes=CATALOG_BYTES, args_bytes=MAX_CALL_ARGS_BYTES,
            calls_per_reply=MAX_CALLS_PER_REPLY, auto_approve=MAX_AUTO_APPROVE,
        )


def check_message(text: str, limit: int | None) -> str | None:
    """Why a user message is refused, or None: empty, or over `limit` bytes."""
    if not text.strip():
        return "the message is empty"
    size = text_size(text)
    if limit is not None and size > limit:
        return f"the message is {size:,} bytes, over the limit of {limit:,} bytes"
    return None


def keep_within(items: list[T], max_bytes: int | None) -> tuple[list[T], list[T]]:
    """The first items whose sizes fit `max_bytes` together, and the rest."""
    if max_bytes is None:
        return items, []
    total = 0
    for i, item in enumerate(items):
        total += json_size(item) + 1
        if total > max_bytes:
            return items[:i], items[i:]
    return items, []
