"""The worker's traces and metrics (DESIGN "Telemetry").

Traces are on when `OTEL_EXPORTER_OTLP_ENDPOINT` (or `..._TRACES_ENDPOINT`) is set: OTLP over
HTTP/protobuf unless `OTEL_EXPORTER_OTLP_PROTOCOL=grpc`, with the other standard `OTEL_*`
variables read by the exporter and the batch processor themselves. One tracer provider serves
every span: those the activities open (`activities.telemetry`) and the completed spans workflow
code hands over (`workflows.telemetry`), whose ids it chose itself (`ChosenIds`).

`TelemetryInterceptor` carries the turn's span to each activity it schedules (the `traceparent`
header), registers the sink workflow code emits through, and, after an activity, flushes its
spans: a worker killed a moment later has lost none of them.

Metrics: `AGENT_METRICS_ADDRESS` (host:port) serves Prometheus text on `/metrics` from Temporal's
runtime: the SDK's own worker metrics and the agent's, recorded on Temporal's meters (the
workflow's records nothing while replaying).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import structlog
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    SpanExporter,
    SpanProcessor,
)
from opentelemetry.sdk.trace.id_generator import IdGenerator, RandomIdGenerator
from opentelemetry.trace import (
    Link,
    NonRecordingSpan,
    SpanContext,
    Status,
    StatusCode,
    TraceFlags,
)
from temporalio import workflow
from temporalio.converter import default
from temporalio.runtime import PrometheusConfig, Runtime, TelemetryConfig
from temporalio.worker import (
    ActivityInboundInterceptor,
    ExecuteActivityInput,
    Interceptor,
    StartActivityInput,
    StartLocalActivityInput,
    WorkflowInboundInterceptor,
    WorkflowInterceptorClassInput,
    WorkflowOutboundInterceptor,
)

from ..activities import telemetry as activity_telemetry
from ..rules.tracing import EMIT_SPAN, TRACEPARENT, SpanRecord, parse_traceparent

log = structlog.get_logger("telemetry")
SERVICE_NAME = "durable-react-agent"  # the distribution's name: OTEL_SERVICE_NAME's default
FLUSH_TIMEOUT_MS = 1_000
DEFAULT_BSP_DELAY_MS = 500  # spans leave within half a second unless OTEL_BSP_SCHEDULE_DELAY


class TelemetryError(ValueError):
    """Telemetry settings the worker cannot start with."""


class ChosenIds(IdGenerator):
    """Random ids, except for a span whose ids the workflow chose (`Tracing.emit`)."""

    chosen: ContextVar[tuple[int, int] | None] = ContextVar("agent_chosen_ids", default=None)

    def __init__(self) -> None:
        self._random = RandomIdGenerator()

    def generate_span_id(self) -> int:
        ids = self.chosen.get()
        return ids[1] if ids else self._random.generate_span_id()

    def generate_trace_id(self) -> int:
        ids = self.chosen.get()
        return ids[0] if ids else self._random.generate_trace_id()


@dataclass
class Tracing:
    provider: TracerProvider
    capture_content: bool = False

    def __post_init__(self) -> None:
        self.tracer = self.provider.get_tracer("durable_react_agent")
        self._flushing = threading.Lock()

    @classmethod
    def from_env(cls, env: Mapping[str, str] = os.environ,
                 exporter: SpanExporter | None = None,
                 processor: SpanProcessor | None = None) -> Tracing | None:
        """Tracing as the environment asks, or None when it is off. `exporter` or `processor`
        replace the OTLP one (tests)."""
        wanted = env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or env.get(
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        off = (env.get("OTEL_SDK_DISABLED", "").lower() == "true"
               or env.get("OTEL_TRACES_EXPORTER", "").lower() == "none")
        if (not wanted and exporter is None and processor is None) or off:
            return None
        provider = TracerProvider(
            resource=Resource.create({"service.name": env.get("OTEL_SERVICE_NAME")
                                      or SERVICE_NAME}),
            id_generator=ChosenIds())
        if processor is None:  # OTEL_BSP_* as set; the delay, ours unless set
            processor = BatchSpanProcessor(
                exporter or otlp_exporter(env),
                schedule_delay_millis=None if env.get("OTEL_BSP_SCHEDULE_DELAY")
                else DEFAULT_BSP_DELAY_MS)
        provider.add_span_processor(processor)
        return cls(provider, activity_telemetry.capture_content(dict(env)))

    def install(self) -> None:
        """The global provider (one for every span: other libraries' spans nest in ours), and
        the activities' tracer."""
        trace.set_tracer_provider(self.provider)
        activity_telemetry.install(self.tracer, self.capture_content)

    def emit(self, record: SpanRecord) -> None:
        """A completed span from workflow code, with the ids and times it chose."""
        parent = Context() if record.parent_id is None else remote_parent(record.trace_id,
                                                                          record.parent_id)
        attributes = dict(record.attributes)
        if self.capture_content and record.content:
            attributes.update(activity_telemetry.content_attributes(record.content))
        links = [Link(remote_span(trace_id, span_id)) for trace_id, span_id in record.links]
        token = ChosenIds.chosen.set((record.trace_id, record.span_id))
        try:
            span = self.tracer.start_span(record.name, context=parent, attributes=attributes,
                                          start_time=record.start_ns, links=links)
        finally:
            ChosenIds.chosen.reset(token)
        if record.error:
            span.set_status(Status(StatusCode.ERROR, record.error[:200]))
        span.end(end_time=record.end_ns)

    def flush_soon(self) -> None:
        """Send what is queued now, in the background: an activity's result never waits on the
        collector (one that is down or slow costs its spans, not the conversation), and one
        flush at a time."""
        if not self._flushing.acquire(blocking=False):
            return

        def flush() -> None:
            try:
                self.provider.force_flush(FLUSH_TIMEOUT_MS)
            finally:
                self._flushing.release()

        threading.Thread(target=flush, name="agent-trace-flush", daemon=True).start()

    def shutdown(self) -> None:
        self.provider.shutdown()


def remote_span(trace_id: int, span_id: int) -> SpanContext:
    """A span another process (or the workflow) started: sampled, as ours all are."""
    return SpanContext(trace_id, span_id, is_remote=True,
                       trace_flags=TraceFlags(TraceFlags.SAMPLED))


def remote_parent(trace_id: int, span_id: int) -> Context:
    """A context whose current span is that one: what a new span is started under."""
    return trace.set_span_in_context(NonRecordingSpan(remote_span(trace_id, span_id)))


def otlp_exporter(env: Mapping[str, str]) -> SpanExporter:
    """The OTLP exporter `env` asks for (its other OTEL_* settings, headers and timeouts, the
    exporter reads from the process's environment itself)."""
    protocol = (env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
                or env.get("OTEL_EXPORTER_OTLP_PROTOCOL") or "http/protobuf").strip().lower()
    endpoint = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or None
    base = env.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    if protocol == "grpc":
        try:
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (  # noqa: PLC0415
                OTLPSpanExporter as GrpcExporter,
            )
        except ImportError:
            raise TelemetryError(
                "OTEL_EXPORTER_OTLP_PROTOCOL=grpc needs the gRPC exporter: pip install "
                "opentelemetry-exporter-otlp-proto-grpc") from None
        return GrpcExporter(endpoint=endpoint or base)
    if protocol != "http/protobuf":
        raise TelemetryError(f"OTEL_EXPORTER_OTLP_PROTOCOL must be http/protobuf or grpc, "
                             f"not {protocol!r}")
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import (  # noqa: PLC0415
        OTLPSpanExporter,
    )
    if endpoint is None and base:  # the base URL names the collector; traces have their path
        endpoint = base.rstrip("/") + "/v1/traces"
    return OTLPSpanExporter(endpoint=endpoint)


def metrics_runtime(env: Mapping[str, str] = os.environ) -> Runtime | None:
    """A Temporal runtime serving Prometheus on AGENT_METRICS_ADDRESS, or None."""
    address = env.get("AGENT_METRICS_ADDRESS", "").strip()
    if not address:
        return None
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise TelemetryError(f"AGENT_METRICS_ADDRESS must be host:port, not {address!r}")
    return Runtime(telemetry=TelemetryConfig(metrics=PrometheusConfig(
        bind_address=address, durations_as_seconds=True)))


# ----- carrying the turn's span to activities, and the sink of workflow code -----

class TelemetryInterceptor(Interceptor):
    def __init__(self, tracing: Tracing) -> None:
        self.tracing = tracing

    def workflow_interceptor_class(
        self, input: WorkflowInterceptorClassInput
    ) -> type[WorkflowInboundInterceptor]:
        input.unsafe_extern_functions[EMIT_SPAN] = self.tracing.emit
        return _TraceInbound

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _TraceActivity(next, self.tracing)


class _TraceInbound(WorkflowInboundInterceptor):
    def init(self, outbound: WorkflowOutboundInterceptor) -> None:
        super().init(_TraceOutbound(outbound))


class _TraceOutbound(WorkflowOutboundInterceptor):
    def start_activity(self, input: StartActivityInput) -> Any:
        return super().start_activity(_with_trace_parent(input))

    def start_local_activity(self, input: StartLocalActivityInput) -> Any:
        return super().start_local_activity(_with_trace_parent(input))


def _with_trace_parent(input: StartActivityInput | StartLocalActivityInput
                       ) -> StartActivityInput | StartLocalActivityInput:
    """The activity's input, with the span it belongs under (the running turn's) as a header."""
    current = getattr(workflow.instance(), "trace_parent", None)
    parent = current() if callable(current) else None
    if parent is not None:
        input.headers = {**input.headers,
                         TRACEPARENT: default().payload_converter.to_payload(parent)}
    return input


class _TraceActivity(ActivityInboundInterceptor):
    def __init__(self, next: ActivityInboundInterceptor, tracing: Tracing) -> None:
        super().__init__(next)
        self.tracing = tracing

    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        header = input.headers.get(TRACEPARENT)
        parent = None
        if header is not None:
            ids = parse_traceparent(default().payload_converter.from_payload(header, str))
            if ids is not None:
                parent = remote_parent(*ids)
        token = activity_telemetry.PARENT.set(parent)
        try:
            return await super().execute_activity(input)
        finally:
            activity_telemetry.PARENT.reset(token)
            if parent is not None:
                self.tracing.flush_soon()  # out before a crash could lose it
