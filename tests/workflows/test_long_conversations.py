"""Conversations that last: the context folds into a running summary and stays within its budget,
inputs are bounded at the edge, and what a conversation keeps is bounded in bytes."""

from __future__ import annotations

import asyncio
import io

import pytest
from temporalio.client import Client, WorkflowUpdateFailedError

from durable_react_agent.client.render import render_history, render_status
from durable_react_agent.client.watch import Renderer, watch
from durable_react_agent.contract import EndRequest, SayRequest
from durable_react_agent.testing import Scenario, Script, ScriptedModelServer, ScriptedReply
from durable_react_agent.workflows.conversation import ConversationWorkflow
from tests.helpers import (
    outcome_of,
    reaches,
    recorded_events,
    replay,
    script,
    settled,
    start,
    stream_events,
    tool_call,
    unique,
)
from tests.long_chat import message, prompt_tokens, run_long_chat


def chat_bodies(model: ScriptedModelServer, trigger: str, kind: str = "chat") -> list[dict]:
    return [r.body for r in model.requests if r.trigger == trigger and r.kind == kind]


@pytest.mark.long
async def test_a_300_turn_chat_answers_every_turn_within_the_budget(
    client: Client, task_queue: str, model: ScriptedModelServer
):
    budget = 24_000
    chat = await run_long_chat(client, task_queue, model, turns=300, size=2048, budget=budget)
    status = chat.status
    assert (status.turn, status.stop_reason, status.error) == (300, "answered", None)
    assert status.final_answer == f"echo: {chat.texts[-1]}"
    assert status.runs > 1  # it crossed continue-as-new, carrying the summary

    steps = [r for r in chat.requests if r.kind == "chat"]
    assert [r.turn for r in steps] == list(range(1, 301))  # every turn answered, once
    for r in chat.requests:
        assert r.prompt_tokens <= budget + r.latest_turn_tokens, r
    summaries = [r for r in chat.requests if r.kind == "summary"]
    assert len(summaries) >= 10
    assert max(r.prompt_tokens for r in steps[-100:]) <= budget  # flat, not growing with turns

    history = await chat.handle.query(ConversationWorkflow.history)
    assert any(r.kind == "summary" for r in history)
    context = await chat.handle.query(ConversationWorkflow.messages)
    assert context[1].role == "system" and context[1].content.startswith("[Summary of turns 1-")
    assert status.usage.total_tokens > 0 and status.llm_calls == 300 + len(summaries)


async def test_a_failed_summary_drops_the_oldest_turns_with_a_note_and_the_chat_goes_on(
    client: Client, task_queue: str, model: ScriptedModelServer
):
    trigger = unique("foldfail")
    kept = [s for s in model.script.scenarios if s.trigger != trigger]
    model.set_script(Script(scenarios=[*kept, Scenario(
        trigger=trigger, replies=[ScriptedReply(content="echo: {last_user}") for _ in range(20)],
        summary_errors=[400])]))
    handle = await start(client, task_queue, message(trigger, 1, 2000), context_budget_tokens=3000)
    await settled(handle)
    for i in range(2, 13):
        await handle.signal(ConversationWorkflow.say, SayRequest(text=message(trigger, i, 2000)))
    status = await settled(handle, turn=12)
    assert status.final_answer == f"echo: {message(trigger, 12, 2000)}"

    summaries = [r for r in model.requests if r.trigger == trigger and r.kind == "summary"]
    assert len(summaries) >= 2  # the first failed (400, not retried), a later one succeeded
    bodies = chat_bodies(model, trigger)
    notes = [b["messages"][1]["content"] for b in bodies if b["messages"][1]["role"] == "system"]
    assert "were dropped without a summary: summarizing failed: model endpoint rejected" in notes[0]
    assert "First request:" in notes[-1]  # a later fold wrote a summary, and the note stays
    assert "dropped without a summary" in notes[-1]

    history = await handle.query(ConversationWorkflow.history)
    folds = [r for r in history if r.kind == "summary"]
    assert "dropped without a summary" in folds[0].thought and folds[1].thought.startswith("First")
    rendered = render_history(history)
    assert f"turn {folds[0].turn} before step 1  context folded" in rendered
    assert "  summary: turns 1-" in rendered and "  summary: First request:" in rendered
    assert status.context.folded_turns > status.context.dropped_turns > 0
    assert 0 < status.context.prompt_tokens <= 3000 and status.context.budget_tokens == 3000
    assert "folded into the summary (" in render_status(status)

    await handle.signal(ConversationWorkflow.end, EndRequest())
    await handle.result()
    shown = [e for e in await stream_events(client, handle.id) if e.kind.startswith("summary")]
    assert [e.kind for e in shown[:2]] == ["summary_started", "summary_finished"]
    assert shown[1].status == "dropped" and shown[3].status == "ok"
    out = io.StringIO()
    await watch(client, handle.id, renderer=Renderer(handle.id, out))
    assert "the context is full: summarizing turns 1-" in out.getvalue()
    assert "dropped without a summary: summarizing failed" in out.getvalue()
    ui = [e.user_metadata.summary.data.decode() for e in (await handle.fetch_history()).events
          if e.HasField("user_metadata") and e.user_metadata.HasField("summary")]
    assert any(s.startswith('"summarize turns 1-') for s in ui)
    await replay(handle, record_as="fold_fails_then_succeeds")


