"""A real third-party MCP server that asks back: `@modelcontextprotocol/server-everything`, the
protocol's reference server (Node, from its lock file in tests/everything_server). It offers its
eliciting and sampling tools only to a client that says it can answer them, asks with a schema
of every kind of field, and samples with its own prompt and system prompt."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from playwright.async_api import expect
from temporalio.client import Client

from durable_react_agent.activities.mcp import McpToolbox, load_mcp_config
from durable_react_agent.activities.settings import ActivitySettings
from durable_react_agent.activities.tools import ToolRegistry
from durable_react_agent.contract import AnswerRequest, ElicitAnswer
from durable_react_agent.rules.gate import check_answer
from durable_react_agent.testing import ScriptedModelServer, ScriptedReply
from durable_react_agent.worker.app import build_worker
from durable_react_agent.workflows.conversation import ConversationWorkflow
from tests.api_support import ROOT, ApiServer
from tests.console_support import Console, as_if_asked
from tests.devserver import worker_env
from tests.helpers import reaches, script, settled, start, tool_call, unique
from tests.npm_support import npm_installed
from tests.processes import WorkerProcess

SERVER_DIR = ROOT / "tests" / "everything_server"
ENTRY = SERVER_DIR / "node_modules" / "@modelcontextprotocol" / "server-everything" / "dist" \
    / "index.js"
ELICITS, SAMPLES = "everything__trigger-elicitation-request", "everything__trigger-sampling-request"


@pytest.fixture(scope="module")
def node() -> str:
    return npm_installed(SERVER_DIR, "the MCP reference server")


def everything_config(tmp_path: Path, node: str, sampling: bool = True) -> Path:
    config = tmp_path / "mcp.json"
    config.write_text(json.dumps({"mcpServers": {"everything": {
        "command": node, "args": [str(ENTRY), "stdio"], "risk": "safe", "timeout_s": 20,
        "sampling": sampling}}}))
    return config


async def test_it_offers_its_sampling_tool_only_to_a_client_trusted_to_sample(
    node: str, tmp_path: Path,
):
    for sampling in (False, True):
        (tmp_path / str(sampling)).mkdir()
        config = everything_config(tmp_path / str(sampling), node, sampling)
        async with McpToolbox(load_mcp_config(config, {})) as toolbox:
            elicits, samples = [await toolbox.current_risk(n) for n in (ELICITS, SAMPLES)]
        assert elicits == "safe"  # this client answers elicitation for every server
        assert (samples is not None) is sampling


async def test_its_sampling_request_is_answered_by_the_conversations_model_and_counted(
    client: Client, model: ScriptedModelServer, activity_settings: ActivitySettings,
    node: str, tmp_path: Path,
):
    prompt = unique("tides")  # the server asks "Resource ... context: <prompt>"
    script(model, prompt, ScriptedReply(content="High tide at noon."))
    trigger = script(model, unique("everything-samples"),
                     ScriptedReply(tool_calls=[tool_call(SAMPLES, {"prompt": prompt,
                                                                   "maxTokens": 64})]),
                     ScriptedReply(content="{last_tool}"))
    queue = unique("everything")
    toolbox = McpToolbox(load_mcp_config(everything_config(tmp_path, node), {}))
    async with httpx.AsyncClient() as http, toolbox:
        async with build_worker(client, queue, activity_settings, http, ToolRegistry([]),
                                mcp=toolbox):
            handle = await start(client, queue, trigger)
            status = await settled(handle, timeout_s=60)
            trail = await handle.query(ConversationWorkflow.history)
    assert '"text": "High tide at noon."' in status.final_answer, status
    assert '"model": "scripted"' in status.final_answer
    [asked] = [r.body for r in model.requests if r.trigger == prompt]
    assert asked["max_tokens"] == 64 and asked["temperature"] == 0.7 and "tools" not in asked
    assert asked["messages"][0] == {"role": "system", "content": "You are a helpful test server."}
    assert status.llm_calls == 3
    [sampled] = [r for r in trail if r.kind == "sampling"]
    assert sampled.by == "everything" and prompt in sampled.text


async def test_its_question_waits_across_a_worker_kill_and_its_answer_reaches_it(
    client: Client, model: ScriptedModelServer, temporal_address: str, node: str,
    tmp_path: Path,
):
    """Its form of every kind of field (an email, a date, enums titled and not, a list of
    picks) becomes the conversation's question; an answer that misses the schema is refused;
    the worker is SIGKILLed while the question waits; a new worker runs the call again, and
    the server gets the answer, asked once."""
    queue = unique("everything-asks")
    worker = WorkerProcess(worker_env(temporal_address, queue, model.base_url, tmp_path / "data",
                                      AGENT_MCP_CONFIG=str(everything_config(tmp_path, node))),
                           tmp_path)
    trigger = script(model, unique("everything-asks"),
                     ScriptedReply(tool_calls=[tool_call(ELICITS, {})]),
                     ScriptedReply(content="{last_tool}"))
    worker.start()
    try:
        handle = await start(client, queue, trigger)
        question = (await reaches(handle, "waiting_for_input", timeout_s=60)).pending_question
        assert (question.kind, question.server, question.tool) == (
            "elicitation", "everything", "trigger-elicitation-request")
        assert question.message == "Please provide inputs for the following fields:"
        assert question.answer_schema["required"] == ["name"]
        assert question.answer_schema["properties"]["email"]["format"] == "email"

        await handle.signal(ConversationWorkflow.answer, AnswerRequest(
            request_id="misses", values=['{"integer": 500}']))
        refused = await handle.query(ConversationWorkflow.signal_outcome, "misses")
        assert not refused.accepted and "'name' is a required property" in refused.reason
        worker.kill()
        answer = {"name": "Ada Lovelace", "check": True, "integer": 7,
                  "untitledMultipleSelectEnum": ["Piano", "Violin"]}
        await handle.signal(ConversationWorkflow.answer, AnswerRequest(
            request_id="fits", values=[json.dumps(answer)]))
        worker.start()
        status = await settled(handle, timeout_s=90)
        assert (await handle.query(ConversationWorkflow.signal_outcome, "fits")).accepted
    finally:
        worker.stop()
    assert "User provided the requested information" in status.final_answer, status
    assert "Name: Ada Lovelace" in status.final_answer
    assert '"untitledMultipleSelectEnum": [\n      "Piano",\n      "Violin"\n    ]' in \
        status.final_answer


async def test_the_console_form_of_its_schema_answers_it(
    api: ApiServer, model: ScriptedModelServer, console: Console, node: str, tmp_path: Path,
):
    """In chromium, the real server's question (every kind of field it asks) as the console's
    form: defaults filled in, titled picks by their titles, several picks as checkboxes, an
    email field; the answer it sends fits the schema, and the server takes it."""
    async with McpToolbox(load_mcp_config(everything_config(tmp_path, node), {})) as toolbox:
        asked = (await toolbox.call(ELICITS, {})).question
        # the server's question, as a worker shows it
        _, posted = await as_if_asked(console, api.url, model,
                                      asked.model_dump(mode="json", exclude_none=True))
        form = console.page.get_by_test_id("answer-form")
        await expect(form).to_contain_text("asked by everything's trigger-elicitation-request")
        await expect(form.get_by_label("integer", exact=True)).to_have_value("42")
        await expect(form.get_by_label("email", exact=True)).to_have_attribute("type", "email")
        await expect(form.get_by_label("legacyTitledEnum")).to_contain_text("Reptiles")
        await form.get_by_label("name", exact=True).fill("Ada Lovelace")
        await form.get_by_label("email", exact=True).fill("ada@example.org")
        await form.get_by_label("titledSingleSelectEnum", exact=True).select_option(label="Wonder Woman")
        await form.get_by_label("untitledMultipleSelectEnum Drums", exact=True).check()
        await form.get_by_label("titledMultipleSelectEnum Trout", exact=True).check()
        await form.get_by_test_id("answer-submit").click()
        await expect(form.get_by_test_id("answer-outcome")).to_contain_text("Answered.")
        [sent] = posted
        answer = json.loads(sent["values"][0])
        assert answer["titledSingleSelectEnum"] == "hero-3" and answer["integer"] == 42
        assert answer["untitledMultipleSelectEnum"] == ["Guitar", "Drums"]  # its default kept
        assert answer["titledMultipleSelectEnum"] == ["fish-1", "fish-3"]
        checked = check_answer(asked, sent["values"])
        assert checked.text is not None, checked  # it fits the schema
        done = await toolbox.call(ELICITS, {}, elicited=[ElicitAnswer(
            request=asked.request, action="accept", content=json.loads(checked.text))])
    assert "Name: Ada Lovelace" in done.observation and "hero-3" in done.observation
    assert console.errors == []
