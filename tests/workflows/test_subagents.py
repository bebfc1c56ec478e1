"""Subagents: agent profiles become tools, and each call runs a child conversation. Its approvals
surface in the parent and are decided through it, its steps stay out of the parent's history,
its cost rolls up, and it stops with its parent."""

from __future__ import annotations

import asyncio
import io
import json

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowUpdateFailedError

from durable_react_agent.client.watch import Renderer, watch
from durable_react_agent.contract import ChildReport, ConfirmRequest, ConversationInput, EndRequest
from durable_react_agent.contract.names import CHILD_STATUS_SIGNAL
from durable_react_agent.testing import ScriptedModelServer, ScriptedReply
from durable_react_agent.workflows.conversation import ConversationWorkflow
from tests.helpers import (
    FAST_LLM,
    WORKFLOW_TASK_EVENTS,
    reaches,
    replay,
    script,
    settled,
    start,
    steps_of,
    tool_call,
    unique,
)
from tests.subagent_support import delegate, delegating


async def parent_history(client: Client, workflow_id: str):
    return (await client.get_workflow_handle(workflow_id).fetch_history()).events


async def test_two_profiles_in_parallel_with_the_cost_rolled_up(
        client: Client, agents_queue: str, model: ScriptedModelServer):
    research = script(model, unique("research"),
                      ScriptedReply(tool_calls=[tool_call("get_weather", {"location": "Paris"})],
                                    delay_s=0.5),
                      ScriptedReply(content="Paris is mild: {last_tool}", delay_s=0.5))
    notes = script(model, unique("notes"), ScriptedReply(content="Nothing to write.",
                                                         delay_s=1.0))
    parent = script(model, unique("parent"),
                    ScriptedReply(tool_calls=[delegate("researcher", f"{research}: Paris?", "c1"),
                                              delegate("writer", f"{notes}: draft", "c2")]),
                    ScriptedReply(content="Both said: {last_tool}"))
    handle = await start(client, agents_queue, parent, model="gpt-4o-mini")
    shown = io.StringIO()
    watcher = asyncio.create_task(watch(client, handle.id, renderer=Renderer(handle.id, shown)))
    status = await settled(handle, timeout_s=60)
    assert status.stop_reason == "answered", status
    assert status.final_answer == "Both said: Nothing to write."
    assert {(c.profile, c.status) for c in status.children} == {("researcher", "completed"),
                                                                ("writer", "completed")}
    ids = {c.profile: c.workflow_id for c in status.children}
    assert ids == {"researcher": f"{handle.id}/c1", "writer": f"{handle.id}/c2"}
    tool_messages = [m for m in await handle.query(ConversationWorkflow.messages)
                     if m.role == "tool"]
    assert tool_messages[0].content.startswith("Paris is mild: Paris, France")

    # Concurrent: each child started before the other finished.
    a, b = [await client.get_workflow_handle(ids[p]).describe() for p in ("researcher", "writer")]
    assert a.start_time < b.close_time and b.start_time < a.close_time
    assert a.parent_id == handle.id and b.parent_id == handle.id  # what the Temporal UI shows

    # The parent's usage is its own steps and both children's, priced the same way.
    own = sum((r.tokens for r in await handle.query(ConversationWorkflow.history)),
              start=type(status.usage)())
    kids = [await client.get_workflow_handle(ids[p]).query(ConversationWorkflow.status)
            for p in ("researcher", "writer")]
    assert status.usage.total_tokens == own.total_tokens + sum(k.usage.total_tokens for k in kids)
    assert status.usage.cost_usd == pytest.approx(
        own.cost_usd + sum(k.usage.cost_usd for k in kids))
    assert kids[0].llm_calls == 2 and status.llm_calls == 2  # steps are counted where they ran

    # The parent's history holds the children's starts and results, not their steps.
    events = await parent_history(client, handle.id)
    types = [e.event_type for e in events]
    assert types.count(EventType.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED) == 2
    assert types.count(EventType.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_COMPLETED) == 2
    scheduled = [e.activity_task_scheduled_event_attributes.activity_type.name for e in events
                 if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED]
    assert "get_weather" not in scheduled

    await handle.signal(ConversationWorkflow.end, EndRequest())
    await asyncio.wait_for(watcher, 30)
    text = shown.getvalue()
    assert "⇢ researcher agent started" in text and "[researcher] → get_weather(location=Paris)" in text
    assert "[writer] ── turn 1 finished: answered" in text
    await replay(handle, "subagents_parallel")


