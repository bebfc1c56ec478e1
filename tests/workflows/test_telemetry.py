"""Traces and metrics (DESIGN "Telemetry"): the span tree of real conversations in the SDK's
in-memory exporter (one trace per turn, GenAI names and attributes, approvals, subagents nested,
continue-as-new, nothing from a replay); OTLP over HTTP from an `agent-worker` that is
SIGKILLed while it waits for an approval, to a receiver the test runs; and `/metrics` scraped
and parsed as Prometheus would."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Iterator
from random import Random

import httpx
import pytest
import pytest_asyncio
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from temporalio.client import Client
from temporalio.worker import Replayer

from durable_react_agent.activities import telemetry as activity_telemetry
from durable_react_agent.activities.profiles import Profiles
from durable_react_agent.contract import ConfirmRequest, EndRequest, SayRequest
from durable_react_agent.rules.tracing import (
    SpanRecord,
    child_span,
    new_span,
    parse_traceparent,
    traceparent,
)
from durable_react_agent.testing import ScriptedModelServer, ScriptedReply
from durable_react_agent.worker.app import build_worker
from durable_react_agent.worker.telemetry import (
    TelemetryError,
    TelemetryInterceptor,
    Tracing,
    metrics_runtime,
)
from durable_react_agent.workflows.conversation import ConversationWorkflow
from durable_react_agent.workflows.signal_guard import SignalGuard
from tests.fake_tools import registry_with_test_tools
from tests.helpers import (
    reaches,
    replay,
    script,
    settled,
    start,
    tool_call,
    unique,
    workflow_runner,
)
from tests.subagent_support import PROFILES, delegate


@pytest.fixture(scope="module")
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    yield exporter
    activity_telemetry.install(None)


@pytest_asyncio.fixture(scope="module")
async def traced_queue(client: Client, activity_settings, spans: InMemorySpanExporter
                       ) -> AsyncIterator[tuple[str, Tracing]]:
    """A worker traced into memory, with the subagent profiles."""
    tracing = Tracing.from_env({}, processor=SimpleSpanProcessor(spans))
    assert tracing is not None
    activity_telemetry.install(tracing.tracer)  # (the global provider is left alone in tests)
    queue = unique("traced")
    settings = dataclasses.replace(activity_settings, profiles=Profiles(PROFILES))
    async with httpx.AsyncClient(timeout=10) as http:
        async with build_worker(client, queue, settings, http, registry_with_test_tools(),
                                tracing=tracing):
            yield queue, tracing


def of_trace(spans: InMemorySpanExporter, trace_id: str) -> list[ReadableSpan]:
    return [s for s in spans.get_finished_spans() if f"{s.context.trace_id:032x}" == trace_id]


def named(spans: list[ReadableSpan], prefix: str) -> list[ReadableSpan]:
    return [s for s in spans if s.name.startswith(prefix)]


async def test_a_turn_is_one_trace_with_its_model_calls_tools_and_approval(
        client: Client, model: ScriptedModelServer, traced_queue, spans: InMemorySpanExporter):
    queue, tracing = traced_queue
    trigger = script(model, unique("trace"),
                     ScriptedReply(tool_calls=[tool_call("get_weather", {"location": "Paris"}),
                                               tool_call("create_note", {"title": "t",
                                                                         "body": "b"})]),
                     ScriptedReply(content="Done."), ScriptedReply(content="Bye."))
    handle = await start(client, queue, trigger, owner="alice")
    waiting = await reaches(handle, "waiting_for_confirmation")
    first_trace = waiting.trace_id
    assert first_trace and len(first_trace) == 32
    await asyncio.sleep(0.5)  # the approval wait shows as a span of its own
    decided_in = traceparent(0x77, 0x88)  # the approver's request, in a trace of its own
    await handle.signal(ConversationWorkflow.confirm, ConfirmRequest(
        request_id="c1", call_ids=[waiting.pending_confirmations[0].call_id], approver="carol",
        trace_parent=decided_in))
    await settled(handle)
    await handle.signal(ConversationWorkflow.say, SayRequest(text="thanks", request_id="s1"))
    done = await settled(handle, turn=2)
    assert done.trace_id != first_trace  # one trace per turn

    turn1 = of_trace(spans, first_trace)
    root, = named(turn1, "invoke_agent")
    assert root.name == "invoke_agent assistant" and root.parent is None
    assert root.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert root.attributes["gen_ai.conversation.id"] == handle.id
    assert root.attributes["gen_ai.usage.input_tokens"] > 0
    assert root.attributes["agent.turn"] == 1 and root.attributes["agent.owner"] == "alice"
    chats = named(turn1, "chat ")
    assert [c.name for c in chats] == ["chat scripted"] * 2  # exactly one per model call
    for chat in chats:
        assert chat.attributes["gen_ai.request.model"] == "scripted"
        assert chat.attributes["gen_ai.usage.output_tokens"] >= 0
        assert chat.attributes["gen_ai.conversation.id"] == handle.id
    tools = {s.attributes["gen_ai.tool.name"]: s for s in named(turn1, "execute_tool")}
    assert set(tools) == {"get_weather", "create_note"}
    assert tools["create_note"].attributes["agent.approver"] == "carol"
    assert tools["create_note"].attributes["gen_ai.tool.call.id"] == \
        waiting.pending_confirmations[0].call_id
    approval, = named(turn1, "approval ")
    assert approval.name == "approval create_note"
    assert approval.attributes["agent.approval.approver"] == "carol"
    assert approval.attributes["agent.approval.outcome"] == "approved"
    assert approval.attributes["agent.approval.wait_s"] >= 0.4
    assert [(link.context.trace_id, link.context.span_id) for link in approval.links] == \
        [(0x77, 0x88)]
    assert approval.start_time < tools["create_note"].start_time  # the wait, then the write
    for child in [*chats, *tools.values(), approval]:
        assert child.parent is not None and child.parent.span_id == root.context.span_id
        assert root.start_time <= child.start_time and child.end_time <= root.end_time
    assert "gen_ai.input.messages" not in chats[0].attributes  # content only when asked
    turn2 = of_trace(spans, done.trace_id)
    assert [s.name for s in turn2 if s.parent is None] == ["invoke_agent assistant"]
    assert len(named(turn2, "chat ")) == 1

    # A replay (a new worker, a cache eviction) emits nothing.
    before = len(spans.get_finished_spans())
    replayer = Replayer(workflows=[ConversationWorkflow], data_converter=client.data_converter,
                        workflow_runner=workflow_runner(),
                        interceptors=[SignalGuard(), TelemetryInterceptor(tracing)])
    await replayer.replay_workflow(await handle.fetch_history())
    assert len(spans.get_finished_spans()) == before
    await handle.signal(ConversationWorkflow.end, EndRequest(request_id="e1"))
    await handle.result()
    await replay(handle, "traced_turns_with_approval")  # the turns' trace ids in the state


async def test_a_subagents_turn_nests_under_the_call_that_ran_it(
        client: Client, model: ScriptedModelServer, traced_queue, spans: InMemorySpanExporter):
    queue, _ = traced_queue
    child = script(model, unique("trace-child"), ScriptedReply(content="found it"))
    parent = script(model, unique("trace-parent"),
                    ScriptedReply(tool_calls=[delegate("researcher", f"{child}: go", "r1")]),
                    ScriptedReply(content="it says: {last_tool}"))
    handle = await start(client, queue, parent, one_shot=True)
    result = await handle.result()
    tree = of_trace(spans, result.trace_id)
    call, = named(tree, "execute_tool agent__researcher")
    top = next(s for s in tree if s.parent is None)
    assert top.name == "invoke_agent assistant" and call.parent.span_id == top.context.span_id
    assert call.attributes["gen_ai.agent.name"] == "researcher"
    kid, = named(tree, "invoke_agent researcher")
    assert kid.parent.span_id == call.context.span_id  # the child's turn, under the call
    assert kid.attributes["gen_ai.conversation.id"] == f"{handle.id}/r1"
    kid_chat, = [s for s in named(tree, "chat ") if s.parent.span_id == kid.context.span_id]
    assert kid_chat.attributes["gen_ai.conversation.id"] == f"{handle.id}/r1"
    assert len(named(tree, "chat ")) == 3  # the parent's two, the child's one


async def test_continue_as_new_and_the_api_s_trace_keep_one_span_per_turn(
        client: Client, model: ScriptedModelServer, traced_queue, spans: InMemorySpanExporter):
    """A conversation handing over to a fresh run after every turn: each turn once, its spans
    under it; the first turn continues the trace of whoever started the conversation."""
    queue, _ = traced_queue
    trigger = script(model, unique("trace-can"), *(ScriptedReply(content=f"answer {n}")
                                                   for n in range(3)))
    caller = traceparent(0xABC, 0xDEF)
    handle = await start(client, queue, trigger, continue_as_new_after_turns=1,
                         trace_parent=caller)
    status = await settled(handle)
    assert status.trace_id == f"{0xABC:032x}"
    traces = [status.trace_id]
    for n in (2, 3):
        await handle.signal(ConversationWorkflow.say, SayRequest(text=f"more {n}",
                                                                 request_id=f"m{n}"))
        status = await settled(handle, turn=n)
        traces.append(status.trace_id)
    assert status.runs >= 3 and len(set(traces)) == 3
    for n, trace_id in enumerate(traces, 1):
        tree = of_trace(spans, trace_id)
        turn, = named(tree, "invoke_agent")
        assert turn.attributes["agent.turn"] == n
        chat, = named(tree, "chat ")
        assert chat.parent.span_id == turn.context.span_id
    first, = named(of_trace(spans, traces[0]), "invoke_agent")
    assert first.parent.span_id == 0xDEF  # under the caller's span


# ----- over OTLP/HTTP from a worker process that is killed mid-turn -----



# ----- the settings and the pure rules -----

def test_tracing_is_off_unless_an_endpoint_is_set_and_settings_are_checked():
    assert Tracing.from_env({}) is None
    assert Tracing.from_env({"OTEL_EXPORTER_OTLP_ENDPOINT": ""}) is None
    assert Tracing.from_env({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x:4318",
                             "OTEL_SDK_DISABLED": "true"}) is None
    assert Tracing.from_env({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x:4318",
                             "OTEL_TRACES_EXPORTER": "none"}) is None
    on = Tracing.from_env({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://x:4318/v1/traces",
                           "OTEL_SERVICE_NAME": "billing-agent",
                           "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "true"})
    assert on is not None and on.capture_content
    assert on.provider.resource.attributes["service.name"] == "billing-agent"
    assert Tracing.from_env({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x:4318"}).provider.resource \
        .attributes["service.name"] == "durable-react-agent"
    with pytest.raises(TelemetryError, match="http/protobuf or grpc"):
        Tracing.from_env({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x",
                          "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"})
    assert metrics_runtime({}) is None
    for bad in ("9464", "host:", "host:port", ":9464", "h:70000"):
        with pytest.raises(TelemetryError, match="AGENT_METRICS_ADDRESS"):
            metrics_runtime({"AGENT_METRICS_ADDRESS": bad})


def test_span_ids_are_the_same_wherever_they_are_drawn():
    parent = traceparent(0x1234, 0x99)
    assert parse_traceparent(parent) == (0x1234, 0x99)
    for bad in (None, "", "00-abc-def-01", f"00-{'0' * 32}-{'1' * 16}-01", "00-xyz-1-01",
                f"00-{'g' * 32}-{'1' * 16}-01"):
        assert parse_traceparent(bad) is None
    approval = child_span(parent, "approval/call_1")
    assert approval == child_span(parent, "approval/call_1")  # on every replay, any worker
    assert approval != child_span(parent, "approval/call_2")
    assert parse_traceparent(approval)[0] == 0x1234  # the same trace
    assert child_span(None, "approval/call_1") is None  # a turn from before traces
    first, second = Random(7), Random(7)
    assert new_span(first, None) == new_span(second, None)  # drawn from the workflow's seed
    assert parse_traceparent(new_span(first, parent))[0] == 0x1234


def test_content_goes_on_a_span_only_when_asked_and_with_the_ids_the_workflow_chose():
    record = SpanRecord(name="invoke_agent assistant", trace_id=0xA1, span_id=0xB2,
                        parent_id=0xC3, start_ns=1_000, end_ns=2_000,
                        attributes={"agent.turn": 1}, error="budget used up",
                        content={"gen_ai.input.messages": "hello", "gen_ai.output.messages": None},
                        links=[(0xD4, 0xE5)])
    for capture in (False, True):
        exporter = InMemorySpanExporter()
        tracing = Tracing.from_env({}, processor=SimpleSpanProcessor(exporter))
        tracing.capture_content = capture
        tracing.emit(record)
        span, = exporter.get_finished_spans()
        assert (span.context.trace_id, span.context.span_id) == (0xA1, 0xB2)
        assert span.parent.span_id == 0xC3 and (span.start_time, span.end_time) == (1_000, 2_000)
        assert span.status.status_code.name == "ERROR"
        assert span.links[0].context.span_id == 0xE5
        assert span.attributes.get("gen_ai.input.messages") == ("hello" if capture else None)
        assert "gen_ai.output.messages" not in span.attributes
