"""Delta context: a model call carries what changed since the conversation's previous call, and
the model still receives exactly the prompt it would have received whole."""

from __future__ import annotations

import json
import random

import httpx
import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from durable_react_agent.activities.context_cache import CachedPrompt, ContextCache
from durable_react_agent.activities.llm import LLMActivities
from durable_react_agent.activities.settings import ActivitySettings
from durable_react_agent.contract import ChatMessage, FunctionCall, SayRequest, ToolCall
from durable_react_agent.contract.bounds import HANDOVER_BYTES, HANDOVER_EVENTS, MAX_HANDOVER_EVENTS
from durable_react_agent.rules import delta, loop
from durable_react_agent.testing import ScriptedModelServer, ScriptedReply
from durable_react_agent.worker.app import build_worker
from durable_react_agent.workflows.conversation import ConversationWorkflow
from tests.fake_tools import registry_with_test_tools
from tests.helpers import (
    replay,
    replay_runs,
    run_histories,
    script,
    settled,
    start,
    tool_call,
    unique,
)


def whole(client: Client, activity_settings: ActivitySettings) -> dict:
    """A worker that holds no prompt: each step's prompt is fetched from the conversation
    whole (`pending_prompt`), the reference a prompt rebuilt from its delta must equal."""
    return {"llm": LLMActivities(activity_settings, temporal=client, cache=Forgetful())}


# ----- the pure parts -----


def user(text: str) -> ChatMessage:
    return ChatMessage(role="user", content=text)


def round_of(i: int, observation: str) -> list[ChatMessage]:
    call = ToolCall(id=f"c{i}",
                    function=FunctionCall(name="get_weather", arguments='{"location": "P"}'))
    return [ChatMessage(role="assistant", content=None, tool_calls=[call]),
            ChatMessage(role="tool", tool_call_id=f"c{i}", content=observation)]


def rebuilt(previous: delta.Sent | None, parts) -> tuple[list[dict], str]:
    wire = [m.to_openai() for m in previous.messages] if previous else []
    messages = delta.rebuild(wire, parts)
    return messages, delta.prompt_digest([delta.message_hash(m) for m in messages])


def test_a_new_round_is_sent_as_one_range_kept_and_its_messages():
    system = ChatMessage(role="system", content="be brief")
    first = [system, user("tour"), *round_of(1, "sunny")]
    _, sent = delta.full(first)
    # The head is built anew each step (an equal copy), the rest are the same objects.
    second = [ChatMessage(role="system", content="be brief"), *first[1:], *round_of(2, "rain")]
    parts, sent2 = delta.diff(sent, second)
    assert [p.keep for p in parts] == [(0, 4), None, None]
    assert [p.message for p in parts[1:]] == second[4:]
    assert rebuilt(sent, parts) == ([m.to_openai() for m in second], sent2.digest)


def test_an_observation_compacted_in_the_middle_is_the_only_old_message_sent_again():
    messages = [ChatMessage(role="system", content="s"), user("u"), *round_of(1, "x" * 500),
                *round_of(2, "y" * 500)]
    _, sent = delta.full(messages)
    compacted = [*messages[:3], messages[3].model_copy(update={"content": "[elided: 500 bytes]"}),
                 *messages[4:], *round_of(3, "z")]
    parts, sent2 = delta.diff(sent, compacted)
    assert [p.keep for p in parts] == [(0, 3), None, (4, 6), None, None]
    assert parts[1].message.content == "[elided: 500 bytes]"
    assert rebuilt(sent, parts) == ([m.to_openai() for m in compacted], sent2.digest)


def test_any_edit_of_a_prompt_rebuilds_exactly_from_its_parts():
    rng = random.Random(7)
    pool = [user(f"message {i}") for i in range(6)]
    pool += [m for i in range(6) for m in round_of(i, f"obs {i}")]
    messages = [ChatMessage(role="system", content="s"), *rng.sample(pool, 8)]
    sent = None
    for _ in range(300):
        edited = list(messages)
        for _ in range(rng.randint(1, 4)):
            op = rng.choice(["append", "replace", "delete", "insert", "copy", "duplicate"])
            at = rng.randrange(len(edited)) if edited else 0
            if op == "append":
                edited.append(rng.choice(pool))
            elif op == "replace" and edited:
                edited[at] = edited[at].model_copy(update={"content": f"changed {rng.random()}"})
            elif op == "delete" and len(edited) > 1:
                del edited[at]
            elif op == "insert":
                edited.insert(at, rng.choice(pool))
            elif op == "copy" and edited:  # equal, not the same object
                edited[at] = edited[at].model_copy()
            elif op == "duplicate" and edited:
                edited.insert(at, edited[at])
        parts, new = delta.diff(sent, edited)
        assert rebuilt(sent, parts) == ([m.to_openai() for m in edited], new.digest)
        assert sum(1 for p in parts if p.message is not None) <= len(edited)
        sent, messages = new, edited


