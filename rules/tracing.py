"""Trace context and span data, pure: what the workflow emits spans with (`workflows.telemetry`),
what the worker turns into OpenTelemetry spans (`worker.telemetry`), and the labels metrics
keep few. W3C `traceparent`s are parsed in the one form only: a caller's header reaches span ids
and hashes."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Container
from dataclasses import dataclass, field
from datetime import datetime
from random import Random
from typing import Any

EMIT_SPAN = "agent_emit_span"  # the extern function's name
TRACEPARENT = "traceparent"  # the W3C header an activity's parent span travels in
# Version 00 exactly as W3C writes it: lowercase hex, fixed lengths (`int(x, 16)` alone would
# take `+`, `0x`, `_`, spaces and uppercase too).
W3C_TRACEPARENT = re.compile(r"00-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}")


@dataclass
class SpanRecord:
    """A completed span, as plain data: what the worker turns into an OpenTelemetry span."""

    name: str
    trace_id: int
    span_id: int
    parent_id: int | None
    start_ns: int
    end_ns: int
    attributes: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    # message content (gen_ai.input.messages...), kept only when the worker captures content
    content: dict[str, Any] = field(default_factory=dict)
    links: list[tuple[int, int]] = field(default_factory=list)  # (trace id, span id) of others


def traceparent(trace_id: int, span_id: int) -> str:
    return f"00-{trace_id:032x}-{span_id:016x}-01"


def parse_traceparent(value: str | None) -> tuple[int, int] | None:
    """(trace id, span id) of a W3C traceparent of version 00 with non-zero ids, or None for
    anything else: a caller's header reaches span ids and hashes, so only the one form does."""
    match = W3C_TRACEPARENT.fullmatch(value) if isinstance(value, str) else None
    if match is None:
        return None
    trace_id, span_id = int(match[1], 16), int(match[2], 16)
    return (trace_id, span_id) if trace_id and span_id else None


def new_span(ids: Random, parent: str | None) -> str:
    """A traceparent for a new span: a child of `parent` (same trace), or a new trace's root."""
    parsed = parse_traceparent(parent)
    trace_id = parsed[0] if parsed else ids.getrandbits(128) or 1
    return traceparent(trace_id, ids.getrandbits(64) or 1)


def child_span(parent: str | None, key: str) -> str | None:
    """The traceparent of the span `key` names under `parent` (an approval of call_3, the run
    of a subagent): drawn from the two, so it is the same wherever and whenever it is asked."""
    parsed = parse_traceparent(parent)
    if parsed is None:
        return None
    digest = hashlib.sha256(f"{parent}/{key}".encode()).digest()
    return traceparent(parsed[0], int.from_bytes(digest[:8], "big") or 1)


def ns(at: datetime) -> int:
    return int(at.timestamp() * 1_000_000_000)


def trace_id_of(span: str | None) -> str | None:
    parsed = parse_traceparent(span)
    return f"{parsed[0]:032x}" if parsed else None


# ----- metric labels -----

# Every label value is a time series of its own: one from outside data stays one of a few.
UNKNOWN_TOOL = "(unknown)"
MAX_LABEL_CHARS = 64


def label(value: str) -> str:
    return value[:MAX_LABEL_CHARS]


def tool_label(name: str, catalog: Container[str]) -> str:
    """A call's tool label: its name if the conversation's catalog has that tool, else one label
    for every name a model invents."""
    return label(name) if name in catalog else UNKNOWN_TOOL