async def test_each_summary_is_written_from_the_one_before(
    client: Client, task_queue: str, model: ScriptedModelServer
):
    """Summaries are cumulative: every fold after the first sends the model the summary so far,
    so what the oldest turns said survives the later folds."""
    trigger = script(model, unique("cumulative"),
                     *[ScriptedReply(content="echo: {last_user}") for _ in range(16)])
    handle = await start(client, task_queue, message(trigger, 1, 2000), context_budget_tokens=3000)
    for i in range(2, 15):
        await handle.signal(ConversationWorkflow.say, SayRequest(text=message(trigger, i, 2000)))
    status = await settled(handle, turn=14, timeout_s=60)
    assert status.final_answer == f"echo: {message(trigger, 14, 2000)}"

    folds = [r.thought for r in await handle.query(ConversationWorkflow.history)
             if r.kind == "summary"]
    asked = [r.body["messages"][-1]["content"] for r in model.requests
             if r.trigger == trigger and r.kind == "summary"]
    assert len(asked) == len(folds) >= 2, (len(asked), len(folds))
    assert asked[0].startswith("Summary so far:\n(none yet)\n\nTurns 1-")
    for previous, request in zip(folds, asked[1:]):
        assert request.startswith(f"Summary so far:\n{previous}\n\nTurns "), request[:400]
    assert folds[-1].startswith(f"First request: {message(trigger, 1, 2000)[:160]}\n")


async def test_a_long_turn_folds_older_turns_mid_turn_and_keeps_calls_with_results(
    client: Client, task_queue: str, model: ScriptedModelServer
):
    trigger = unique("midfold")
    tours = [ScriptedReply(tool_calls=[tool_call("big_output", {"size": 3000 + i})]) for i in range(12)]
    script(model, trigger, *[ScriptedReply(content="hi {last_user}") for _ in range(4)],
           *tours, ScriptedReply(content="toured"))
    handle = await start(client, task_queue, message(trigger, 1, 3000), context_budget_tokens=6000,
                         max_steps=20)
    for i in range(2, 5):
        await settled(handle, turn=i - 1)
        await handle.signal(ConversationWorkflow.say, SayRequest(text=message(trigger, i, 3000)))
    await settled(handle, turn=4)
    await handle.signal(ConversationWorkflow.say, SayRequest(text=f"{trigger} now tour"))
    status = await settled(handle, turn=5, timeout_s=60)
    assert (status.final_answer, status.steps) == ("toured", 13)

    history = await handle.query(ConversationWorkflow.history)
    assert any(r.kind == "summary" and r.turn == 5 and r.step > 1 for r in history)
    for body in chat_bodies(model, trigger):
        calls = [c["id"] for m in body["messages"] for c in m.get("tool_calls") or []]
        assert calls == [m["tool_call_id"] for m in body["messages"] if m["role"] == "tool"]
        assert prompt_tokens(body) <= 6000 + 1000


