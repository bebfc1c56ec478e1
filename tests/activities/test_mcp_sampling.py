"""MCP servers that ask the conversation's model (sampling): offered only to servers whose entry
says `"sampling": true`, answered by the conversation's model entry and its fallbacks, without
tools and within bounds, and counted and audited as the conversation's own model calls
(`activities.mcp.sampling`)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from urllib.parse import quote

import httpx
from mcp.types import (
    CreateMessageRequestParams,
    ImageContent,
    SamplingMessage,
    TextContent,
    Tool,
)
from playwright.async_api import expect
from temporalio.client import Client
from temporalio.common import RawValue

from durable_react_agent.activities.endpoints import Endpoints
from durable_react_agent.activities.mcp import McpToolbox, load_mcp_config
from durable_react_agent.activities.mcp.sampling import (
    MAX_PROMPT_BYTES,
    MAX_SAMPLING_TOKENS,
    CallSampler,
    _prompt,
)
from durable_react_agent.activities.models import ModelEntry, Models
from durable_react_agent.activities.settings import ActivitySettings
from durable_react_agent.activities.tool_runner import ToolActivities
from durable_react_agent.activities.tools import ToolRegistry
from durable_react_agent.client.render import render_history
from durable_react_agent.contract import (
    AuditRecord,
    Sampled,
    SamplingGrant,
    ToolInvocation,
    ToolOutcome,
    Usage,
)
from durable_react_agent.testing import ScriptedModelServer, ScriptedReply
from durable_react_agent.worker.app import build_worker
from durable_react_agent.workflows.conversation import ConversationWorkflow
from tests.api_support import ApiServer
from tests.console_support import Console
from tests.helpers import replay, script, settled, start, tool_call, unique
from tests.mcp_support import asking_config, told, tool_env


def ask(*texts: str, **params) -> CreateMessageRequestParams:
    return CreateMessageRequestParams(
        messages=[SamplingMessage(role="user", content=TextContent(type="text", text=t))
                  for t in texts], max_tokens=params.pop("max_tokens", 100), **params)


async def test_only_a_server_whose_entry_says_so_is_offered_sampling(tmp_path: Path):
    """A server without `"sampling": true` is not told this client samples, and its request
    is refused with a reason it reads; one with it is, and its tools are marked as sampling,
    but a call given no model (no grant) is refused all the same."""
    for trusted, refusal in ((False, "Sampling not supported"),
                             (True, "the conversation gave this call of headline no model")):
        config, log = asking_config(tmp_path / str(trusted), timeout_s=20, sampling=trusted)
        async with McpToolbox(load_mcp_config(config, {})) as toolbox:
            found = {t.name: t for t in (await toolbox.discover()).tools}
            assert found["asking__headline"].samples is trusted
            assert found["asking__book"].samples is trusted  # the server's, every tool of it
            outcome = await toolbox.call("asking__headline", {"text": "rain"})
        assert outcome.status == "ok" and outcome.observation.startswith("no headline: ")
        assert refusal in outcome.observation
        assert told(log)[-1] == {"refused": outcome.observation.removeprefix("no headline: ")}


async def test_a_sampling_request_is_answered_by_the_conversations_model_counted_and_audited(
    client: Client, model: ScriptedModelServer, activity_settings: ActivitySettings,
    tmp_path: Path,
):
    """The issue's "done when": the server's request is answered by the conversation's model,
    without tools and within this client's bound of tokens; it counts as one of the
    conversation's model calls, in its usage, and the audit names the server and what it
    asked; the history replays."""
    config, log = asking_config(tmp_path, timeout_s=20, sampling=True)

    def headline(budget: int | None = None) -> tuple[str, str, dict]:
        story = unique("story")  # the sampling request's scenario: its own first user message
        script(model, story, ScriptedReply(content="Rain Stops Play"))
        trigger = script(model, unique("sampling"), ScriptedReply(tool_calls=[
            tool_call("asking__headline", {"text": story})]),
            ScriptedReply(content="{last_tool}"))
        return story, trigger, {"max_total_tokens": budget} if budget else {}

    queue = unique("sampling")
    async with httpx.AsyncClient() as http, McpToolbox(load_mcp_config(config, {})) as toolbox:
        async with build_worker(client, queue, activity_settings, http, ToolRegistry([]),
                                mcp=toolbox):
            story, trigger, _ = headline()
            handle = await start(client, queue, trigger)
            status = await settled(handle, timeout_s=60)
            trail = await handle.query(ConversationWorkflow.history)
            await handle.signal(ConversationWorkflow.end)
            await handle.result()
            # The same, with a budget that step 1 leaves one token of: the server's request,
            # its prompt counted, does not fit, so no model is asked for it.
            first_step = next(r for r in trail if r.kind == "step").tokens.total_tokens
            short_story, short, budget = headline(first_step + 1)
            short_handle = await start(client, queue, short, **budget)
            spent = await settled(short_handle, timeout_s=60)
            spent_trail = await short_handle.query(ConversationWorkflow.history)
    assert status.final_answer == "headline: Rain Stops Play", status
    assert [r for r in told(log) if "headline" in r] == [
        {"headline": "Rain Stops Play", "model": "scripted"}]

    [asked] = [r for r in model.requests if r.trigger == story]
    body = asked.body
    assert body["max_tokens"] == MAX_SAMPLING_TOKENS  # the server asked for 5,000
    assert "tools" not in body and "tool_choice" not in body
    assert body["messages"] == [{"role": "system", "content": "You write headlines."},
                                {"role": "user", "content": f"A headline for: {story}"}]

    steps = [r for r in model.requests if r.trigger == trigger]
    assert status.llm_calls == len(steps) + 1 == 3  # two steps, and the server's request
    [sampled] = [r for r in trail if r.kind == "sampling"]
    assert (sampled.by, sampled.text, sampled.step) == ("asking", f"A headline for: {story}", 1)
    assert sampled.tokens.total_tokens > 0 and sampled.entry == "default"
    step_tokens = sum(r.tokens.total_tokens for r in trail if r.kind == "step")
    assert status.usage.total_tokens == step_tokens + sampled.tokens.total_tokens
    await replay(handle, record_as="mcp_sampling")

    assert [r for r in model.requests if r.trigger == short_story] == []
    refused = told(log)[-1]["refused"]  # what the server was told
    assert refused.startswith("the request's prompt (about ")
    assert refused.endswith("leaves no room for an answer: this call has 1 left of the "
                            "conversation's token budget")
    assert spent.llm_calls == 2 and not [r for r in spent_trail if r.kind == "sampling"]


async def test_a_failing_entry_falls_back_and_a_spent_budget_is_refused(
    model: ScriptedModelServer, activity_settings: ActivitySettings, tmp_path: Path,
):
    """The conversation's entry fails (its endpoint is down): its fallback answers. With the
    conversation's token budget spent, the server is refused, and no model is asked."""
    config, log = asking_config(tmp_path, timeout_s=20, sampling=True)
    story = script(model, unique("story"), ScriptedReply(content="Sun Returns"))
    models = Models({"main": ModelEntry(model="main-model", base_url="http://127.0.0.1:9/v1"),
                     "backup": ModelEntry(model="backup-model", base_url=model.base_url,
                                          api_key_env=None)},
                    default="main", fallbacks={"main": ["backup"]})
    settings = dataclasses.replace(activity_settings, models=models)
    env = tool_env("asking__headline")
    async with httpx.AsyncClient() as http, McpToolbox(load_mcp_config(config, {})) as toolbox:
        tools = ToolActivities(ToolRegistry([]), settings, http, mcp=toolbox)

        async def run(grant: SamplingGrant) -> ToolOutcome:
            invocation = ToolInvocation(call_id="c", arguments={"text": story},
                                        idempotency_key=unique("key"), sampling=grant)
            payload = env.payload_converter.to_payloads([invocation])[0]
            return await env.run(tools.run_tool, [RawValue(payload)])

        fell_back = await run(SamplingGrant(model="main"))
        spent = await run(SamplingGrant(model="main", tokens_left=0))
    assert fell_back.observation == "headline: Sun Returns"
    [sampled] = fell_back.sampled
    assert (sampled.server, sampled.entry, sampled.error) == ("asking", "backup", None)
    assert sampled.usage.total_tokens > 0
    assert spent.observation == "no headline: the conversation's token budget is used up"
    assert spent.sampled == [] and model.count(story) == 1


