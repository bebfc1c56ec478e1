"""A window that fits the model, and local models as first-class entries: the worker learns a
model's window from each server kind that says it (llama.cpp, vLLM, LM Studio, Ollama), a
conversation keeps its prompts within the smaller of its budget and that window (shown in
`status`) and refuses a message no fold makes room for; an entry's own window, reply size,
deadline, heartbeat and price are what its calls use."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
import pytest_asyncio
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowUpdateFailedError

from activities.models import ModelEntry, Models
from activities.settings import ActivitySettings
from activities.windows import OLLAMA_DEFAULT_CTX, Windows
from client.render import render_status
from contract import EndRequest, SayRequest
from rules.context import fitted_budget
from scripted_model import ScriptedModelServer, ScriptedReply
from tests.devserver import free_port
from tests.fake_tools import registry_with_test_tools
from tests.helpers import outcome_of, replay, script, settled, start, unique
from worker.app import build_worker
from workflows.conversation import ConversationWorkflow


@pytest.fixture
def small_model() -> Iterator[ScriptedModelServer]:
    """A scripted model whose server says, as llama.cpp's `/props` does, that its window is
    2,048 tokens."""
    server = ScriptedModelServer(windows={"llama.cpp": 2048}).start()
    try:
        yield server
    finally:
        server.stop()


async def worker_on(client: Client, settings: ActivitySettings) -> AsyncIterator[str]:
    queue = unique("window")
    async with (httpx.AsyncClient(timeout=10) as http,
                build_worker(client, queue, settings, http, registry_with_test_tools())):
        yield queue


@pytest_asyncio.fixture
async def small_queue(client: Client, activity_settings: ActivitySettings,
                      small_model: ScriptedModelServer) -> AsyncIterator[str]:
    settings = dataclasses.replace(activity_settings, openai_base_url=small_model.base_url)
    async for queue in worker_on(client, settings):
        yield queue


async def test_the_window_the_server_says_fits_the_budget_and_refuses_what_cannot_fit(
        client: Client, small_model: ScriptedModelServer, small_queue: str):
    """No entry says the window: the worker asks llama.cpp's `/props` (2,048 tokens), and the
    conversation's 24,000-token budget becomes the window less a reply's share. A message
    that cannot fit is refused when it is sent (the update, and the signal's outcome), the
    conversation stays usable, and a long conversation's prompts stay within the budget."""
    trigger = unique("small")
    turns = [ScriptedReply(content=f"answer {n}: " + "words of an answer " * 40)
             for n in range(8)]
    script(small_model, trigger, *turns)
    handle = await start(client, small_queue, trigger)
    first = await settled(handle)
    budget = fitted_budget(24_000, 2048)  # the window less a quarter of it for the reply
    assert budget == 1536
    assert (first.context.window_tokens, first.context.budget_tokens) == (2048, budget)
    assert "of 1,536 tokens (the model's window: 2,048)" in render_status(first)
    long = "far too long for this model " * 400
    with pytest.raises(WorkflowUpdateFailedError) as refused:
        await handle.execute_update(ConversationWorkflow.send_message,
                                    SayRequest(text=long, request_id="m-long"))
    assert "more than the model can read" in str(refused.value.cause)
    assert "of its 2,048-token window" in str(refused.value.cause)
    await handle.signal(ConversationWorkflow.say, SayRequest(text=long, request_id="s-long"))
    outcome = await outcome_of(handle, "s-long")
    assert not outcome.accepted and "send a shorter one, or split it" in outcome.reason
    prompts = [first.context.prompt_tokens]
    for n in range(2, 9):
        await handle.signal(ConversationWorkflow.say,
                            SayRequest(text=f"question {n} " + "detail " * 30,
                                       request_id=f"m{n}"))
        done = await settled(handle, turn=n, timeout_s=60)
        assert done.stop_reason == "answered", done.error
        prompts.append(done.context.prompt_tokens)
    # folded to stay within the window, with room for a reply (the endpoint's own counts)
    assert done.context.folded_turns >= 1
    assert max(prompts) <= budget, prompts
    await handle.signal(ConversationWorkflow.end, EndRequest())
    await handle.result()
    await replay(handle, record_as="window_learned_from_the_server")


@pytest.mark.parametrize("kind, said, learned", [
    ("llama.cpp", 8192, 8192),
    ("vllm", 4096, 4096),
    ("lm-studio", 6000, 6000),
    ("ollama", 16384, 16384),
])
async def test_each_server_kind_says_its_window(kind: str, said: int, learned: int):
    server = ScriptedModelServer(windows={kind: said}).start()
    try:
        models = Models.single("scripted", server.base_url)
        async with httpx.AsyncClient(timeout=5) as http:
            windows = Windows(http)
            assert await windows.of(models) == {"default": learned}
            asked = len(server.requests)
            assert await windows.of(models) == {"default": learned}  # asked once
            assert len(server.requests) == asked
    finally:
        server.stop()


async def test_a_server_that_says_nothing_or_nonsense_leaves_the_budget_alone():
    silent = ScriptedModelServer().start()
    odd = ScriptedModelServer(windows={"llama.cpp": 12}).start()  # too small to believe
    try:
        async with httpx.AsyncClient(timeout=5) as http:
            windows = Windows(http)
            assert await windows.of(Models.single("scripted", silent.base_url)) == {}
            assert await windows.of(Models.single("scripted", odd.base_url)) == {}
            # an entry that says its own window, and OpenAI's own endpoint, are not asked
            said = Models({"own": ModelEntry(model="m", base_url=odd.base_url,
                                             context_tokens=4096),
                           "openai": ModelEntry(model="gpt-4o-mini")}, default="own")
            before = len(odd.requests)
            assert await windows.of(said) == {}
            assert len(odd.requests) == before
    finally:
        silent.stop()
        odd.stop()


async def test_a_server_not_up_yet_is_asked_again():
    port = free_port()
    models = Models.single("scripted", f"http://127.0.0.1:{port}/v1")
    async with httpx.AsyncClient(timeout=5) as http:
        windows = Windows(http)
        assert await windows.of(models) == {}
        server = ScriptedModelServer(port=port, windows={"ollama": 3000}).start()
        try:
            assert await windows.of(models) == {"default": 3000}
        finally:
            server.stop()


def only_ollama(shown: object, status: int = 200) -> httpx.MockTransport:
    """A server that answers Ollama's `/api/show` only, with `shown`."""
    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/api/show":
            if isinstance(shown, str):
                return httpx.Response(status, text=shown)
            return httpx.Response(status, json=shown)
        return httpx.Response(404, json={"error": "not found"})
    return httpx.MockTransport(answer)


@pytest.mark.parametrize("shown, learned", [
    # without num_ctx, Ollama runs a model in its own default window, however long the model
    # was trained for: the trained length alone would promise too much
    ({"model_info": {"llama.context_length": 131072}}, {"default": OLLAMA_DEFAULT_CTX}),
    ({"model_info": {"gemma3.context_length": 2048}}, {"default": 2048}),
    ({"parameters": "temperature 0.2\nnum_ctx 12288\nstop <eos>"}, {"default": 12288}),
    ({"parameters": "num_ctx lots"}, {}),
    ({"model_info": {"llama.context_length": "x"}}, {}),
    ({"model_info": ["not", "a", "map"]}, {}),
    (["a list"], {}),
    ("<html>a proxy's page</html>", {}),
    (None, {}),
])
async def test_ollamas_answers_odd_or_not(shown: object, learned: dict):
    models = Models.single("qwen2.5:7b", "http://ollama.local:11434/v1")
    async with httpx.AsyncClient(transport=only_ollama(shown)) as http:
        assert await Windows(http).of(models) == learned
    async with httpx.AsyncClient(transport=only_ollama(shown, status=500)) as http:
        assert await Windows(http).of(models) == {}


@pytest_asyncio.fixture
async def local_queue(client: Client, activity_settings: ActivitySettings,
                      model: ScriptedModelServer, tmp_path: Path) -> AsyncIterator[str]:
    """One AGENT_MODELS entry made for a slow local model: its own window, reply size,
    deadline and heartbeat, and free."""
    models = Models({"local": ModelEntry(
        model="qwen2.5-coder-1.5b", base_url=model.base_url, context_tokens=6000,
        max_output_tokens=300, timeout_s=900, heartbeat_s=45, free=True)}, default="local")
    settings = dataclasses.replace(activity_settings, models=models, openai_model="qwen")
    async for queue in worker_on(client, settings):
        yield queue


async def test_a_local_entry_sets_its_window_reply_size_deadlines_and_price(
        client: Client, model: ScriptedModelServer, local_queue: str):
    trigger = script(model, unique("local"), ScriptedReply(content="Hello from the CPU."))
    handle = await start(client, local_queue, trigger)
    done = await settled(handle)
    assert done.final_answer == "Hello from the CPU."
    assert (done.context.window_tokens, done.context.budget_tokens) == (6000, 5700)
    # free by its entry, not by its host: $0, and no note about a missing price
    assert done.usage.cost_usd == 0 and done.usage.cost_note is None
    assert "cost: unknown" not in render_status(done)
    request, = [r for r in model.requests if r.trigger == trigger and r.kind == "chat"]
    assert request.body["max_tokens"] == 300 and request.body["model"] == "qwen2.5-coder-1.5b"
    scheduled = [e.activity_task_scheduled_event_attributes
                 async for e in handle.fetch_history_events()
                 if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED]
    model_call, = [a for a in scheduled if a.activity_type.name in ("llm_step", "llm_call")]
    assert model_call.start_to_close_timeout.seconds == 900
    assert model_call.heartbeat_timeout.seconds == 45
    await handle.signal(ConversationWorkflow.end, EndRequest())
    await handle.result()
    await replay(handle, record_as="local_entry_limits")


async def test_a_conversations_own_budget_from_the_cli(
        cli, model: ScriptedModelServer):
    trigger = script(model, unique("budget-cli"), ScriptedReply(content="Small it is."))
    started = await cli("start", "--context-tokens", "3000", "--wait", "--json", trigger)
    assert started.returncode == 0, started.stderr
    assert json.loads(started.stdout)["context"]["budget_tokens"] == 3000
    for wrong in ("100", "999999999"):
        refused = await cli("start", "--context-tokens", wrong, trigger)
        assert refused.returncode == 2 and "the context budget must be 256-" in refused.stderr