async def test_the_parents_history_does_not_grow_with_the_childs_steps(
        client: Client, agents_queue: str, model: ScriptedModelServer):
    sizes = []
    for steps in (1, 5):
        parent = delegating(model, f"steps-{steps}", "researcher", "h1", [
            *[ScriptedReply(tool_calls=[tool_call("get_weather", {"location": city})])
              for city in ["Oslo", "Rome", "Lima", "Kyiv"][:steps - 1]],
            ScriptedReply(content="done")])
        handle = await start(client, agents_queue, parent, one_shot=True)
        status = await settled(handle, timeout_s=60)
        assert status.final_answer == "done"
        kid = await client.get_workflow_handle(f"{handle.id}/h1").query(ConversationWorkflow.status)
        assert kid.steps == steps
        # What the parent's own steps recorded: workflow tasks and the stream's publish signals
        # come and group as the timing goes, so they are left out.
        events = [e for e in await parent_history(client, handle.id)
                  if e.event_type not in WORKFLOW_TASK_EVENTS
                  and e.event_type != EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED]
        sizes.append((len(events), sum(e.ByteSize() for e in events)))
    (n1, b1), (n5, b5) = sizes
    assert n1 == n5 and abs(b1 - b5) < 512, sizes


async def test_cancelling_the_parent_cancels_its_children(
        client: Client, agents_queue: str, model: ScriptedModelServer):
    parent = delegating(model, "cancel", "writer", "k1", [
        ScriptedReply(tool_calls=[tool_call("create_note", {"title": "x", "body": "b"})]),
        ScriptedReply(content="never")], "never")
    async def closed(h) -> WorkflowExecutionStatus:
        for _ in range(100):
            if (described := await h.describe()).status != WorkflowExecutionStatus.RUNNING:
                return described.status
            await asyncio.sleep(0.2)
        raise AssertionError(f"{h.id} still running")

    handle = await start(client, agents_queue, parent)
    await reaches(handle, "waiting_for_confirmation", timeout_s=30)
    await handle.cancel()
    kid = client.get_workflow_handle(f"{handle.id}/k1")
    assert await closed(handle) == await closed(kid) == WorkflowExecutionStatus.CANCELED
    assert (await kid.query(ConversationWorkflow.status)).stop_reason == "cancelled"

    # Ending the parent interrupts its turn, and with it the child.
    handle = await start(client, agents_queue, parent)
    await reaches(handle, "waiting_for_confirmation", timeout_s=30)
    await handle.signal(ConversationWorkflow.end, EndRequest())
    kid = client.get_workflow_handle(f"{handle.id}/k1")
    assert await closed(kid) == WorkflowExecutionStatus.CANCELED
    assert (await settled(handle)).stop_reason == "ended"


async def test_delegation_deeper_than_the_limit_is_refused(
        client: Client, agents_queue: str, model: ScriptedModelServer):
    third = script(model, unique("depth3"), ScriptedReply(content="unreachable"))
    second = script(model, unique("depth2"),
                    ScriptedReply(tool_calls=[delegate("deep", f"{third}: go", "d3")]),
                    ScriptedReply(content="second: {last_tool}"))
    first = script(model, unique("depth1"),
                   ScriptedReply(tool_calls=[delegate("deep", f"{second}: go", "d2")]),
                   ScriptedReply(content="first: {last_tool}"))
    parent = script(model, unique("depth0"),
                    ScriptedReply(tool_calls=[delegate("deep", f"{first}: go", "d1")]),
                    ScriptedReply(content="top: {last_tool}"))
    handle = await start(client, agents_queue, parent, one_shot=True)
    status = await settled(handle, timeout_s=60)
    assert status.final_answer.startswith("top: first: second: Error: not delegated")
    assert "past the limit of 2" in status.final_answer
    assert model.count(third) == 0




def started_input(events) -> dict:
    """A conversation's input, as its first history event holds it."""
    payload = events[0].workflow_execution_started_event_attributes.input.payloads[0]
    return json.loads(payload.data)


