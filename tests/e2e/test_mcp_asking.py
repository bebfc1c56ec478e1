"""MCP servers that ask back: an elicitation during a call becomes the conversation's question,
asked once, across a worker SIGKILLed while it waits; the answer reaches the server when the
call runs again (`activities.mcp.elicitation`)."""

from __future__ import annotations

from pathlib import Path

import httpx
from playwright.async_api import Browser, expect
from temporalio.client import Client

from durable_react_agent.activities.mcp import McpToolbox, load_mcp_config
from durable_react_agent.activities.settings import ActivitySettings
from durable_react_agent.contract import AnswerRequest, ElicitAnswer
from durable_react_agent.testing import ScriptedModelServer, ScriptedReply
from durable_react_agent.workflows.conversation import ConversationWorkflow
from tests.api_support import ApiServer
from tests.console_support import Console, as_if_asked
from tests.devserver import worker_env
from tests.helpers import reaches, replay, script, settled, start, tool_call, unique
from tests.mcp_support import asking_config, told
from tests.processes import WorkerProcess
from tests.webhook_support import Receiver, worker_with_links


async def test_a_call_that_asks_ends_with_the_question_and_its_answer_reaches_the_server_later(
    tmp_path: Path,
):
    config, log = asking_config(tmp_path, timeout_s=20)
    toolbox = McpToolbox(load_mcp_config(config, {}))
    try:
        await toolbox.discover()
        asked = await toolbox.call("asking__book", {"city": "Lyon"})
        assert asked.status == "needs_input" and asked.question is not None
        question = asked.question
        assert (question.kind, question.message, question.server, question.tool) == (
            "elicitation", "How many nights in Lyon?", "asking", "book")
        assert question.answer_schema["properties"]["nights"]["maximum"] == 30
        # Abandoned at the question, nothing after it; the first run, on the 2026-07-28
        # protocol, had no channel to ask on, so the call ran again on the older one.
        assert told(log) == [{"run": "Lyon"}, {"run": "Lyon"}]

        answer = ElicitAnswer(request=question.request, action="accept",
                              content={"nights": 3, "breakfast": True})
        done = await toolbox.call("asking__book", {"city": "Lyon"}, elicited=[answer])
        assert (done.status, done.observation) == ("ok", "booked 3 nights in Lyon")
        assert told(log)[2:] == [{"run": "Lyon"}, {"city": "Lyon", "action": "accept",
                                 "data": {"nights": 3, "breakfast": True}}]

        # An answer to another request answers nothing: this one is asked anew.
        other = await toolbox.call("asking__book", {"city": "Oslo"}, elicited=[answer])
        assert other.status == "needs_input"
        assert other.question.message == "How many nights in Oslo?"
        declined = ElicitAnswer(request=other.question.request, action="decline")
        said_no = await toolbox.call("asking__book", {"city": "Oslo"}, elicited=[declined])
        assert said_no.observation == "not booked (decline)"
    finally:
        await toolbox.aclose()


async def test_an_mcp_question_waits_across_a_worker_kill_is_asked_once_and_reaches_the_server(
    client: Client, model: ScriptedModelServer, temporal_address: str, tmp_path: Path, cli,
):
    """The issue's "done when": an eliciting tool's question waits across a worker SIGKILL, is
    answered once (an answer that misses the schema refused first), and its answer reaches the
    server on the call's next run; the history replays."""
    config, log = asking_config(tmp_path, timeout_s=20)
    queue = unique("asking")
    worker = WorkerProcess(worker_env(temporal_address, queue, model.base_url,
                                      tmp_path / "data", AGENT_MCP_CONFIG=str(config)), tmp_path)
    trigger = script(model, unique("asking"),
                     ScriptedReply(tool_calls=[tool_call("asking__book", {"city": "Lyon"})]),
                     ScriptedReply(content="{last_tool}"))
    worker.start()
    try:
        handle = await start(client, queue, trigger)
        waiting = await reaches(handle, "waiting_for_input", timeout_s=60)
        question = waiting.pending_question
        assert (question.kind, question.message, question.server, question.tool) == (
            "elicitation", "How many nights in Lyon?", "asking", "book")
        assert question.answer_schema["required"] == ["nights"]

        env = {"AGENT_TASK_QUEUE": queue}
        refused = await cli("answer", handle.id, '{"nights": 0}', extra_env=env)
        assert refused.returncode == 1 and "is less than the minimum of 1" in refused.stdout
        worker.kill()  # the question waits in the history, the call in no process
        await handle.signal(ConversationWorkflow.answer, AnswerRequest(
            request_id="asked-once", values=['{"nights": 3, "breakfast": true}']))
        worker.start()
        status = await settled(handle, timeout_s=90)
        assert (await handle.query(ConversationWorkflow.signal_outcome, "asked-once")).accepted
        await handle.signal(ConversationWorkflow.end)
        await handle.result()
    finally:
        worker.stop()
    assert status.final_answer == "booked 3 nights in Lyon", worker.log(2)[-6000:]
    accepted = [r for r in told(log) if r.get("action")]
    assert accepted == [{"city": "Lyon", "action": "accept",
                         "data": {"nights": 3, "breakfast": True}}]
    # Four runs of the call, one question and one answer taken: each worker process first
    # tried the 2026-07-28 protocol, which has no channel to ask on, then the older one (the
    # first worker's asked; the second's got the answer from the history).
    assert [r for r in told(log) if "run" in r] == [{"run": "Lyon"}] * 4
    await replay(handle, record_as="mcp_elicitation_worker_killed")