def test_what_a_request_may_ask_is_bounded():
    """Text only, no tools, within a size; and what an answer may take: the server's ask
    within this client's bound, the entry's, and what is left of the budget."""
    assert isinstance(_prompt(ask("hi", system_prompt="be brief")), list)
    tool = Tool(name="search", input_schema={"type": "object"})
    assert _prompt(ask("hi", tools=[tool])) == "this client gives sampling requests no tools"
    image = SamplingMessage(role="user", content=ImageContent(type="image", data="AA==",
                                                              mime_type="image/png"))
    assert _prompt(CreateMessageRequestParams(messages=[image], max_tokens=5)) == \
        "this client samples text only, not image"
    assert _prompt(ask("x" * (MAX_PROMPT_BYTES + 1))).startswith("the sampling request is ")
    assert _prompt(CreateMessageRequestParams(messages=[], max_tokens=5,
                                              system_prompt="only this")) == \
        "the sampling request has no messages"

    models = Models({"small": ModelEntry(model="m", max_output_tokens=300),
                     "params": ModelEntry(model="m", params={"max_tokens": 200}),
                     "open": ModelEntry(model="m")}, default="open")
    endpoints = Endpoints(dataclasses.replace(ActivitySettings(), models=models))
    # the room its call's grant leaves it (`rules.sampling.answer_room`): 500
    bound = {name: CallSampler._max_tokens(endpoints.get(None, name), 5_000, 500)
             for name in models.entries}
    assert bound == {"small": 300, "params": 200, "open": 500}
    assert CallSampler._max_tokens(endpoints.get(None, "open"), 40, 500) == 40
    assert CallSampler._max_tokens(endpoints.get(None, "open"), 5_000, None) == \
        MAX_SAMPLING_TOKENS
    spent = CallSampler(endpoints, SamplingGrant(spent="the conversation used its budget"), "s")
    assert spent._refusal() == "the conversation used its budget"
    unbounded = CallSampler(endpoints, SamplingGrant(), "s")
    unbounded.sampled = [Sampled(server="s", asked="a")] * 8
    assert unbounded._refusal() == "this client answers at most 8 sampling requests during " \
                                   "one tool call"


