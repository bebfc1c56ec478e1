"""Trust at the new seams (issue 30): what comes from outside (a model's tool names, a caller's
`model` and `traceparent`, an endpoint's usage and model name) is bounded, checked or priced
where it comes in, and the HTTP API says what it serves."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any, ClassVar

import httpx
import pytest
from ag_ui.core import RunAgentInput
from pydantic import ValidationError
from starlette.requests import Request
from starlette.routing import Route
from temporalio import activity
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.contrib.workflow_streams import WorkflowStreamClient
from temporalio.runtime import MetricBuffer, Runtime, TelemetryConfig
from temporalio.testing import ActivityEnvironment

from durable_react_agent.activities import telemetry as activity_telemetry
from durable_react_agent.activities.llm import LLMActivities
from durable_react_agent.activities.llm_stream import counted
from durable_react_agent.activities.models import ModelEntry, Models
from durable_react_agent.activities.owner_limits import OwnerLimitActivities
from durable_react_agent.activities.pricing import ModelPrice, Prices
from durable_react_agent.activities.profiles import AgentProfile, Profiles
from durable_react_agent.activities.settings import ActivitySettings
from durable_react_agent.activities.tool_runner import ToolActivities
from durable_react_agent.activities.tools.registry import RESERVED_NAMES, name_problem
from durable_react_agent.activities.webhooks import WebhookActivities
from durable_react_agent.api.app import create_app
from durable_react_agent.api.deps import caller_trace, canonical_traceparent
from durable_react_agent.api.routes import every_route
from durable_react_agent.api.settings import ApiSettings
from durable_react_agent.client.connection import TemporalSettings
from durable_react_agent.contract import ChatMessage, LLMStepRequest, SummaryRequest, Usage
from durable_react_agent.rules import delta
from durable_react_agent.rules.tracing import parse_traceparent, tool_label
from durable_react_agent.testing import ScriptedModelServer, ScriptedReply
from durable_react_agent.worker.app import build_worker, local_activities, model_activities
from tests.api_support import concrete
from tests.fake_tools import registry_with_test_tools
from tests.helpers import script, settled, start, tool_call, unique

TRACE, SPAN = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
VALID = f"00-{TRACE}-{SPAN}-01"
# Each is refused: `int(x, 16)` or a loose reading would take most of them.
HOSTILE = [
    f"00-+{TRACE[1:]}-{SPAN}-01", f"00-0x{TRACE[2:]}-{SPAN}-01",
    f"00-{TRACE[:4]}_{TRACE[5:]}-{SPAN}-01",
    f"00- {TRACE[1:]}-{SPAN}-01", f"00-{TRACE[:16]} {TRACE[17:]}-{SPAN}-01",
    f"00-{TRACE.upper()}-{SPAN}-01", f"00-{TRACE}-{SPAN.upper()}-01", VALID.upper(),
    f"00-{TRACE[:-1]}-{SPAN}-01", f"00-{TRACE}0-{SPAN}-01", f"00-{TRACE}-{SPAN[:-1]}-01",
    f"00-{TRACE}-{SPAN}0-01", f"00-{TRACE}-{SPAN}-1", f"00-{TRACE}-{SPAN}-zz",
    f"00-{'0' * 32}-{SPAN}-01", f"00-{TRACE}-{'0' * 16}-01",
    f"ff-{TRACE}-{SPAN}-01", f"00-{TRACE}-{SPAN}-01-extra", "00-" + "a" * 1_000_000,
    VALID + "-" + "0" * 100_000, f"00-{TRACE}-{SPAN}-0\ud800", f"00-\udfff{TRACE[1:]}-{SPAN}-01",
    f"00-\u0664{TRACE[1:]}-{SPAN}-01",  # an Arabic-Indic 4: int() takes any Unicode digit
    f"00-\uff14{TRACE[1:]}-{SPAN}-01",  # a fullwidth 4
    "", "-".join(["00", TRACE, SPAN]), "00--" + TRACE + "-" + SPAN + "-01",
]


# ----- metric labels -----

def test_a_tool_label_is_a_tool_of_the_catalog_or_one_label_for_every_invented_name():
    catalog = {"get_weather": object(), "x" * 300: object()}
    assert tool_label("get_weather", catalog) == "get_weather"
    invented = {tool_label(f"made_up_{i}", catalog) for i in range(1000)}
    assert invented == {"(unknown)"}
    assert tool_label("x" * 300, catalog) == "x" * 64  # bounded in length too
    assert tool_label("", catalog) == "(unknown)"


def test_a_model_label_is_a_model_the_worker_was_configured_with_or_other():
    settings = ActivitySettings(
        openai_model="house-7b",
        models=Models({"main": ModelEntry(model="gpt-4.1"),
                       "local": ModelEntry(model="qwen2.5:7b")}),
        prices=Prices(overrides={"priced-9b": ModelPrice(input_per_mtok=0, output_per_mtok=0)}),
        profiles=Profiles({"researcher": AgentProfile(description="d", system_prompt="p",
                                                      tools=[], model="profiled-3b")}))
    known = activity_telemetry.known_models(settings)
    # With AGENT_MODELS its entries are the models: OPENAI_MODEL names none of them.
    assert known == {"gpt-4.1", "qwen2.5:7b", "priced-9b", "profiled-3b", "gpt-4o-mini"}
    assert activity_telemetry.model_label("qwen2.5:7b", known) == "qwen2.5:7b"
    chosen = {activity_telemetry.model_label(f"caller-{i}", known) for i in range(1000)}
    assert chosen == {"(other)"}
    single = activity_telemetry.known_models(ActivitySettings(openai_model="m" * 200))
    assert activity_telemetry.model_label("m" * 200, single) == "m" * 64


@pytest.fixture(scope="module")
def metric_buffer() -> tuple[Runtime, MetricBuffer]:
    buffer = MetricBuffer(100_000)
    return Runtime(telemetry=TelemetryConfig(metrics=buffer)), buffer


async def test_invented_tool_and_model_names_reach_the_metrics_as_shared_labels(
        temporal_address: str, activity_settings: ActivitySettings, model: ScriptedModelServer,
        metric_buffer: tuple[Runtime, MetricBuffer]):
    runtime, buffer = metric_buffer
    client = await Client.connect(temporal_address, data_converter=pydantic_data_converter,
                                  runtime=runtime)
    invented_tool, invented_model = unique("made_up_tool"), unique("made-up-model")
    trigger = script(model, unique("labels"),
                     ScriptedReply(tool_calls=[tool_call(invented_tool, {}),
                                               tool_call("get_weather", {"location": "Paris"})]),
                     ScriptedReply(content="Done."))
    queue = unique("labels")
    async with httpx.AsyncClient(timeout=10) as http:
        async with build_worker(client, queue, activity_settings, http,
                                registry_with_test_tools()):
            handle = await start(client, queue, trigger, model=invented_model, one_shot=True)
            await settled(handle)
    updates = buffer.retrieve_updates()
    calls = {u.attributes["tool"] for u in updates if u.metric.name == "agent_tool_calls"}
    assert calls == {"(unknown)", "get_weather"}
    models = {u.attributes["gen_ai_request_model"] for u in updates
              if u.metric.name.startswith("gen_ai_client_")}
    assert models == {"(other)"}
    assert not any(invented_tool in str(u.attributes) or invented_model in str(u.attributes)
                   for u in updates)


# ----- budgets -----

def endpoint_usage(**counts: Any) -> SimpleNamespace:
    return SimpleNamespace(prompt_tokens_details=None, **counts)


def test_a_total_the_endpoint_leaves_out_or_understates_counts_its_parts():
    for total in ({"total_tokens": None}, {"total_tokens": 0}, {}, {"total_tokens": 7}):
        usage = counted(endpoint_usage(prompt_tokens=900, completion_tokens=100, **total))
        assert usage.total_tokens == 1000, total
    assert counted(endpoint_usage(prompt_tokens=10, completion_tokens=5,
                                  total_tokens=20)).total_tokens == 20  # reasoning, say
    negative = counted(endpoint_usage(prompt_tokens=-1_000_000, completion_tokens=-5,
                                      total_tokens=-1_000_005))
    assert (negative.prompt_tokens, negative.completion_tokens, negative.total_tokens) == (0, 0, 0)


def test_nothing_is_free_by_its_address_only_by_the_configuration():
    usage = Usage(prompt_tokens=10_000, completion_tokens=1_000, total_tokens=11_000)
    for url in ("http://localhost:11434/v1", "https://ollama.example.com/v1",
                "http://my-ollama-proxy:8080/v1", "http://10.0.0.5:11434"):
        cost, note = Prices(url).cost("qwen2.5:7b", usage)
        assert cost is None and "qwen2.5:7b" in note, url
        assert Prices(url).cost("gpt-4o-mini", usage)[0] > 0, url  # a proxy to a paid model
    free = Prices("http://localhost:11434/v1",
                  {"qwen2.5:7b": ModelPrice(input_per_mtok=0, output_per_mtok=0)})
    assert free.cost("qwen2.5:7b", usage) == (0.0, None)


class LyingEndpoint:
    """An OpenAI-compatible client whose answers name a model of its choosing, not the one
    asked for: one the worker prices at $0."""

    base_url = "http://endpoint.test/v1"

    def __init__(self, reported: str) -> None:
        self.reported = reported
        self.asked: list[str] = []
        self.chat = SimpleNamespace(completions=SimpleNamespace(
            create=self.create, with_streaming_response=SimpleNamespace(create=self.stream)))

    async def create(self, *, model: str, **_: Any) -> Any:
        self.asked.append(model)
        message = SimpleNamespace(content="the summary")
        return SimpleNamespace(model=self.reported, usage=endpoint_usage(**self.USAGE),
                               choices=[SimpleNamespace(message=message)])

    USAGE: ClassVar[dict[str, int]] = {"prompt_tokens": 100_000, "completion_tokens": 10_000,
                                       "total_tokens": 110_000}

    @contextlib.asynccontextmanager
    async def stream(self, *, model: str, **_: Any) -> AsyncIterator[SimpleNamespace]:
        """The streamed reply, as server-sent events."""
        self.asked.append(model)
        yield SimpleNamespace(iter_lines=self.lines, http_request=None)

    async def lines(self) -> AsyncIterator[str]:
        for chunk in ({"model": self.reported, "usage": None, "choices": [
                          {"finish_reason": "stop", "delta": {"content": "hello"}}]},
                      {"model": self.reported, "usage": self.USAGE, "choices": []}):
            yield f"data: {json.dumps(chunk)}"
            yield ""
        yield "data: [DONE]"
        yield ""


class NoLiveStream:
    """The conversation's token stream, which a lone activity has none of."""

    async def __aenter__(self) -> NoLiveStream:
        return self

    async def __aexit__(self, *_: object) -> None:
        return None

    def topic(self, *_: object, **__: object) -> SimpleNamespace:
        return SimpleNamespace(publish=lambda event: None)


