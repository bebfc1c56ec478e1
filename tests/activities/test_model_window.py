"""A window that fits the model, and local models as first-class entries: the worker learns a
model's window from each server kind that says it (llama.cpp, vLLM, LM Studio, Ollama), a
conversation keeps its prompts within the smaller of its budget and that window (shown in
`status`) and refuses a message no fold makes room for; an entry's own window, reply size,
deadline, heartbeat and price are what its calls use."""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
import pytest_asyncio
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowUpdateFailedError

from durable_react_agent.activities.models import ModelEntry, Models
from durable_react_agent.activities.settings import ActivitySettings
from durable_react_agent.activities.windows import OLLAMA_DEFAULT_CTX, Windows
from durable_react_agent.api.app import create_app
from durable_react_agent.api.settings import ApiSettings
from durable_react_agent.client.connection import TemporalSettings
from durable_react_agent.client.render import render_status
from durable_react_agent.contract import EndRequest, SayRequest
from durable_react_agent.rules.context import fitted_budget
from durable_react_agent.testing import ScriptedModelServer, ScriptedReply, tokenizer
from durable_react_agent.worker.app import build_worker
from durable_react_agent.workflows.conversation import ConversationWorkflow
from tests.devserver import free_port
from tests.fake_tools import registry_with_test_tools
from tests.helpers import outcome_of, replay, script, settled, start, unique


@pytest.fixture
def small_model() -> Iterator[ScriptedModelServer]:
    """A scripted model whose server says, as llama.cpp's `/props` does, that its window is
    3,072 tokens."""
    server = ScriptedModelServer(windows={"llama.cpp": 3072}).start()
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
    """No entry says the window: the worker asks llama.cpp's `/props` (3,072 tokens), and the
    conversation's 24,000-token budget becomes the window less a reply's share. A message
    that cannot fit is refused when it is sent (the update, and the signal's outcome), the
    conversation stays usable, and a long conversation's prompts stay within the budget."""
    trigger = unique("small")
    turns = [ScriptedReply(content=f"answer {n}: " + "words of an answer " * 40)
             for n in range(8)]
    script(small_model, trigger, *turns)
    handle = await start(client, small_queue, trigger)
    first = await settled(handle)
    budget = fitted_budget(24_000, 3072)  # the window less a quarter of it for the reply
    assert budget == 2304
    assert (first.context.window_tokens, first.context.budget_tokens) == (3072, budget)
    assert "of 2,304 tokens (the model's window: 3,072)" in render_status(first)
    long = "far too long for this model " * 400
    with pytest.raises(WorkflowUpdateFailedError) as refused:
        await handle.execute_update(ConversationWorkflow.send_message,
                                    SayRequest(text=long, request_id="m-long"))
    assert "more than the model can read" in str(refused.value.cause)
    assert "of its 3,072-token window" in str(refused.value.cause)
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


# ----- a message's tokens, as the model's server counts them -----

PROSE = "far too long for this model "  # about 4.7 characters a token, 4 by the estimate
LONG_WORDS = "extraordinar "  # 13 characters, one token: the estimate says three


def said_tokens(reason: str) -> int:
    """The tokens a refusal says a message is at least (a count that errs low)."""
    found = re.search(r"the message is at least about ([\d,]+) tokens", reason)
    assert found, reason
    return int(found.group(1).replace(",", ""))


@pytest.fixture
def counting_model() -> Iterator[ScriptedModelServer]:
    """A scripted model whose server says its window (4,096 tokens, as llama.cpp's `/props`)
    and counts tokens as a real one does: `POST /tokenize`, its usage, and a longer prompt
    refused with llama.cpp's error."""
    server = ScriptedModelServer(windows={"llama.cpp": 4096}, tokenize=True).start()
    try:
        yield server
    finally:
        server.stop()


@pytest_asyncio.fixture
async def counting_queue(client: Client, activity_settings: ActivitySettings,
                         counting_model: ScriptedModelServer) -> AsyncIterator[str]:
    settings = dataclasses.replace(activity_settings, openai_base_url=counting_model.base_url)
    async for queue in worker_on(client, settings):
        yield queue