async def test_the_latest_round_gets_shares_so_the_next_step_fits(
    client: Client, task_queue: str, model: ScriptedModelServer
):
    trigger = script(
        model, unique("shares"),
        ScriptedReply(content="warming up"),
        ScriptedReply(tool_calls=[tool_call("big_output", {"size": 30_000 + i}) for i in range(4)]),
        ScriptedReply(content="read them all"),
    )
    handle = await start(client, task_queue, trigger, context_budget_tokens=6000)
    await settled(handle)
    await handle.signal(ConversationWorkflow.say, SayRequest(text="now the big ones"))
    status = await settled(handle, turn=2)
    assert status.final_answer == "read them all"
    last = chat_bodies(model, trigger)[-1]
    observations = [m["content"] for m in last["messages"] if m["role"] == "tool"]
    assert len(observations) == 4 and all("…[truncated: " in o for o in observations)
    assert prompt_tokens(last) <= 6000
    [step] = [r for r in await handle.query(ConversationWorkflow.history) if r.actions]
    assert all(a.full_bytes and a.full_bytes > a.observation_bytes for a in step.actions)


async def test_oversized_messages_are_refused_and_the_conversation_goes_on(
    client: Client, task_queue: str, model: ScriptedModelServer
):
    trigger = script(model, unique("oversize"), *[ScriptedReply(content="got: {last_user}")] * 3)
    # A first message over the limit (configured lower than the default 256 KiB).
    handle = await start(client, task_queue, "x" * 3000, max_message_bytes=2048)
    status = await reaches(handle, "idle")
    assert status.turn == 0 and "the first message was refused: the message is 3,000 bytes" in status.error

    await handle.signal(ConversationWorkflow.say, SayRequest(text="y" * 3000, request_id="big"))
    refused = await outcome_of(handle, "big")
    assert not refused.accepted
    assert refused.reason == "the message is 3,000 bytes, over the limit of 2,048 bytes"
    events_before = await recorded_events(handle)
    with pytest.raises(WorkflowUpdateFailedError) as failed:
        await handle.execute_update(ConversationWorkflow.send_message, SayRequest(text="z" * 300_000))
    assert "the message is 300,000 bytes, over the limit of 2,048 bytes" in str(failed.value.cause)
    assert await recorded_events(handle) == events_before  # refused before history

    taken = await handle.execute_update(ConversationWorkflow.send_message,
                                        SayRequest(text=f"{trigger} hello", request_id="ok"))
    assert taken.accepted and taken.turn == 1
    status = await settled(handle)
    assert status.final_answer == f"got: {trigger} hello"
    await handle.signal(ConversationWorkflow.end, EndRequest())
    await handle.result()
    await replay(handle, record_as="oversized_messages_refused")


async def test_the_queue_is_bounded_in_bytes(client: Client, task_queue: str, model: ScriptedModelServer):
    trigger = script(model, unique("queue-bytes"), ScriptedReply(content="slow", hold=True),
                     *[ScriptedReply(content="ok")] * 3)
    model.rearm()
    handle = await start(client, task_queue, trigger)
    assert await asyncio.to_thread(model.wait_for_request, trigger, 0, 30.0)
    for i in range(3):
        await handle.signal(ConversationWorkflow.say, SayRequest(text=f"{i}" * 200_000, request_id=f"q{i}"))
    outcomes = [await outcome_of(handle, f"q{i}") for i in range(3)]
    assert [o.accepted for o in outcomes] == [True, False, False]
    assert "already waiting" in outcomes[1].reason
    model.release()
    status = await settled(handle, turn=2)
    assert status.queued_messages == 0


