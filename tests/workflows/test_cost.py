"""What a conversation costs in dollars: genai-prices for known models, AGENT_PRICES for private
ones (0 only where it says so), null (with a note) for an unknown model, and the cost budget."""

from __future__ import annotations

import json
from types import SimpleNamespace

import genai_prices
import pytest
from temporalio.client import Client

from durable_react_agent.activities.llm_stream import counted
from durable_react_agent.activities.pricing import ModelPrice, Prices, PricesError
from durable_react_agent.contract import Usage
from durable_react_agent.rules.stopping import child_share, dollars, over_budget
from durable_react_agent.testing import ScriptedModelServer, ScriptedReply
from tests.helpers import script, settled, start, steps_of, tool_call, unique


def catalog_price(model: str, u: Usage) -> float:
    return float(genai_prices.calc_price(
        genai_prices.Usage(input_tokens=u.prompt_tokens, output_tokens=u.completion_tokens,
                           cache_read_tokens=u.cached_tokens), model).total_price)


def test_prices_come_from_genai_prices_overrides_or_nowhere(tmp_path):
    usage = Usage(prompt_tokens=12_000, completion_tokens=800, total_tokens=12_800,
                  cached_tokens=4_000)
    cost, note = Prices().cost("gpt-4o-mini", usage)
    assert cost == pytest.approx(catalog_price("gpt-4o-mini", usage)) and note is None
    assert Prices().cost("gpt-4o-mini", usage.model_copy(update={"cached_tokens": 0}))[0] > cost
    # An endpoint genai-prices does not know (a local server) still prices a known model name.
    assert Prices("http://127.0.0.1:9/v1").cost("gpt-4o-mini", usage)[0] == cost
    cost, note = Prices().cost("my-private-model", usage)
    assert cost is None and "my-private-model" in note and "AGENT_PRICES" in note
    # An Ollama-looking endpoint may be a proxy in front of a paid one: no price is assumed.
    assert Prices("http://localhost:11434/v1").cost("qwen2.5:7b", usage)[0] is None

    prices = tmp_path / "prices.json"
    prices.write_text(json.dumps({"models": {"my-private-model": {
        "input_per_mtok": 1.0, "output_per_mtok": 2.0, "cached_input_per_mtok": 0.5}}}))
    loaded = Prices.load(prices)
    assert loaded.cost("my-private-model", usage) == (
        pytest.approx((8_000 * 1.0 + 4_000 * 0.5 + 800 * 2.0) / 1e6), None)
    assert ModelPrice(input_per_mtok=1, output_per_mtok=1).cost(usage) == pytest.approx(0.0128)
    prices.write_text('{"models": {"x": {"input_per_mtok": -1, "output_per_mtok": 0}}}')
    with pytest.raises(PricesError, match="AGENT_PRICES"):
        Prices.load(prices)


def test_costs_add_up_and_an_unknown_one_stays_unknown():
    a = Usage(total_tokens=1, cost_usd=0.25)
    assert (a + a).cost_usd == 0.5
    unknown = Usage(total_tokens=1, cost_usd=None, cost_note="no price known for model 'x'")
    total = a + unknown + a
    assert total.cost_usd is None and total.cost_note == unknown.cost_note
    assert total.total_tokens == 3
    assert dollars(0.000123) == "$0.000123" and dollars(0.0) == "$0" and dollars(1.5) == "$1.5"
    assert dollars(None, "why") == "unknown (why)"
    reported = SimpleNamespace(prompt_tokens=100, completion_tokens=5, total_tokens=105,
                               prompt_tokens_details=SimpleNamespace(cached_tokens=60))
    assert counted(reported).cached_tokens == 60
    assert counted(SimpleNamespace(prompt_tokens=1, completion_tokens=1, total_tokens=2)) \
        .cached_tokens == 0


async def test_a_known_model_is_priced_per_step_turn_and_conversation(
        client: Client, task_queue: str, model: ScriptedModelServer):
    trigger = script(model, unique("cost"),
                     ScriptedReply(tool_calls=[tool_call("get_weather", {"location": "Paris"})]),
                     ScriptedReply(content="Mild."))
    handle = await start(client, task_queue, trigger, model="gpt-4o-mini")
    status = await settled(handle)
    steps = [r.tokens for r in await steps_of(handle)]
    assert len(steps) == 2 and all(s.cached_tokens > 0 for s in steps[1:])
    for step in steps:
        assert step.cost_usd == pytest.approx(catalog_price("gpt-4o-mini", step))
    assert status.usage.cost_usd == pytest.approx(sum(s.cost_usd for s in steps))
    assert status.usage.cost_usd > 0 and status.usage.cost_note is None
    assert status.turns[-1].usage.cost_usd == pytest.approx(status.usage.cost_usd)