async def test_a_message_the_model_can_read_is_taken_whatever_its_bytes_say(
        client: Client, counting_model: ScriptedModelServer, counting_queue: str):
    """A message of long words is 500 tokens by the model's count and some 1,600 by four
    characters a token, which a ratio calibrated on a prompt of tool schemas makes nearly 3,000:
    it fits the 3,072-token budget beside the system prompt and the tools, so it is taken and
    answered. One of prose far past the window is refused at once, on a count that errs low."""
    trigger = script(counting_model, unique("words"), ScriptedReply(content="Hello."),
                     ScriptedReply(content="Read it all."))
    handle = await start(client, counting_queue, trigger)
    await settled(handle)
    words = (LONG_WORDS * 500).strip()
    assert tokenizer.count(words) == 500
    outcome = await handle.execute_update(ConversationWorkflow.send_message,
                                          SayRequest(text=words, request_id="m-words"))
    assert outcome.accepted and outcome.turn == 2
    done = await settled(handle, turn=2)
    assert (done.stop_reason, done.final_answer) == ("answered", "Read it all.")
    assert done.context.prompt_tokens <= done.context.budget_tokens == 3072
    with pytest.raises(WorkflowUpdateFailedError) as refused:
        await handle.execute_update(ConversationWorkflow.send_message,
                                    SayRequest(text=PROSE * 700, request_id="m-far"))
    assert said_tokens(str(refused.value.cause)) <= tokenizer.count(PROSE * 700)
    await handle.signal(ConversationWorkflow.end, EndRequest())
    await handle.result()
    await replay(handle, record_as="message_taken_on_a_lenient_count")


async def test_a_message_let_through_that_cannot_fit_is_left_out_on_the_servers_count(
        client: Client, counting_model: ScriptedModelServer, counting_queue: str):
    """Prose that passes the door but not the window: the server refuses the prompt, the worker
    has it count the message (`/tokenize`), and the turn says that count, not an estimate; the
    message is left out and the conversation goes on."""
    trigger = script(counting_model, unique("band"), ScriptedReply(content="Hello."),
                     ScriptedReply(content="Short is fine."))
    handle = await start(client, counting_queue, trigger)
    await settled(handle)
    prose = PROSE * 400
    exact = tokenizer.count(prose)
    outcome = await handle.execute_update(ConversationWorkflow.send_message,
                                          SayRequest(text=prose, request_id="m-prose"))
    assert outcome.accepted
    failed = await settled(handle, turn=2)
    assert failed.stop_reason == "llm_error"
    assert failed.error.startswith(f"the message is {exact:,} tokens, more than the model can "
                                   "read (3,072 tokens of its 4,096-token window): it was left "
                                   "out"), failed.error
    assert counting_model.tokenize_calls >= 1
    await handle.signal(ConversationWorkflow.say, SayRequest(text="shorter", request_id="m-s"))
    done = await settled(handle, turn=3)
    assert (done.stop_reason, done.final_answer) == ("answered", "Short is fine.")
    await handle.signal(ConversationWorkflow.end, EndRequest())
    await handle.result()
    await replay(handle, record_as="message_left_out_on_the_servers_count")


async def test_start_refuses_a_first_message_too_long_for_the_model(
        cli, client: Client, counting_model: ScriptedModelServer, counting_queue: str):
    """`start`, as `say`, refuses a message the model cannot read once the worker knows its
    window: the CLI says why and exits 1, the API answers 409; the conversation it began ends,
    and the model is never asked."""
    far = PROSE * 700
    started = await cli("start", "--id", (cid := unique("far")), far,
                        extra_env={"AGENT_TASK_QUEUE": counting_queue})
    assert started.returncode == 1, started.stdout + started.stderr
    assert started.stderr.startswith("refused: the message is at least about ")
    assert said_tokens(started.stderr) <= tokenizer.count(far)
    assert "more than the model can read (3,072 of its 4,096-token window" in started.stderr
    handle = client.get_workflow_handle_for(ConversationWorkflow.run, cid)
    ended = await handle.result()
    assert (ended.status, ended.stop_reason, ended.llm_calls) == ("completed", "ended", 0)
    assert ended.error.startswith("the first message was refused: the message is at least")
    app = create_app(ApiSettings(), TemporalSettings(task_queue=counting_queue))
    app.state.client = client
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as api:
        answer = await api.post("/conversations", json={"prompt": far})
        assert answer.status_code == 409, answer.text
        assert said_tokens(answer.json()["detail"]) <= tokenizer.count(far)
        fits = await api.post("/conversations", json={"prompt": "hello"})
        assert fits.status_code == 201 and fits.json()["turn"] >= 0
    assert not [r for r in counting_model.requests if r.kind == "chat" and far in str(r.body)]
    await replay(handle, record_as="first_message_too_long")
