"""Model entries (DESIGN "Models and providers"): an entry that is down falls back to the next,
and the audit names the entry that answered; a request's own fault does not fall back;
`Retry-After` sets the next attempt's delay; a prompt longer than the model's window is folded
harder and asked again; `max_requests_per_s` holds across two worker processes."""

from __future__ import annotations

import asyncio
import dataclasses
import io
import json
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
import pytest_asyncio
from temporalio.client import Client

from durable_react_agent.activities.models import (
    ModelEntry,
    Models,
    ModelsError,
    model_queue,
    model_routes,
)
from durable_react_agent.activities.settings import ActivitySettings
from durable_react_agent.client.watch import Renderer
from durable_react_agent.contract import ConfirmRequest, LLMOptions, SayRequest, StreamEvent
from durable_react_agent.contract.state import ModelRoutes
from durable_react_agent.testing import ScriptedModelServer, ScriptedReply
from durable_react_agent.worker.app import build_worker
from durable_react_agent.workflows.conversation import ConversationWorkflow
from tests.devserver import free_port, worker_env
from tests.fake_tools import registry_with_test_tools
from tests.helpers import (
    reaches,
    replay,
    script,
    settled,
    start,
    steps_of,
    tool_call,
    unique,
)
from tests.processes import WorkerProcess

# Two attempts a second apart: an entry that is down is given up on quickly.
TWO_TRIES = LLMOptions(heartbeat_timeout_s=3, max_retry_interval_s=1, max_attempts=2)


def asked(model: ScriptedModelServer, trigger: str) -> list:
    """The chat requests of a scenario, in the order they came."""
    return [r for r in model.requests if r.trigger == trigger and r.kind == "chat"]


def models_file(tmp_path: Path, data: dict) -> Path:
    path = tmp_path / "models.json"
    path.write_text(json.dumps(data))
    return path


def test_entries_load_resolve_and_chain(tmp_path: Path):
    models = Models.load(models_file(tmp_path, {
        "models": {"main": {"model": "gpt-4o-mini", "max_requests_per_s": 8},
                   "backup": {"model": "qwen2.5:7b", "base_url": "http://localhost:11434/v1",
                              "api_key_env": None, "params": {"temperature": 0}},
                   "deep": {"model": "o4-mini", "params": {"reasoning_effort": "high"}}},
        "default": "main", "fallbacks": {"main": ["backup"], "deep": ["main", "backup"]}}))
    assert models.resolve(None) == ("main", models.entries["main"])
    assert models.resolve("deep")[1].params == {"reasoning_effort": "high"}
    # a model that is no entry runs on the default entry's endpoint, as before entries
    name, entry = models.resolve("gpt-4.1")
    assert (name, entry.model, entry.base_url) == ("main", "gpt-4.1", None)
    assert models.chain("deep") == ["deep", "main", "backup"]
    assert models.chain("gpt-4.1") == ["main", "backup"]
    assert models.api_key(models.entries["backup"], {}) == "unset"
    assert models.api_key(models.entries["main"], {"OPENAI_API_KEY": "sk"}) == "sk"
    routes = model_routes(models, "q")
    assert routes["model_queues"] == {"main": model_queue("q", "main")}
    assert model_routes(None, "q") == {}  # without AGENT_MODELS, calls route as before
    kept = ModelRoutes(entries=routes["model_entries"], default=routes["default_model_entry"],
                       fallbacks=routes["model_fallbacks"], queues=routes["model_queues"])
    assert kept.chain(None) == [None, "backup"] and kept.chain("deep") == [None, "main", "backup"]
    assert kept.chain("backup") == [None]
    assert kept.queue(None, None) == "q.model.main" and kept.queue("deep", "main") == "q.model.main"
    assert kept.queue("deep", None) is None
    assert ModelRoutes().chain("anything") == [None] and ModelRoutes().queue(None, None) is None


@pytest.mark.parametrize("data, why", [
    ({"models": {}}, "at least 1"),
    ({"models": {"a": {"model": "m"}}, "default": "b"}, "default names 'b'"),
    ({"models": {"a": {"model": "m"}}, "fallbacks": {"a": ["z"]}}, "'z'"),
    ({"models": {"a": {"model": "m"}}, "fallbacks": {"a": ["a"]}}, "repeat"),
    ({"models": {"a": {"model": "m", "params": {"messages": []}}}}, "may not set messages"),
    ({"models": {"a": {"model": "m", "max_requests_per_s": 0}}}, "greater than 0"),
    ({"models": {"a b": {"model": "m"}}}, "entry name"),
    ({"models": {"a": {"model": "m", "api_key": "sk-secret"}}}, "Extra inputs"),
])
def test_a_bad_models_file_is_refused_with_why(tmp_path: Path, data: dict, why: str):
    with pytest.raises(ModelsError, match=why):
        Models.load(models_file(tmp_path, data))
    with pytest.raises(ModelsError, match="cannot read"):
        Models.load(tmp_path / "missing.json")