async def test_the_console_shows_an_mcp_question_as_a_form_of_its_schema(
    api: ApiServer, model: ScriptedModelServer, console: Console,
):
    """In chromium: a question of kind `elicitation` is a form with a field per property of
    its schema (a number, a checkbox, a pick list), and it answers with one JSON object; the
    facts name the version the conversation runs on."""
    question = {"kind": "elicitation", "message": "How many nights in Lyon?",
                "server": "hotel", "tool": "book", "answer_schema": STAY_SCHEMA}
    # as an MCP server would have asked it, on a versioned worker (issue 36)
    shown, posted = await as_if_asked(console, api.url, model, question, version="agents:b7")
    page = console.page
    form = page.get_by_test_id("answer-form")
    await expect(form).to_have_attribute("data-kind", "elicitation")
    await expect(form).to_contain_text("asked by hotel's book")
    await expect(page.get_by_test_id("facts")).to_contain_text("version agents:b7")
    await expect(form.get_by_test_id("elicit-field")).to_have_count(3)
    await form.get_by_label("nights").fill("3")
    await form.get_by_label("breakfast").check()
    await form.get_by_label("room").select_option("double")
    await form.get_by_test_id("answer-submit").click()
    await expect(form.get_by_test_id("answer-outcome")).to_contain_text("Answered.")
    await page.reload()  # the question still waits, as the routes say: now decline it
    await form.get_by_test_id("answer-decline").click()
    await expect(form.get_by_test_id("answer-outcome")).to_contain_text("Declined.")
    question = shown["pending_question"]
    ref = question["ref"] or question["call_id"]
    assert posted == [{"values": ['{"nights":3,"breakfast":true,"room":"double"}'],
                       "call_id": ref}, {"call_id": ref}]
    assert console.errors == []


STAY_SCHEMA = {"type": "object", "required": ["nights"], "properties": {
    "nights": {"type": "integer", "minimum": 1, "description": "how many nights"},
    "breakfast": {"type": "boolean"},
    "room": {"type": "string", "enum": ["single", "double"]}}}


async def test_an_mcp_question_is_declined_by_its_one_time_link_or_in_the_console(
    client: Client, model: ScriptedModelServer, activity_settings: ActivitySettings,
    temporal_address: str, browser: Browser, tmp_path: Path,
):
    """The question's webhook delivery names the server, the tool and the schema, with a link
    to the console and a one-time decline link. In chromium the link's page shows the
    question and declines it: the server is told decline, and the link works once. Another
    is declined from the console's form."""
    config, log = asking_config(tmp_path, timeout_s=20)
    receiver = Receiver()

    def books(city: str) -> str:
        return script(model, unique("decline"),
                      ScriptedReply(tool_calls=[tool_call("asking__book", {"city": city})]),
                      ScriptedReply(content="{last_tool}"))

    trigger, in_console = books("Rome"), books("Oslo")
    try:
        async with McpToolbox(load_mcp_config(config, {})) as toolbox, worker_with_links(
                client, activity_settings, receiver, temporal_address, [None], None,
                events=("question_asked",), mcp=toolbox) as (queue, api):
            handle = await start(client, queue, trigger)
            [delivery] = await receiver.until("question_asked", timeout_s=60)
            body = delivery["json"]
            assert (body["kind"], body["server"], body["tool"]) == ("elicitation", "asking", "book")
            assert body["answer_schema"]["required"] == ["nights"]
            assert body["console_url"] == f"{api.url}/#/c/{handle.id}"
            page = await browser.new_page()
            try:
                await page.goto(body["decline_url"])
                await expect(page.locator("h1")).to_have_text("Decline asking's question?")
                await expect(page.locator("pre")).to_have_text("How many nights in Rome?")
                await page.get_by_role("button", name="Decline").click()
                await expect(page.locator("h1")).to_have_text("Question declined")
            finally:
                await page.close()
            status = await settled(handle, timeout_s=60)
            async with httpx.AsyncClient(timeout=30) as http:
                again = await http.post(body["decline_url"])

            other = await start(client, queue, in_console)
            await reaches(other, "waiting_for_input", timeout_s=60)
            page = await browser.new_page()
            try:
                await page.goto(f"{api.url}/#/c/{other.id}")
                form = page.get_by_test_id("answer-form")
                await expect(form).to_have_attribute("data-kind", "elicitation")
                await form.get_by_test_id("answer-decline").click()
                # the question is gone once the conversation took it (its form with it, be
                # the page's "Declined." shown first or not: the status may come before the
                # reply to the POST)
                await expect(form).to_have_count(0)
            finally:
                await page.close()
            declined = await settled(other, timeout_s=60)
    finally:
        receiver.close()
    assert status.final_answer == declined.final_answer == "not booked (decline)"
    assert [r for r in told(log) if r.get("action")] == [
        {"city": city, "action": "decline", "data": None} for city in ("Rome", "Oslo")]
    assert again.status_code == 409 and "no longer waiting" in again.text
