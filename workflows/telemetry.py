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

from datetime import datetime
from typing import Any

from temporalio import workflow

from ..rules.tracing import EMIT_SPAN, SpanRecord, label, ns, parse_traceparent


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


# ----- metrics: Temporal's workflow meter records nothing while replaying -----

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