def test_a_range_outside_the_previous_prompt_is_a_mismatch_not_a_wrong_prompt():
    _, sent = delta.full([user("a")])
    wire = [m.to_openai() for m in sent.messages]
    for parts in ([delta.PromptPart(keep=(0, 2))], [delta.PromptPart()]):
        try:
            delta.rebuild(wire, parts)
        except delta.Mismatch:
            continue
        raise AssertionError(f"{parts} rebuilt a prompt")


def test_a_run_hands_over_for_its_history_only_well_past_the_servers_suggestion():
    assert not loop.history_full(4_096 * 3, 4 * 2**20)  # 1,000 small steps: one run
    assert loop.history_full(HANDOVER_EVENTS, 1) and loop.history_full(1, HANDOVER_BYTES)
    assert loop.history_full(40, 1, max_events=40)  # configured lower
    assert loop.history_full(MAX_HANDOVER_EVENTS, 1, max_events=10**9)  # capped
    assert MAX_HANDOVER_EVENTS < 51_200 and HANDOVER_BYTES < 50 * 2**20  # Temporal's hard limits


def test_the_cache_finds_a_prompt_only_by_its_digest_and_stays_within_its_bytes():
    cache = ContextCache(max_bytes=10_000)
    wire = [{"role": "user", "content": "x" * 3000}]
    for i in range(5):
        cache.keep_prompt(f"conv-{i}", f"d{i}", wire)
    assert cache.held_bytes <= 10_000 and len(cache) == 3
    assert cache.prompt("conv-0", "d0") is None  # the least recently used went first
    assert cache.prompt("conv-4", "d3") is None  # a stale or foreign digest finds nothing
    assert cache.prompt("conv-4", "d4").wire == wire
    cache.keep_tools("t1", [{"name": "a"}])
    assert cache.tools("t1") == [{"name": "a"}] and cache.tools("t2") is None


# ----- the model receives the same prompts -----


def chat_bodies(model: ScriptedModelServer, trigger: str) -> list[str]:
    """Each model request of a conversation, as JSON with the trigger replaced, in order."""
    return [json.dumps({k: r.body.get(k) for k in ("messages", "tools", "tool_choice")})
            .replace(trigger, "TRIGGER") for r in model.requests
            if r.trigger == trigger and r.kind == "chat"]


def busy_conversation(model: ScriptedModelServer, prefix: str) -> str:
    """Two turns of large tool rounds against a small budget: observations are elided and
    rounds dropped, the first turn folds into a summary, and the first turn's last step is a
    forced answer (max_steps)."""
    big = [ScriptedReply(tool_calls=[tool_call("big_output", {"size": 1500 + i})]) for i in range(3)]
    return script(model, unique(prefix), *big, ScriptedReply(content="first done"),
                  *big, ScriptedReply(content="second done"))


async def run_busy(client: Client, queue: str, model: ScriptedModelServer, prefix: str,
                   **options) -> tuple[str, object]:
    trigger = busy_conversation(model, prefix)
    handle = await start(client, queue, trigger, max_steps=4, context_budget_tokens=1600, **options)
    status = await settled(handle, timeout_s=60)
    assert status.final_answer == "first done" and status.stop_reason == "max_steps"
    await handle.signal(ConversationWorkflow.say, SayRequest(text="again"))
    status = await settled(handle, turn=2, timeout_s=60)
    assert status.final_answer == "second done", status
    return trigger, handle


async def test_the_model_receives_the_same_requests_sent_as_deltas_or_whole(
    client: Client, model: ScriptedModelServer, activity_settings: ActivitySettings
):
    queue = unique("delta")
    async with httpx.AsyncClient(timeout=10) as http:
        async with build_worker(client, queue, activity_settings, http, registry_with_test_tools(),
                                **whole(client, activity_settings)):
            fetched, _ = await run_busy(client, queue, model, "whole")
        cache = ContextCache()
        llm = LLMActivities(activity_settings, temporal=client, cache=cache)
        async with build_worker(client, queue, activity_settings, http, registry_with_test_tools(),
                                llm=llm):
            deltas, handle = await run_busy(client, queue, model, "delta")  # as long as "whole"
    expected, got = chat_bodies(model, fetched), chat_bodies(model, deltas)
    assert len(got) == len(expected) == 8
    for step, (a, b) in enumerate(zip(expected, got), start=1):
        assert a == b, f"request {step} differs: {first_difference(a, b)}"
    # Compaction changed older messages (elided, then dropped), and the first turn folded.
    assert "elided to bound the context" in got[2] and "earlier tool steps dropped" in got[3]
    assert "[Summary of turns 1-1" in got[5] and "earlier tool steps dropped" in got[-1]
    assert cache.rebuilt == {"full": 1, "delta": 7}

    sizes = model_inputs(await handle.fetch_history())
    assert max(sizes[1:]) < 4_000 < sizes[0], sizes  # only the first call carries the prompt whole
    await replay(handle, record_as="delta_context_folds_and_forced_answer")


