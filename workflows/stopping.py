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
    """A tool call as loop detection sees it: the tool, its normalised args, its result."""

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


def call_record(tool: str, args: dict[str, Any], observation: str) -> CallRecord:
    """Args and results compare after case and whitespace are normalised; keys are sorted."""
    args_key = json.dumps(_normalise(args), sort_keys=True, separators=(",", ":"))
    result_key = hashlib.sha256(_normalise_text(observation).encode()).hexdigest()
    return CallRecord(tool=tool, args_key=args_key, result_key=result_key)


def is_looping(records: list[CallRecord]) -> bool:
    """The same tool, with the same args and the same result, twice in a row."""
    return len(records) >= 2 and records[-1] == records[-2]


def over_budget(usage: Usage, max_total_tokens: int | None) -> bool:
    return max_total_tokens is not None and usage.total_tokens >= max_total_tokens