async def test_children_share_what_is_left_of_the_parents_budgets(
        client: Client, agents_queue: str, model: ScriptedModelServer):
    kids = [script(model, unique(f"share-{n}"), ScriptedReply(content=f"kid {n}", delay_s=0.3))
            for n in (1, 2)]
    parent = script(model, unique("share"),
                    ScriptedReply(tool_calls=[delegate("researcher", f"{kids[0]}: go", "b1"),
                                              delegate("researcher", f"{kids[1]}: go", "b2")]),
                    ScriptedReply(content="both: {last_tool}"))
    handle = await start(client, agents_queue, parent, model="gpt-4o-mini",
                         max_total_tokens=100_000, max_cost_usd=1.0)
    status = await reaches(handle, "idle", timeout_s=60)
    assert status.stop_reason == "answered", status
    first = (await steps_of(handle))[0].tokens  # before the children
    given = [started_input(await parent_history(client, f"{handle.id}/{kid}"))
             for kid in ("b1", "b2")]
    # Both started at once: each got half of what the parent's first step left, reserved (in
    # whole tokens: the second gets the odd one).
    left = 100_000 - first.total_tokens
    assert sorted(g["max_total_tokens"] for g in given) == [left // 2, left - left // 2]
    for g in given:
        assert g["max_cost_usd"] == pytest.approx((1.0 - first.cost_usd) / 2)
    await replay(handle, "subagents_share_the_budgets")


async def test_a_child_whose_id_someone_holds_is_an_observation_not_a_failed_parent(
        client: Client, agents_queue: str, model: ScriptedModelServer):
    """A child's id is `<parent>/<call id>`: someone who can start conversations can start one
    with it first (AG-UI's thread id, say). The parent is told, and goes on."""
    parent_id = unique("squatted")
    squatter = await client.start_workflow(
        ConversationWorkflow.run, ConversationInput(prompt=script(
            model, unique("squatter"), ScriptedReply(content="mine"))),
        id=f"{parent_id}/sq1", task_queue=agents_queue)
    await reaches(squatter, "idle")
    parent = delegating(model, "squatted", "researcher", "sq1",
                        [ScriptedReply(content="never")], "after: {last_tool}")
    handle = await client.start_workflow(
        ConversationWorkflow.run, ConversationInput(prompt=parent, llm=FAST_LLM), id=parent_id,
        task_queue=agents_queue)
    status = await reaches(handle, "idle", timeout_s=60)
    assert status.stop_reason == "answered", status
    assert status.final_answer.startswith("after: Error: the researcher agent could not start")
    assert f"{parent_id}/sq1 already exists" in status.final_answer
    await squatter.signal(ConversationWorkflow.end, EndRequest())


async def test_a_subagents_report_delivered_late_does_not_undo_a_later_one(
        client: Client, agents_queue: str, model: ScriptedModelServer):
    """Signals from one workflow may arrive out of order: the child's report that it runs
    (sent before it came to wait), delivered after the report that it waits, must not hide the
    call it waits on."""
    title = unique("late-report")
    handle = await start(client, agents_queue, delegating(
        model, "late", "writer", "w", [ScriptedReply(tool_calls=[tool_call(
            "create_note", {"title": title, "body": "b"})]), ScriptedReply(content="ok")]))
    for _ in range(150):
        status = await handle.query(ConversationWorkflow.status)
        if status.pending_confirmations:
            break
        await asyncio.sleep(0.1)
    [waiting] = status.pending_confirmations
    late = ChildReport(workflow_id=f"{handle.id}/w", profile="writer", status="running", seq=0)
    await handle.signal(CHILD_STATUS_SIGNAL, late)
    with pytest.raises(WorkflowUpdateFailedError):  # a barrier: taken after the signal is
        await handle.execute_update(ConversationWorkflow.decide_confirm,
                                    ConfirmRequest(call_ids=["none"]))
    status = await handle.query(ConversationWorkflow.status)
    assert status.pending_confirmations == [waiting] and status.status == \
        "waiting_for_confirmation"
    await handle.signal(ConversationWorkflow.end)


async def test_at_most_max_parallel_subagents_run_at_once_and_every_one_runs(
        client: Client, agents_queue: str, model: ScriptedModelServer):
    """A step that delegates to five researchers, two at a time: the parent's history shows
    no more than two children open at once, and all five answered."""
    child = script(model, unique("slow-fact"), ScriptedReply(content="a fact", delay_s=0.5))
    parent = script(model, unique("fan-out-agents"),
                    ScriptedReply(tool_calls=[delegate("researcher", f"{child}: {n}", f"c{n}")
                                              for n in range(5)]),
                    ScriptedReply(content="Heard: {last_tool}"))
    handle = await start(client, agents_queue, parent, max_parallel_subagents=2)
    status = await settled(handle, timeout_s=90)
    assert status.final_answer == "Heard: a fact"
    assert [c.status for c in status.children] == ["completed"] * 5
    open_now, most = 0, 0
    for event in await parent_history(client, handle.id):
        if event.event_type == EventType.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED:
            open_now += 1
            most = max(most, open_now)
        elif event.event_type == EventType.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_COMPLETED:
            open_now -= 1
    assert most == 2
    await handle.signal(ConversationWorkflow.end, EndRequest())
    await handle.result()
    await replay(handle, "five_subagents_two_at_once")