async def test_a_call_is_priced_by_its_entrys_model_not_by_the_name_the_endpoint_answers(
        monkeypatch):
    monkeypatch.setattr(WorkflowStreamClient, "from_within_activity",
                        staticmethod(lambda **_: NoLiveStream()))
    endpoint = LyingEndpoint(reported="house-free")
    settings = ActivitySettings(openai_model="gpt-4o-mini", prices=Prices(overrides={
        "house-free": ModelPrice(input_per_mtok=0, output_per_mtok=0)}))
    llm = LLMActivities(settings, client=endpoint)  # type: ignore[arg-type]
    env, hello = ActivityEnvironment(), [ChatMessage(role="user", content="hello")]
    parts, sent = delta.diff(None, hello)  # the first step of a conversation: its prompt whole
    reply = await env.run(llm.llm_step, LLMStepRequest(model=None, parts=parts,
                                                       digest=sent.digest))
    summary = await env.run(llm.summarize, SummaryRequest(
        model=None, previous=None, messages=hello, first_turn=1, last_turn=1, max_tokens=100))
    price = Prices().cost("gpt-4o-mini", reply.usage)[0]
    assert endpoint.asked == ["gpt-4o-mini", "gpt-4o-mini"] and reply.model == "house-free"
    assert price > 0
    assert reply.usage.cost_usd == pytest.approx(price)
    assert summary.usage.cost_usd == pytest.approx(price)


