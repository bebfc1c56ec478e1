"""Traces from workflow code, replay-safe (DESIGN "Telemetry").

A turn is one trace: its `invoke_agent` span is the root (or, for a subagent, a child of its
parent's `execute_tool agent__<name>` span), and the model calls and tool runs of the turn are its
children, emitted by the activities with the real durations. The workflow emits what only it
sees whole: the turn, an approval or a question waited for, a subagent's run.

The ids are drawn when the turn begins from a random of their own (`workflow.new_random`, which
leaves `workflow.random()` and so the idempotency keys untouched), kept in the turn's state, and so
the same on every replay and after continue-as-new. A span is emitted once its end is known, as
a completed span, and only while not replaying: a replay, or a new worker after a crash, emits
nothing the first worker emitted, and a child emitted before a crash still finds its parent,
whose ids did not change.

Emitting goes through an extern function the worker's `TelemetryInterceptor` registers (never
I/O here: the worker's span processor queues it). Without tracing nothing is registered, and
every call here is a lookup that finds nothing.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Container
from dataclasses import dataclass, field
from datetime import datetime
from random import Random
from typing import Any

from temporalio import workflow

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


def emit(name: str, span: str | None, parent: str | None, start: datetime, end: datetime,
         attributes: dict[str, Any], error: str | None = None,
         content: dict[str, Any] | None = None, links: list[str] | None = None) -> None:
    """Emit a completed span (`span` its traceparent, `parent` its parent's; `links`: spans of
    other traces it relates to), unless replaying or tracing is off."""
    own = parse_traceparent(span)
    if own is None or not workflow.in_workflow() or workflow.unsafe.is_replaying():
        return
    sink = workflow.extern_functions().get(EMIT_SPAN)
    if sink is None:
        return
    up = parse_traceparent(parent)
    sink(SpanRecord(name=name, trace_id=own[0], span_id=own[1], parent_id=up[1] if up else None,
                    start_ns=ns(start), end_ns=max(ns(end), ns(start)),
                    attributes={k: v for k, v in attributes.items() if v is not None},
                    error=error, content=content or {},
                    links=[ids for ids in map(parse_traceparent, links or []) if ids]))


def trace_id_of(span: str | None) -> str | None:
    parsed = parse_traceparent(span)
    return f"{parsed[0]:032x}" if parsed else None


# ----- metrics: Temporal's workflow meter records nothing while replaying -----

# Every label value is a time series of its own: one from outside data stays one of a few.
UNKNOWN_TOOL = "(unknown)"
MAX_LABEL_CHARS = 64


def label(value: str) -> str:
    return value[:MAX_LABEL_CHARS]


def tool_label(name: str, catalog: Container[str]) -> str:
    """A call's tool label: its name if the conversation's catalog has that tool, else one label
    for every name a model invents."""
    return label(name) if name in catalog else UNKNOWN_TOOL


def count_tool_call(tool: str, status: str) -> None:
    """A tool call's observation: ok, error, rejected, timed_out (`tool`: its `tool_label`)."""
    if workflow.in_workflow():
        workflow.metric_meter().create_counter(
            "agent_tool_calls", "tool calls by tool and outcome").add(
            1, {"tool": label(tool), "outcome": status})


def approval_waited(tool: str, outcome: str, seconds: float) -> None:
    """How long a call waited for its decision, by tool (one of the catalog's) and outcome."""
    if workflow.in_workflow():
        workflow.metric_meter().create_histogram_float(
            "agent_approval_wait", "how long a call waited for a decision", "s").record(
            seconds, {"tool": label(tool), "outcome": outcome})


def approval_requested(tool: str) -> None:
    if workflow.in_workflow():
        workflow.metric_meter().create_counter(
            "agent_approvals_requested", "calls that came to wait for a decision").add(
            1, {"tool": label(tool)})