def first_difference(a: str, b: str) -> str:
    pairs = zip(json.loads(a)["messages"], json.loads(b)["messages"])
    return next((f"message {i}: {x} != {y}" for i, (x, y) in enumerate(pairs) if x != y),
                "in the tools or tool_choice")[:1500]


def model_inputs(history) -> list[int]:
    return [e.activity_task_scheduled_event_attributes.input.ByteSize() for e in history.events
            if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
            and e.activity_task_scheduled_event_attributes.activity_type.name == "llm_step"]


@pytest.mark.long  # a stress-scale run: `make test-long`
async def test_two_workers_alternating_on_one_conversation_fetch_what_they_lack(
    client: Client, model: ScriptedModelServer, activity_settings: ActivitySettings
):
    """Two workers, each with its own cache, share a queue: a call lands on a worker holding an
    older prompt or none, which fetches the prompt from the conversation (its query)."""
    queue = unique("pair")
    steps = [ScriptedReply(tool_calls=[tool_call("get_weather", {"location": c})])
             for c in ["Paris", "Tokyo"] * 8]
    trigger = script(model, unique("pair"), *steps, ScriptedReply(content="toured"))
    caches = [ContextCache(), ContextCache()]
    # Two connections, as two worker processes would have (one client serves one worker a queue).
    clients = [client, await Client.connect(client.service_client.config.target_host,
                                            data_converter=client.data_converter)]
    async with httpx.AsyncClient(timeout=10) as http:
        workers = [build_worker(c, queue, activity_settings, http, registry_with_test_tools(),
                                llm=LLMActivities(activity_settings, temporal=c, cache=cache),
                                max_cached_workflows=0)  # no sticky worker: both take every kind
                   for c, cache in zip(clients, caches)]
        async with workers[0], workers[1]:
            handle = await start(client, queue, trigger, one_shot=True, max_steps=20)
            status = await settled(handle, timeout_s=120)
        async with build_worker(client, queue, activity_settings, http, registry_with_test_tools(),
                                **whole(client, activity_settings)):
            reference = script(model, unique("ref0"), *steps, ScriptedReply(content="toured"))
            await settled(await start(client, queue, reference, one_shot=True, max_steps=20),
                          timeout_s=120)
    assert status.final_answer == "toured" and status.llm_calls == 17
    assert chat_bodies(model, trigger) == chat_bodies(model, reference)
    served = [sum(c.rebuilt.values()) for c in caches]
    assert all(served) and sum(served) == 17, served
    assert sum(c.rebuilt["fetched"] for c in caches) >= 1, [c.rebuilt for c in caches]


class Forgetful(ContextCache):
    def prompt(self, conversation: str, digest: str):
        return None


async def test_a_worker_that_can_neither_rebuild_nor_fetch_has_the_prompt_resent_whole_once(
    client: Client, model: ScriptedModelServer, activity_settings: ActivitySettings
):
    queue = unique("miss")
    steps = [ScriptedReply(tool_calls=[tool_call("get_weather", {"location": "Paris"})]),
             ScriptedReply(tool_calls=[tool_call("get_weather", {"location": "Tokyo"})]),
             ScriptedReply(content="done")]
    blind = LLMActivities(activity_settings, temporal=None, cache=Forgetful())
    async with httpx.AsyncClient(timeout=10) as http:
        async with build_worker(client, queue, activity_settings, http, registry_with_test_tools(),
                                llm=blind):
            trigger = script(model, unique("miss"), *steps)
            handle = await start(client, queue, trigger, one_shot=True)
            status = await settled(handle, timeout_s=60)
    assert status.final_answer == "done" and status.llm_calls == 3, status
    assert blind.cache.rebuilt == {"full": 3}
    history = await handle.fetch_history()
    misses = [e.activity_task_failed_event_attributes.failure.application_failure_info.type
              for e in history.events if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED]
    assert misses == ["ContextMiss", "ContextMiss"]  # steps 2 and 3, each once
    assert len(chat_bodies(model, trigger)) == 3  # a miss never reached the model


