"""When a turn must stop on its own (loops, token budgets), and what a person's `stop` leaves of
the turn it cut. Pure functions."""

from __future__ import annotations

import json
import re
from typing import Any

from ..contract.models import ToolDefinition, Usage
from ..contract.state import CallRecord, call_record_of_key, digest
from ..contract.status import StreamEvent

_SPACES = re.compile(r"\s+")


def _normalise_text(text: str) -> str:
    return _SPACES.sub(" ", text).strip().lower()


def _normalise(value: Any) -> Any:
    if isinstance(value, str):
        return _normalise_text(value)
    if isinstance(value, dict):
        return {k: _normalise(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_normalise(v) for v in value]
    return value


def call_record(tool: str, args: dict[str, Any], observation: str) -> CallRecord:
    """Args and results compare after case and whitespace are normalised; keys are sorted."""
    args_json = json.dumps(_normalise(args), sort_keys=True, separators=(",", ":"))
    return call_record_of_key(tool, args_json, digest(_normalise_text(observation)))


def is_looping(records: list[CallRecord]) -> bool:
    """The same tool, with the same args and the same result, twice in a row."""
    return len(records) >= 2 and records[-1] == records[-2]


def over_budget(usage: Usage, max_total_tokens: int | None,
                max_cost_usd: float | None = None) -> str | None:
    """Why the tokens or dollars are used up, or None. A budget the usage cannot be measured
    against (a call of unknown price, an endpoint that reports no usage) stops the turn too:
    the caller asked for a cap, so it is never silently not enforced."""
    if max_total_tokens is not None:
        if usage.total_tokens >= max_total_tokens:
            return f"the conversation used its token budget ({max_total_tokens} tokens)"
        if usage.unmetered_calls:
            return (f"{usage.unmetered_calls} model call(s) reported no token usage, so the "
                    f"token budget ({max_total_tokens} tokens) cannot be enforced")
    if max_cost_usd is None:
        return None
    if usage.unpriced:  # a call with no usage reported is one of them
        why = usage.cost_note or "no price known"
        return (f"the cost of {usage.unpriced} model call(s) is unknown ({why}), so the cost "
                f"budget ({dollars(max_cost_usd)}) cannot be enforced; "
                f"{dollars(usage.known_cost)} is known")
    if usage.cost_usd is not None and usage.cost_usd >= max_cost_usd:
        return (f"the conversation used its cost budget ({dollars(usage.cost_usd)} of "
                f"{dollars(max_cost_usd)})")
    return None


def child_share(budget: float | None, used: float, reserved: float, starting: int
                ) -> float | None:
    """A subagent's share of a budget (None: no budget): what is neither used nor reserved by
    its running siblings, split evenly with the siblings of its round yet to start."""
    if budget is None:
        return None
    return max(budget - used - reserved, 0.0) / max(starting, 1)


def dollars(cost: float | None, note: str | None = None) -> str:
    """A cost as people budget it (`$0.000197`), or why it is unknown."""
    if cost is None:
        return f"unknown ({note})" if note else "unknown"
    return f"${cost:.10f}".rstrip("0").rstrip(".") if cost else "$0"


# ----- a person's stop -----

STOPPED = "the turn was stopped"


def said_so_far(events: list[StreamEvent], turn: int, step: int) -> str:
    """What a model call of `turn`'s `step` had streamed when it was cut: its token events in
    order, after the last reset (a later attempt, or a fallback, starts the text again)."""
    text: list[str] = []
    for event in events:
        if event.turn != turn or event.step != step:
            continue
        if event.kind == "reset":
            text.clear()
        elif event.kind == "token" and event.text:
            text.append(event.text)
    return "".join(text)


def interrupted_reply(said: str) -> str:
    """The cut reply as the context keeps it: the next turn's model knows what was said, and
    that it was cut."""
    return f"{said}\n\n[interrupted: {STOPPED}]"


def stopped_call(tool: ToolDefinition, key: str, why: str) -> str:
    """What the model reads of a call that was running when the turn was stopped or ended. A
    write that may run only once is not abandoned silently: it may have run, under its key."""
    if tool.risk == "safe" or tool.retry_safe:
        return f"interrupted: {why}"
    return (f"stopped: {tool.name} may have run ({why} while it ran; idempotency key {key}): "
            "check before calling it again")
