"""Spans and metrics of the activities: `chat <model>` for a model call, `execute_tool <tool>` for
a tool run, under the span of the turn they belong to (its traceparent comes in the activity's
headers: `worker.telemetry.TelemetryInterceptor`), and the GenAI client metrics.

Off unless the worker installs a tracer (`install`): a span is then a no-op that costs a check.
Metrics go to Temporal's activity meter, which is a no-op without `AGENT_METRICS_ADDRESS`. A
conversation's caller chooses its `model`, so a metric labels a model only if the worker was
configured with it (`known_models`), else `(other)`: every label value is a time series.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from opentelemetry.context import Context
from opentelemetry.trace import Span, Status, StatusCode, Tracer
from temporalio import activity

from ..contract import Usage
from ..rules.tracing import label
from .settings import ActivitySettings

# The turn's span an activity runs under (set per activity from its headers), or None.
PARENT: ContextVar[Context | None] = ContextVar("agent_trace_parent", default=None)
CAPTURE_CONTENT = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
MAX_CONTENT_CHARS = 16_384  # of a content attribute (a prompt can be large)
OTHER_MODEL = "(other)"  # the label of every model the worker was not configured with


class _State:
    tracer: Tracer | None = None
    capture_content = False


def install(tracer: Tracer | None, capture_content: bool = False) -> None:
    """Trace activities with `tracer` (None: off)."""
    _State.tracer, _State.capture_content = tracer, capture_content


def capture_content(env: dict[str, str] | None = None) -> bool:
    """The GenAI semantic conventions' opt-in to message content on spans."""
    value = (env if env is not None else os.environ).get(CAPTURE_CONTENT, "")
    return value.strip().lower() in ("true", "1", "yes", "on")


@contextmanager
def span(name: str, attributes: dict[str, Any], content: dict[str, Any] | None = None
         ) -> Iterator[Span | None]:
    """A span under the turn's, or nothing when tracing is off or the activity has no turn
    (listing tools). An exception marks it as an error and goes on."""
    tracer = _State.tracer
    parent = PARENT.get()
    if tracer is None or parent is None:
        yield None
        return
    attrs = {k: v for k, v in attributes.items() if v is not None}
    if _State.capture_content and content:
        attrs.update(content_attributes(content))
    with tracer.start_as_current_span(name, context=parent, attributes=attrs,
                                      record_exception=True, set_status_on_exception=True) as s:
        yield s


def content_attributes(content: dict[str, Any]) -> dict[str, str]:
    """Message content as span attributes: strings as they are, the rest as JSON; clipped."""
    out = {}
    for key, value in content.items():
        if value is None:
            continue
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False,
                                                               default=str)
        out[key] = text[:MAX_CONTENT_CHARS]
    return out


def set_attributes(s: Span | None, attributes: dict[str, Any],
                   content: dict[str, Any] | None = None) -> None:
    if s is None:
        return
    s.set_attributes({k: v for k, v in attributes.items() if v is not None})
    if _State.capture_content and content:
        s.set_attributes(content_attributes(content))


def set_error(s: Span | None, description: str) -> None:
    if s is not None:
        s.set_status(Status(StatusCode.ERROR, description))


def usage_attributes(usage: Usage) -> dict[str, Any]:
    return {"gen_ai.usage.input_tokens": usage.prompt_tokens,
            "gen_ai.usage.output_tokens": usage.completion_tokens,
            "agent.cost_usd": usage.cost_usd}


class ModelCall:
    """A model call under way: its span, and what it used once answered."""

    def __init__(self, model: str, span: Span | None) -> None:
        self.model, self.span, self.usage = model, span, None
        self.started = time.monotonic()

    def answered(self, usage: Usage, attributes: dict[str, Any] | None = None,
                 content: dict[str, Any] | None = None) -> None:
        self.usage = usage
        set_attributes(self.span, {**(attributes or {}), **usage_attributes(usage)}, content)


@contextmanager
def model_call(model: str, label: str, attributes: dict[str, Any],
               content: dict[str, Any] | None = None) -> Iterator[ModelCall]:
    """A `chat <model>` span around a model call, and its duration, tokens and dollars in the
    metrics under `label` (its error type, when it fails)."""
    with span(f"chat {model}", {"gen_ai.operation.name": "chat", "gen_ai.request.model": model,
                                **attributes}, content) as s:
        call = ModelCall(model, s)
        try:
            yield call
        except Exception as err:
            model_call_measured(label, call.started, None, type(err).__name__)
            raise
    model_call_measured(label, call.started, call.usage, None)


# ----- metrics (Temporal's activity meter: Prometheus with AGENT_METRICS_ADDRESS) -----

def known_models(settings: ActivitySettings) -> frozenset[str]:
    """The model names a worker was configured with: its entries' (AGENT_MODELS, or
    OPENAI_MODEL), its profiles', those AGENT_PRICES prices, and OPENAI_MODEL's default."""
    return frozenset({ActivitySettings.openai_model,
                      *(e.model for e in settings.model_entries().entries.values()),
                      *(p.model for p in settings.profiles.agents.values() if p.model),
                      *settings.prices.overrides})


def model_label(model: str, known: frozenset[str]) -> str:
    return label(model) if model in known else OTHER_MODEL


def model_call_measured(label: str, started: float, usage: Usage | None, error: str | None,
                        operation: str = "chat") -> None:
    """A model call's duration, tokens and dollars, by model (`label`: its `model_label`)."""
    meter = activity.metric_meter()
    labels = {"gen_ai_operation_name": operation, "gen_ai_request_model": label}
    duration = meter.create_histogram_float(
        "gen_ai_client_operation_duration", "duration of a model call", "s")
    duration.record(time.monotonic() - started,
                    {**labels, **({"error_type": error} if error else {})})
    if usage is None:
        return
    tokens = meter.create_histogram("gen_ai_client_token_usage", "tokens of a model call",
                                    "{token}")
    tokens.record(usage.prompt_tokens, {**labels, "gen_ai_token_type": "input"})
    tokens.record(usage.completion_tokens, {**labels, "gen_ai_token_type": "output"})
    if usage.cost_usd:
        meter.create_histogram_float("agent_cost_usd", "dollars of a model call", "USD").record(
            usage.cost_usd, labels)


def count_memories(action: str, n: int) -> None:
    """Memories stored, recalled, evicted or forgotten (`agent_memories`, by action)."""
    if n > 0 and activity.in_activity():
        activity.metric_meter().create_counter(
            "agent_memories", "memories stored, recalled, evicted and forgotten", "{memory}"
        ).add(n, {"agent_memory_action": action})