@pytest_asyncio.fixture
async def entries_queue(client: Client, activity_settings: ActivitySettings,
                        model: ScriptedModelServer) -> AsyncIterator[str]:
    """A worker with two entries: `main` on an endpoint that is down for good, falling back to
    `backup` (the scripted model), and `strict`, which falls back too."""
    down = f"http://127.0.0.1:{free_port()}/v1"
    models = Models({"main": ModelEntry(model="main-model", base_url=down),
                     "backup": ModelEntry(model="backup-model", base_url=model.base_url),
                     "strict": ModelEntry(model="strict-model", base_url=model.base_url)},
                    default="main", fallbacks={"main": ["backup"], "strict": ["backup"]})
    queue = unique("entries")
    settings = dataclasses.replace(activity_settings, models=models)
    async with httpx.AsyncClient(timeout=10) as http:
        async with build_worker(client, queue, settings, http, registry_with_test_tools()):
            yield queue


async def test_an_entry_that_is_down_falls_back_and_the_audit_names_who_answered(
        client: Client, model: ScriptedModelServer, entries_queue: str):
    trigger = script(model, unique("fallback"), ScriptedReply(content="from the backup"),
                     ScriptedReply(content="again from the backup"))
    handle = await start(client, entries_queue, trigger, llm=TWO_TRIES)
    done = await settled(handle, timeout_s=60)
    assert (done.stop_reason, done.final_answer) == ("answered", "from the backup")
    step, = await steps_of(handle)
    assert step.entry == "backup"
    assert done.turns[-1].fallbacks == 1
    # the entry's own model, on its endpoint
    assert [r.body["model"] for r in asked(model, trigger)] == ["backup-model"]
    # The next turn falls back again, its prompt sent as a delta of the one the backup took.
    await handle.signal(ConversationWorkflow.say, SayRequest(text="more", request_id="m2"))
    again = await settled(handle, turn=2, timeout_s=60)
    assert again.final_answer == "again from the backup" and again.turns[-1].fallbacks == 1
    await handle.signal(ConversationWorkflow.end, None)
    await handle.result()
    await replay(handle, "model_fallback")


async def test_a_request_the_endpoint_refuses_does_not_fall_back(
        client: Client, model: ScriptedModelServer, entries_queue: str):
    trigger = script(model, unique("refused"), ScriptedReply(errors=[422], content="never"))
    handle = await start(client, entries_queue, trigger, model="strict", llm=TWO_TRIES)
    done = await settled(handle, timeout_s=60)
    assert done.stop_reason == "llm_error" and "422" in (done.error or "")
    assert [r.body["model"] for r in asked(model, trigger)] == ["strict-model"]
    assert done.turns[-1].fallbacks == 0


async def test_retry_after_sets_the_next_attempts_delay(
        client: Client, model: ScriptedModelServer, task_queue: str):
    trigger = script(model, unique("retry-after"),
                     ScriptedReply(errors=[429], retry_after="3", content="after the wait"))
    handle = await start(client, task_queue, trigger)
    done = await settled(handle, timeout_s=60)
    assert done.final_answer == "after the wait"
    first, second = asked(model, trigger)
    waited = second.at - first.at
    assert 2.8 <= waited < 8, waited  # the endpoint's 3 s, not the policy's first 1 s
    await replay(handle, "retry_after_429")


TOO_LONG = ("This model's maximum context length is 2048 tokens. However, your messages "
            "resulted in 2600 tokens. Please reduce the length of the messages.")


async def test_a_prompt_too_long_for_the_model_is_folded_and_asked_again(
        client: Client, model: ScriptedModelServer, task_queue: str):
    trigger = script(model, unique("too-long"),
                     ScriptedReply(content="turn one " * 300),
                     ScriptedReply(errors=[400], error_message=TOO_LONG, errors_per_step=True,
                                   error_code="context_length_exceeded", content="it fits now"),
                     ScriptedReply(errors=[400, 400], error_message=TOO_LONG, content="never",
                                   errors_per_step=True))
    handle = await start(client, task_queue, trigger, context_budget_tokens=3_000)
    await settled(handle)
    await handle.signal(ConversationWorkflow.say, SayRequest(text="and now?", request_id="m2"))
    done = await settled(handle, turn=2, timeout_s=60)
    assert (done.stop_reason, done.final_answer) == ("answered", "it fits now")
    history = await handle.query(ConversationWorkflow.history)
    assert any(r.kind == "summary" and r.turn == 2 for r in history)  # folded harder, then asked
    assert done.context.folded_turns >= 1
    # Still too long after the harder fold: the turn stops, and says the sizes.
    await handle.signal(ConversationWorkflow.say, SayRequest(text="once more", request_id="m3"))
    stopped = await settled(handle, turn=3, timeout_s=60)
    assert stopped.stop_reason == "llm_error"
    assert "too long for the model even after folding" in stopped.error
    assert "half of its 1,536-token budget (the model's window: 2,048 tokens)" in stopped.error
    assert "maximum context length is 2048 tokens" in stopped.error