# ----- a caller's traceparent -----

def test_the_workflow_reads_only_the_strict_w3c_traceparent():
    assert parse_traceparent(VALID) == (int(TRACE, 16), int(SPAN, 16))
    assert parse_traceparent(f"00-{TRACE}-{SPAN}-00") == (int(TRACE, 16), int(SPAN, 16))
    for value in [*HOSTILE, " " + VALID, VALID + " ", VALID + "\n", "\t" + VALID,
                  f"01-{TRACE}-{SPAN}-01", None]:
        assert parse_traceparent(value) is None, repr(value)[:80]


def request_with(traceparent: str) -> Request:
    return Request({"type": "http", "headers": [(b"traceparent", traceparent.encode("latin-1"))]})


def test_the_api_keeps_a_callers_traceparent_only_as_the_propagator_writes_it_again():
    for value in HOSTILE:
        assert canonical_traceparent(value) is None, repr(value)[:80]
    for value in (VALID, f" \t{VALID} ", f"cc-{TRACE}-{SPAN}-01-what-a-later-version-adds"):
        assert caller_trace(request_with(value)) == VALID, value
    for value in (VALID.upper(), f"00-0x{TRACE[2:]}-{SPAN}-01", f"00-{TRACE}-{SPAN}-01-x"):
        assert caller_trace(request_with(value)) is None, value
    assert caller_trace(Request({"type": "http", "headers": []})) is None
    # what the API keeps, the workflow reads
    assert parse_traceparent(caller_trace(request_with(f" {VALID}"))) is not None