SAMPLING_RECORD = AuditRecord(
    at="2026-12-03T09:00:00Z", turn=1, step=1, thought=None, kind="sampling", by="writer",
    text="A headline for: the rain", entry="backup", tokens=Usage(total_tokens=42))


def test_the_cli_history_names_the_server_and_what_it_asked():
    line = render_history([SAMPLING_RECORD])
    assert line == ("2026-12-03T09:00:00+00:00  turn 1 step 1  MCP server writer asked the "
                    "model on backup (42 tokens): A headline for: the rain")


async def test_the_console_audit_shows_a_sampling_record(
    api: ApiServer, model: ScriptedModelServer, console: Console,
):
    """In chromium: the audit trail's sampling row names the server, the entry and what it
    asked, at the step of its call."""
    trigger = script(model, unique("console-sampling"), ScriptedReply(content="ok"))
    page = console.page
    await page.goto(f"{api.url}/")
    cid = await console.start(f"Hello ({trigger}).")
    record = SAMPLING_RECORD.model_dump(mode="json")
    await page.route(f"**/conversations/{quote(cid)}/history",
                     lambda route: route.fulfill(json=[record]))
    await page.reload()
    await page.get_by_test_id("tab-audit").click()
    row = page.get_by_test_id("audit").locator('[data-testid="audit-row"][data-kind="sampling"]')
    await expect(row).to_contain_text("turn 1 · step 1 · sampling")
    await expect(row.get_by_test_id("audit-sampling")).to_have_text(
        "MCP server writer asked the model (backup): A headline for: the rain")
    await expect(row).to_contain_text("42")
    assert console.errors == []