async def test_an_unknown_model_costs_null_with_a_note(client: Client, task_queue: str,
                                                      model: ScriptedModelServer):
    trigger = script(model, unique("cost-unknown"), ScriptedReply(content="hi"))
    handle = await start(client, task_queue, trigger, model="house-model-7b")
    status = await settled(handle)
    assert status.usage.cost_usd is None
    assert "house-model-7b" in status.usage.cost_note
    assert status.usage.total_tokens > 0


async def test_the_cost_budget_stops_the_turn(client: Client, task_queue: str,
                                             model: ScriptedModelServer):
    trigger = script(model, unique("cost-budget"),
                     ScriptedReply(tool_calls=[tool_call("get_weather", {"location": "Paris"})]),
                     ScriptedReply(tool_calls=[tool_call("get_weather", {"location": "Rome"})]),
                     ScriptedReply(content="never reached"))
    handle = await start(client, task_queue, trigger, model="gpt-4o-mini", max_cost_usd=1e-7)
    status = await settled(handle)
    assert status.stop_reason == "budget_exceeded"
    assert "cost budget" in status.error and "$0.0000001" in status.error
    assert status.llm_calls == 1  # the first step's cost already passed the budget


def test_what_is_known_of_a_cost_keeps_counting_when_one_call_is_unpriced():
    a = Usage(total_tokens=1, cost_usd=0.25)
    unknown = Usage(total_tokens=1, cost_usd=None, cost_note="x", unpriced_calls=1)
    total = a + unknown + a
    assert (total.cost_usd, total.known_cost, total.unpriced) == (None, 0.5, 1)
    # a state carried from a version that did not count the unpriced calls
    assert Usage(cost_usd=None).unpriced == 1 and Usage(cost_usd=None).known_cost == 0.0


def test_budgets_fail_closed_when_usage_cannot_be_measured():
    unpriced = Usage(total_tokens=10, cost_usd=None, cost_note="no price known for model 'x'",
                     known_cost_usd=0.01, unpriced_calls=2)
    why = over_budget(unpriced, None, 5.0)
    assert "cost of 2 model call(s) is unknown" in why and "cannot be enforced" in why
    assert "$0.01 is known" in why
    assert over_budget(unpriced, 1000, None) is None  # no dollar cap: nothing to enforce
    unmetered = Usage(cost_usd=None, cost_note="the endpoint reported no usage", unmetered_calls=1)
    assert "reported no token usage" in over_budget(unmetered, 1000, None)
    assert "reported no usage" in over_budget(unmetered, None, 1.0)


def test_a_subagents_share_is_what_is_left_split_with_its_siblings():
    assert child_share(None, 5, 0, 1) is None
    assert child_share(1.0, 0.2, 0.0, 2) == pytest.approx(0.4)  # two start: each half of 0.8
    assert child_share(1.0, 0.2, 0.4, 1) == pytest.approx(0.4)  # one is running with its half
    assert child_share(1.0, 0.9, 0.4, 1) == 0.0  # nothing left: it does not start


async def test_an_endpoint_that_reports_no_usage_costs_unknown_not_nothing(
        client: Client, task_queue: str, model: ScriptedModelServer):
    trigger = script(model, unique("no-usage"), ScriptedReply(content="hi", no_usage=True))
    handle = await start(client, task_queue, trigger, model="gpt-4o-mini")
    status = await settled(handle)
    assert status.stop_reason == "answered"
    assert status.usage.cost_usd is None and status.usage.unmetered_calls == 1
    assert "reported no usage" in status.usage.cost_note

    trigger = script(model, unique("no-usage-budget"),
                     ScriptedReply(tool_calls=[tool_call("get_weather", {"location": "Oslo"})],
                                   no_usage=True),
                     ScriptedReply(content="never reached"))
    handle = await start(client, task_queue, trigger, model="gpt-4o-mini", max_cost_usd=1.0)
    status = await settled(handle)
    assert status.stop_reason == "budget_exceeded" and "reported no usage" in status.error
    assert status.llm_calls == 1


async def test_one_unpriced_call_stops_a_dollar_budget_and_says_so(
        client: Client, task_queue: str, model: ScriptedModelServer):
    trigger = script(model, unique("unpriced-budget"),
                     ScriptedReply(tool_calls=[tool_call("get_weather", {"location": "Oslo"})]),
                     ScriptedReply(content="never reached"))
    handle = await start(client, task_queue, trigger, model="house-model-7b", max_cost_usd=1.0)
    status = await settled(handle)
    assert status.stop_reason == "budget_exceeded", status
    assert "house-model-7b" in status.error and "cannot be enforced" in status.error
    assert status.usage.cost_usd is None and status.usage.unpriced_calls == 1
    assert status.llm_calls == 1  # the budget is never silently not enforced