# ----- the HTTP API -----

def loopback(app: Any) -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    return httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1")


async def test_a_405_names_every_method_served_at_its_path():
    app = create_app(ApiSettings(), TemporalSettings())
    app.state.client = None  # nothing here reaches Temporal
    async with loopback(app) as api:
        r = await api.options("/conversations")
        assert r.status_code == 405 and r.json() == {"detail": "Method Not Allowed"}
        assert set(r.headers["allow"].split(", ")) == {"GET", "POST"}
        r = await api.delete("/conversations/c-1")
        assert r.status_code == 405 and r.headers["allow"] == "GET"
        for route in every_route(app.routes):
            if isinstance(route, Route) and "PATCH" not in route.methods:
                r = await api.patch(concrete(route.path))
                assert r.status_code == 405, route.path
                assert route.methods <= set(r.headers["allow"].split(", ")), route.path


def test_the_published_agui_input_requires_each_messages_role():
    doc = create_app(ApiSettings(), TemporalSettings()).openapi()
    schemas = doc["components"]["schemas"]
    union = schemas["RunAgentInput"]["properties"]["messages"]["items"]["discriminator"]
    assert union["propertyName"] == "role" and len(union["mapping"]) >= 5
    for ref in union["mapping"].values():
        assert "role" in schemas[ref.rsplit("/", 1)[1]]["required"], ref
    assert "type" in schemas["TextPart"]["required"]  # a content part's discriminator, too
    with pytest.raises(ValidationError, match="role"):  # as the server checks it
        RunAgentInput.model_validate({"threadId": "t", "runId": "r", "state": None, "tools": [],
                                      "context": [], "forwardedProps": None,
                                      "messages": [{"id": "m", "content": "hi"}]})


# ----- tool names -----

def test_no_tool_may_take_the_name_of_an_activity_the_runtime_registers(
        activity_settings: ActivitySettings):
    """A tool runs as an activity of its own name: one named like the runtime's own (`notify`,
    `llm_step`...) would shadow it."""
    tools = ToolActivities(registry_with_test_tools(), activity_settings, None)  # type: ignore[arg-type]
    runtime = [*model_activities(LLMActivities(activity_settings)), *local_activities(tools, OwnerLimitActivities(activity_settings, None)),
               WebhookActivities(None, None).notify]  # type: ignore[arg-type]
    names = {activity._Definition.must_from_callable(fn).name for fn in runtime
             if fn != tools.run_tool}  # the dynamic one: each tool under its own name
    assert names == {"llm_step", "summarize", "review_call", "list_tools", "recall_memories",
                     "mcp_listing", "judge_calls", "keep_grants", "notify",
                     "lease_owner_share", "closed_conversations"}
    assert names <= RESERVED_NAMES
    assert all(name_problem(name) for name in names)
