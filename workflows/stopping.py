"""When a turn must stop on its own: loops and token budgets. Pure functions."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any

from workflows.models import Usage

_SPACES = re.compile(r"\s+")


@dataclass(frozen=True)
class CallRecord:
    """A tool call as loop detection sees it: the tool, and digests of its normalised args and
    of its result (small, whatever the sizes)."""

    tool: str
    args_key: str
    result_key: str


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


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def call_record(tool: str, args: dict[str, Any], observation: str) -> CallRecord:
    """Args and results compare after case and whitespace are normalised; keys are sorted."""
    args_json = json.dumps(_normalise(args), sort_keys=True, separators=(",", ":"))
    return call_record_of_key(tool, args_json, _digest(_normalise_text(observation)))


def call_record_of_key(tool: str, args_json: str, result_key: str) -> CallRecord:
    """The record of normalised args (as JSON) and a result digest, as earlier versions kept them."""
    return CallRecord(tool=tool, args_key=_digest(args_json), result_key=result_key)


def is_looping(records: list[CallRecord]) -> bool:
    """The same tool, with the same args and the same result, twice in a row."""
    return len(records) >= 2 and records[-1] == records[-2]


def over_budget(usage: Usage, max_total_tokens: int | None,
                max_cost_usd: float | None = None) -> str | None:
    """Why the tokens or dollars are used up, or None. An unknown cost (an unpriced model)
    cannot exceed a budget: the usage's `cost_note` says why it is unknown."""
    if max_total_tokens is not None and usage.total_tokens >= max_total_tokens:
        return f"the conversation used its token budget ({max_total_tokens} tokens)"
    if max_cost_usd is not None and usage.cost_usd is not None and usage.cost_usd >= max_cost_usd:
        return (f"the conversation used its cost budget ({dollars(usage.cost_usd)} of "
                f"{dollars(max_cost_usd)})")
    return None


def dollars(cost: float | None, note: str | None = None) -> str:
    """A cost as people budget it (`$0.000197`), or why it is unknown."""
    if cost is None:
        return f"unknown ({note})" if note else "unknown"
    return f"${cost:.10f}".rstrip("0").rstrip(".") if cost else "$0"
