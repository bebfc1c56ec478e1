"""Sampling within the conversation's budgets: the calls of one round that may sample split what
is left, a request's prompt counts against its call's share, and a cost budget is never spent on
a model whose price is unknown (`rules.sampling`, `activities.mcp.sampling`)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import httpx
from mcp.types import CreateMessageRequestParams, ErrorData, SamplingMessage, TextContent
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from durable_react_agent.activities.endpoints import Endpoints
from durable_react_agent.activities.mcp import McpToolbox, load_mcp_config
from durable_react_agent.activities.mcp.sampling import CallSampler
from durable_react_agent.activities.models import ModelEntry, Models
from durable_react_agent.activities.pricing import ModelPrice
from durable_react_agent.activities.settings import ActivitySettings
from durable_react_agent.activities.tools import ToolRegistry
from durable_react_agent.contract import SamplingGrant, Usage
from durable_react_agent.rules.sampling import RequestPrice, answer_room, call_grant
from durable_react_agent.testing import ScriptedModelServer, ScriptedReply
from durable_react_agent.worker.app import build_worker
from durable_react_agent.workflows.conversation import ConversationWorkflow
from tests.helpers import script, settled, start, tool_call, unique
from tests.mcp_support import tool_env

UNPRICED = "the model's price is unknown, and a conversation with a cost budget cannot spend " \
           "on a model whose cost it cannot count"


def test_the_calls_of_a_round_that_may_sample_split_what_is_left():
    """Two calls start at once: each gets half of what is left, never the whole. A call that
    starts later gets what neither the conversation used nor the calls in flight hold."""
    used = Usage(total_tokens=400, cost_usd=0.2)
    first = call_grant("m", 1_000, 1.0, used, [], starting=2)
    second = call_grant("m", 1_000, 1.0, used, [first], starting=1)
    assert (first.tokens_left, second.tokens_left) == (300, 300)
    assert (first.usd_left, second.usd_left) == (0.4, 0.4)
    later = call_grant("m", 1_000, 1.0, Usage(total_tokens=700, cost_usd=0.5), [first],
                       starting=1)
    assert (later.tokens_left, later.usd_left) == (0, 0.1)
    assert call_grant("m", None, None, used, [first], starting=3) == SamplingGrant(model="m")
    assert first.spent is second.spent is None


def test_a_budget_spent_or_uncounted_grants_nothing():
    """As the model's own calls stop there (`rules.stopping.over_budget`): a budget used up,
    or one the usage cannot be counted against (a call of unknown price, or one that reported
    no usage)."""
    spent = call_grant("m", 1_000, None, Usage(total_tokens=1_000), [], starting=1)
    assert spent.spent == "the conversation used its token budget (1000 tokens)"
    unpriced = Usage(total_tokens=10, cost_usd=None, cost_note="no price for 'x'",
                     unpriced_calls=1)
    uncounted = call_grant("m", None, 1.0, unpriced, [], starting=1)
    assert "cost budget ($1) cannot be enforced" in uncounted.spent
    assert answer_room(uncounted, Usage(), 10, RequestPrice(0.0, 0.0)) == uncounted.spent
    assert call_grant("m", 1_000, None, unpriced, [], starting=1).spent is None


def test_a_requests_prompt_counts_against_what_its_call_has_left():
    grant = SamplingGrant(tokens_left=100)
    assert answer_room(grant, Usage(), 60, None) == 40
    assert answer_room(grant, Usage(total_tokens=30), 60, None) == 10
    assert answer_room(grant, Usage(total_tokens=30), 70, None) == (
        "the request's prompt (about 70 tokens) leaves no room for an answer: this call has 70 "
        "left of the conversation's token budget")
    assert answer_room(grant, Usage(total_tokens=100), 1, None) == \
        "the conversation's token budget is used up"
    assert answer_room(grant, Usage(total_tokens=5, unmetered_calls=1), 1, None).startswith(
        "a model call of this tool call reported no token usage")
    assert answer_room(SamplingGrant(), Usage(total_tokens=10**9), 10**6, None) is None


def test_a_cost_budget_bounds_the_answer_and_refuses_an_unknown_price():
    grant = SamplingGrant(usd_left=0.001)
    price = RequestPrice(prompt_usd=0.0004, usd_per_answer_token=0.00001)
    assert answer_room(grant, Usage(), 10, price) == 60  # ($0.001 - $0.0004) / $0.00001
    assert answer_room(grant, Usage(cost_usd=0.0005), 10, price) == 10
    assert answer_room(grant, Usage(cost_usd=0.0006), 10, price).startswith(
        "the request's prompt and an answer cost more than the $0.0004")
    assert answer_room(grant, Usage(), 10, None) == UNPRICED
    assert answer_room(SamplingGrant(usd_left=0.001, tokens_left=30), Usage(), 10, price) == 20
    assert answer_room(grant, Usage(), 10, RequestPrice(0.0, 0.0)) is None  # free
    assert answer_room(SamplingGrant(), Usage(), 10, None) is None  # no cost budget


def ask(text: str) -> CreateMessageRequestParams:
    return CreateMessageRequestParams(
        messages=[SamplingMessage(role="user", content=TextContent(type="text", text=text))],
        max_tokens=100)


async def test_an_entry_whose_price_is_unknown_is_not_asked_under_a_cost_budget(
    model: ScriptedModelServer, activity_settings: ActivitySettings,
):
    """Its fallback with a price answers; with none, the server is refused and no model is
    asked. Without a cost budget the entry answers."""
    story = script(model, unique("story"), ScriptedReply(content="Sun Returns"))
    mystery = ModelEntry(model="mystery-model", base_url=model.base_url, api_key_env=None)
    priced = ModelEntry(model="priced-model", base_url=model.base_url, api_key_env=None,
                        price=ModelPrice(input_per_mtok=1.0, output_per_mtok=2.0))
    models = Models({"main": mystery, "backup": priced}, default="main",
                    fallbacks={"main": ["backup"]})
    endpoints = Endpoints(dataclasses.replace(activity_settings, models=models))
    alone = Endpoints(dataclasses.replace(activity_settings, models=Models(
        {"main": mystery}, default="main")))
    budget = SamplingGrant(model="main", usd_left=1.0)

    async def sample(endpoints: Endpoints, grant: SamplingGrant) -> tuple[object, list]:
        async def in_the_tools_activity():  # as the call's activity answers it
            sampler = CallSampler(endpoints, grant, "writer")
            return await sampler.sample(ask(story)), sampler.sampled
        return await tool_env("writer__headline").run(in_the_tools_activity)

    fell_back, [sampled] = await sample(endpoints, budget)
    assert fell_back.content.text == "Sun Returns"
    assert sampled.entry == "backup" and sampled.usage.cost_usd > 0
    refused, none = await sample(alone, budget)
    assert isinstance(refused, ErrorData) and refused.message == UNPRICED and none == []
    assert model.count(story) == 1
    unbudgeted, _ = await sample(alone, SamplingGrant(model="main"))
    assert unbudgeted.content.text == "Sun Returns"


async def test_two_sampling_calls_of_one_round_each_get_half_of_what_is_left(
    client: Client, model: ScriptedModelServer, activity_settings: ActivitySettings,
    tmp_path: Path, http_ports: dict[str, int],
):
    """End to end, with a server over streamable HTTP (its requests name their calls, so both
    run at once on one session): the model asks for two headlines in one reply; each call is
    granted half of what step 1 left of the token budget, not the whole; both are answered
    and counted."""
    url = f"http://127.0.0.1:{http_ports['streamable']}/mcp"
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps({"mcpServers": {"press": {
        "url": url, "risk": "safe", "sampling": True, "timeout_s": 20}}}))
    stories = [unique("story"), unique("story")]
    for story in stories:
        script(model, story, ScriptedReply(content="Rain Stops Play"))
    trigger = script(model, unique("halves"), ScriptedReply(tool_calls=[
        tool_call("press__headline", {"text": story}) for story in stories]),
        ScriptedReply(content="two headlines"))
    queue, budget = unique("halves"), 50_000
    async with httpx.AsyncClient() as http, McpToolbox(load_mcp_config(path, {})) as toolbox:
        async with build_worker(client, queue, activity_settings, http, ToolRegistry([]),
                                mcp=toolbox):
            handle = await start(client, queue, trigger, max_total_tokens=budget)
            status = await settled(handle, timeout_s=60)
            trail = await handle.query(ConversationWorkflow.history)
            grants = [json.loads(e.activity_task_scheduled_event_attributes.input.payloads[0]
                                 .data)["sampling"]
                      async for e in handle.fetch_history_events()
                      if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
                      and e.activity_task_scheduled_event_attributes.activity_type.name
                      == "press__headline"]
            await handle.signal(ConversationWorkflow.end)
            await handle.result()
    assert status.final_answer == "two headlines", status
    left = budget - next(r for r in trail if r.kind == "step").tokens.total_tokens
    assert sorted(g["tokens_left"] for g in grants) == [left // 2, left - left // 2]
    assert [model.count(story) for story in stories] == [1, 1]
    assert status.llm_calls == 4  # two steps, and the two requests