class Tampered(ContextCache):
    """Hands back the conversation's previous prompt with its first user message changed: a
    well-formed entry, but not the prompt the digest names."""

    def prompt(self, conversation: str, digest: str):
        entry = super().prompt(conversation, digest)
        if entry is None:
            return None
        at = next(i for i, m in enumerate(entry.wire) if m["role"] == "user")
        wire = list(entry.wire)
        wire[at] = {**wire[at], "content": f"{wire[at]['content']} TAMPERED"}
        return CachedPrompt(digest=entry.digest, wire=wire, size=entry.size)


class Rotting(ContextCache):
    """Its entries change in place after they are kept: memory written by something else that
    holds the same message dicts."""

    def prompt(self, conversation: str, digest: str):
        entry = super().prompt(conversation, digest)
        if entry is not None:
            user = next(m for m in entry.wire if m["role"] == "user")
            user["content"] = f"{user['content']} ROTTEN"
        return entry


async def run_with_cache(client: Client, model: ScriptedModelServer,
                         activity_settings: ActivitySettings, cache: ContextCache, prefix: str):
    steps = [ScriptedReply(tool_calls=[tool_call("get_weather", {"location": "Paris"})]),
             ScriptedReply(tool_calls=[tool_call("get_weather", {"location": "Tokyo"})]),
             ScriptedReply(content="done")]
    queue = unique(prefix)
    llm = LLMActivities(activity_settings, temporal=client, cache=cache)
    async with httpx.AsyncClient(timeout=10) as http:
        async with build_worker(client, queue, activity_settings, http, registry_with_test_tools(),
                                llm=llm):
            trigger = script(model, unique(prefix), *steps)
            handle = await start(client, queue, trigger, one_shot=True)
            status = await settled(handle, timeout_s=60)
    return trigger, handle, status


async def test_a_wrong_cached_prompt_never_reaches_the_model(
    client: Client, model: ScriptedModelServer, activity_settings: ActivitySettings
):
    """The digest check: the prompt rebuilt from a wrong copy does not match the digest the
    workflow named, so the call fails with ContextMiss and the prompt is sent whole."""
    cache = Tampered()
    trigger, handle, status = await run_with_cache(client, model, activity_settings, cache,
                                                   "tampered")
    assert (status.final_answer, status.llm_calls) == ("done", 3), status
    bodies = chat_bodies(model, trigger)
    tampered = sum("TAMPERED" in body for body in bodies)
    assert (len(bodies), tampered) == (3, 0), "a prompt built from the wrong copy reached the model"
    assert cache.rebuilt == {"full": 3}  # each delta failed its check; each resend was whole
    history = await handle.fetch_history()
    misses = [e.activity_task_failed_event_attributes.failure
              for e in history.events if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED]
    assert [(f.application_failure_info.type, f.message) for f in misses] == [
        ("ContextMiss", "the rebuilt prompt (delta) does not match its digest")] * 2


async def test_a_cached_prompt_changed_in_place_never_reaches_the_model(
    client: Client, model: ScriptedModelServer, activity_settings: ActivitySettings
):
    trigger, _, status = await run_with_cache(client, model, activity_settings, Rotting(),
                                              "rotting")
    assert status.final_answer == "done", status
    rotten = sum("ROTTEN" in body for body in chat_bodies(model, trigger))
    assert rotten == 0, f"{rotten} request(s) built from the changed copy reached the model"


async def test_across_continue_as_new_each_run_starts_whole_and_the_model_sees_no_difference(
    client: Client, model: ScriptedModelServer, activity_settings: ActivitySettings
):
    async def chat(prefix: str, **worker_options) -> tuple[str, object]:
        turn = [ScriptedReply(tool_calls=[tool_call("get_weather", {"location": "Paris"})]),
                ScriptedReply(content="noted")]
        trigger = script(model, unique(prefix), *turn * 5)
        queue = unique(prefix)
        async with httpx.AsyncClient(timeout=10) as http:
            async with build_worker(client, queue, activity_settings, http,
                                    registry_with_test_tools(), **worker_options):
                handle = await start(client, queue, trigger, continue_as_new_after_turns=2)
                await settled(handle, timeout_s=60)
                for n in range(2, 6):
                    await handle.signal(ConversationWorkflow.say, SayRequest(text=f"turn {n}"))
                    status = await settled(handle, turn=n, timeout_s=60)
                    assert status.final_answer == "noted", status
        assert status.runs == 3
        return trigger, handle

    fetched, _ = await chat("whole", **whole(client, activity_settings))
    deltas, handle = await chat("delta")
    assert chat_bodies(model, deltas) == chat_bodies(model, fetched)
    assert len(chat_bodies(model, fetched)) == 10
    assert await replay_runs(client, handle, record_as="delta_context_across_runs") == 3
    for history in await run_histories(client, handle):
        sizes = model_inputs(history)  # each run's first call is whole; the others are deltas
        assert sizes[0] > max(sizes[1:]), sizes
