"""Traces and metrics from worker processes: a worker SIGKILLed during the approval wait emits each
span once, and a worker process serves its metrics for Prometheus (DESIGN "Telemetry")."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families
from temporalio.client import Client

from durable_react_agent.contract import ConfirmRequest, RejectRequest
from durable_react_agent.rules.tracing import (
    parse_traceparent,
)
from durable_react_agent.testing import ScriptedModelServer, ScriptedReply
from durable_react_agent.workflows.conversation import ConversationWorkflow
from tests.api_support import free_port
from tests.devserver import worker_env
from tests.helpers import (
    reaches,
    script,
    settled,
    start,
    tool_call,
    unique,
)
from tests.processes import WorkerProcess
from tests.telemetry_support import OtlpReceiver


async def test_a_worker_killed_during_the_approval_wait_emits_each_span_once(
        client: Client, model: ScriptedModelServer, temporal_address: str, tmp_path: Path):
    trigger = script(model, unique("otlp"),
                     ScriptedReply(tool_calls=[tool_call("create_note", {"title": unique("n"),
                                                                         "body": "b"})]),
                     ScriptedReply(content="Written."))
    queue = unique("otlp")
    with OtlpReceiver() as receiver:
        env = worker_env(temporal_address, queue, model.base_url, tmp_path / "data",
                         OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{receiver.port}",
                         OTEL_SERVICE_NAME="agent-under-test")
        worker = WorkerProcess(env, tmp_path)
        worker.start()
        try:
            handle = await start(client, queue, trigger)
            waiting = await reaches(handle, "waiting_for_confirmation", timeout_s=60)
            await receiver.until("chat ")  # flushed as its activity ended
            worker.kill()  # mid-turn, while it waits for the approval
            worker.start()
            await handle.signal(ConversationWorkflow.confirm, ConfirmRequest(
                request_id="c1", call_ids=[waiting.pending_confirmations[0].call_id],
                approver="carol"))
            done = await settled(handle, timeout_s=60)
            assert done.final_answer == "Written."
            turn, = await receiver.until("invoke_agent")
        finally:
            worker.stop()  # it exports what it holds as it stops: no span can come later
    trace_id = bytes.fromhex(done.trace_id)
    assert {s.trace_id for s in receiver.spans} == {trace_id}
    assert len(receiver.named("chat ")) == 2  # exactly one per model call
    assert [s.name for s in receiver.named("execute_tool")] == ["execute_tool create_note"]
    assert [s.name for s in receiver.named("approval")] == ["approval create_note"]
    assert turn.parent_span_id == b""
    for span in receiver.spans:
        if span is not turn:
            assert span.parent_span_id == turn.span_id, span.name
    assert len({s.span_id for s in receiver.spans}) == len(receiver.spans)
    chat = receiver.named("chat ")[0]
    attributes = {a.key: a.value for a in chat.attributes}
    assert attributes["gen_ai.request.model"].string_value == "scripted"
    assert attributes["gen_ai.usage.input_tokens"].int_value > 0
    assert parse_traceparent(f"00-{done.trace_id}-{turn.span_id.hex()}-01") is not None


async def test_metrics_are_served_for_prometheus(
        client: Client, model: ScriptedModelServer, temporal_address: str, tmp_path: Path):
    trigger = script(model, unique("metrics"),
                     ScriptedReply(tool_calls=[tool_call("get_weather", {"location": "Paris"}),
                                               tool_call("create_note", {"title": unique("m"),
                                                                         "body": "b"})]),
                     ScriptedReply(content="Cold."))
    queue, port = unique("metrics"), free_port()
    worker = WorkerProcess(worker_env(temporal_address, queue, model.base_url, tmp_path / "data",
                                      AGENT_METRICS_ADDRESS=f"127.0.0.1:{port}"), tmp_path)
    worker.start()
    try:
        handle = await start(client, queue, trigger, model="gpt-4o-mini")
        waiting = await reaches(handle, "waiting_for_confirmation", timeout_s=60)
        await handle.signal(ConversationWorkflow.reject, RejectRequest(
            request_id="r1", call_ids=[waiting.pending_confirmations[0].call_id],
            approver="carol"))
        await settled(handle, timeout_s=60)
        families = {}
        deadline = time.monotonic() + 20
        while "agent_tool_calls" not in families:
            assert time.monotonic() < deadline, sorted(families)
            async with httpx.AsyncClient() as http:
                text = (await http.get(f"http://127.0.0.1:{port}/metrics")).text
            families = {f.name: f for f in text_string_to_metric_families(text)}
            await asyncio.sleep(0.2)
    finally:
        worker.stop()

    def samples(name: str, **labels: str) -> list:
        return [s for s in families[name].samples
                if all(s.labels.get(k) == v for k, v in labels.items())]

    assert any(name.startswith("temporal_") for name in families)  # the SDK's own
    assert samples("temporal_workflow_task_schedule_to_start_latency")
    tokens = samples("gen_ai_client_token_usage", gen_ai_request_model="gpt-4o-mini",
                     gen_ai_token_type="input")
    assert any(s.name.endswith("_sum") and s.value > 0 for s in tokens)
    duration = samples("gen_ai_client_operation_duration", gen_ai_operation_name="chat")
    assert any(s.name.endswith("_count") and s.value == 2 for s in duration)
    assert any(s.name.endswith("_sum") and s.value > 0 for s in samples("agent_cost_usd"))
    calls = {(s.labels["tool"], s.labels["outcome"]): s.value
             for s in samples("agent_tool_calls") if s.name.endswith("_total")}
    assert calls == {("get_weather", "ok"): 1, ("create_note", "rejected"): 1}
    waited = samples("agent_approval_wait", tool="create_note", outcome="rejected")
    assert any(s.name.endswith("_count") and s.value == 1 for s in waited)
    assert any(s.value == 1 for s in samples("agent_approvals_requested", tool="create_note")
               if s.name.endswith("_total"))