@pytest.mark.long  # a stress-scale run: `make test-long`
async def test_max_requests_per_s_holds_across_two_worker_processes(
        client: Client, model: ScriptedModelServer, temporal_address: str, tmp_path: Path):
    """12 model calls on an entry limited to 2 per second, over two worker processes: the
    server dispatches the entry's task queue at that rate, so they take at least 4 s."""
    queue = unique("rate")
    path = models_file(tmp_path, {"models": {"limited": {
        "model": "scripted", "base_url": model.base_url, "max_requests_per_s": 2}}})
    workers = [WorkerProcess(worker_env(temporal_address, queue, model.base_url,
                                        tmp_path / "data", AGENT_MODELS=str(path)),
                             tmp_path / f"w{n}") for n in range(2)]
    for n, worker in enumerate(workers):
        (tmp_path / f"w{n}").mkdir()
        worker.start()
    try:
        triggers = [script(model, unique("rate"), ScriptedReply(content=f"answer {n}"))
                    for n in range(12)]
        handles = await asyncio.gather(*(start(client, queue, t, one_shot=True)
                                         for t in triggers))
        results = await asyncio.wait_for(asyncio.gather(*(h.result() for h in handles)), 90)
    finally:
        for worker in workers:
            worker.stop()
    assert [r.final_answer for r in results] == [f"answer {n}" for n in range(12)]
    arrivals = sorted(r.at for t in triggers for r in asked(model, t))
    assert len(arrivals) == 12
    assert arrivals[-1] - arrivals[0] >= 4.0, arrivals[-1] - arrivals[0]
    assert all("worker started" in w.log(1) for w in workers)


async def test_worker_roles_split_workflow_tasks_model_calls_and_tool_runs(
        client: Client, model: ScriptedModelServer, temporal_address: str, tmp_path: Path):
    """Three processes, `--role workflows`, `models` and `tools`, on one task queue: a
    conversation with a tool call and an approval is served by all three, each doing its own."""
    queue = unique("roles")
    trigger = script(model, unique("roles"),
                     ScriptedReply(tool_calls=[tool_call("get_weather", {"location": "Paris"}),
                                               tool_call("create_note", {"title": unique("r"),
                                                                         "body": "b"})]),
                     ScriptedReply(content="Both done."))
    workers = {}
    for role in ("workflows", "models", "tools"):
        (tmp_path / role).mkdir()
        workers[role] = WorkerProcess(worker_env(temporal_address, queue, model.base_url,
                                                 tmp_path / "data"), tmp_path / role,
                                      args=("--role", role))
        workers[role].start()
    try:
        handle = await start(client, queue, trigger)
        waiting = await reaches(handle, "waiting_for_confirmation", timeout_s=60)
        await handle.signal(ConversationWorkflow.confirm, ConfirmRequest(
            request_id="c1", call_ids=[waiting.pending_confirmations[0].call_id], approver="op"))
        done = await settled(handle, timeout_s=60)
    finally:
        for worker in workers.values():
            worker.stop()
    assert done.final_answer == "Both done." and done.tools_used == ["get_weather", "create_note"]
    logs = {role: worker.log(1) for role, worker in workers.items()}
    assert "llm reply" in logs["models"] and "llm reply" not in logs["workflows"]
    assert "tool done" in logs["tools"] and "tool done" not in logs["models"]
    assert "tool done" not in logs["workflows"]
    assert f"{queue}.models" in logs["models"] and f"{queue}.tools" in logs["tools"]


def test_watch_says_which_entry_took_over():
    out = io.StringIO()
    renderer = Renderer("conv", out)
    renderer.render(StreamEvent(kind="reset", turn=1, step=2,
                                text="the model entry failed: down; falling back to backup"))
    renderer.render(StreamEvent(kind="reset", turn=1, step=3, attempt=2))
    shown = out.getvalue()
    assert "[step 2] the model entry failed: down; falling back to backup; discard" in shown
    assert "[step 3] the model call is retried (attempt 2)" in shown
