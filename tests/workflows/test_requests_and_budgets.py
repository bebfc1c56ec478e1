"""Behaviours a user relies on that no other test pinned down: four eyes under a trusting
policy, a request re-sent while its first copy waits, a subagent with no budget left, a model
call that times out on one entry, and an entry's `max_concurrency`."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta

import httpx
import pytest
import pytest_asyncio
from temporalio.api.enums.v1 import EventType, PendingActivityState
from temporalio.client import Client, WorkflowHandle
from temporalio.service import RPCError, RPCStatusCode

from durable_react_agent.activities.models import ModelEntry, Models
from durable_react_agent.activities.profiles import AgentProfile, Profiles
from durable_react_agent.activities.settings import ActivitySettings
from durable_react_agent.contract import (
    SETTLED_STATUSES,
    ApprovalPolicy,
    ConfirmRequest,
    LLMOptions,
    RejectRequest,
)
from durable_react_agent.testing import ScriptedModelServer, ScriptedReply, ScriptedToolCall
from durable_react_agent.worker.app import build_worker
from durable_react_agent.workflows.conversation import ConversationWorkflow
from tests.fake_tools import registry_with_test_tools
from tests.helpers import (
    FAST_LLM,
    note_rows,
    outcome_of,
    reaches,
    script,
    settled,
    start,
    steps_of,
    tool_call,
    tool_messages,
    unique,
    until,
)

FIRST_CALL = "call_0_0"  # the scripted model numbers calls `call_{step}_{i}`


@asynccontextmanager
async def serving(client: Client, settings: ActivitySettings) -> AsyncIterator[str]:
    """A worker of its own with these settings, on a fresh task queue."""
    queue = unique("held")
    async with (httpx.AsyncClient(timeout=10) as http,
                build_worker(client, queue, settings, http, registry_with_test_tools())):
        yield queue


def note_call(title: str) -> ScriptedReply:
    return ScriptedReply(tool_calls=[tool_call("create_note", {"title": title, "body": "b"})])


# ----- 1. four eyes under a trusting policy -----

@pytest_asyncio.fixture(scope="module")
async def four_eyes_queue(client: Client, activity_settings: ActivitySettings
                          ) -> AsyncIterator[str]:
    """A worker with AGENT_FOUR_EYES=sensitive."""
    settings = dataclasses.replace(activity_settings, four_eyes=("sensitive",))
    async with serving(client, settings) as queue:
        yield queue


@pytest.mark.parametrize("policy", [
    ApprovalPolicy(auto_approve=["create_note"]),
    ApprovalPolicy(require_approval_for=[]),
], ids=["auto-approve", "nothing-required"])
async def test_four_eyes_waits_for_a_person_whatever_the_policy_trusts(
        client: Client, four_eyes_queue: str, model: ScriptedModelServer,
        activity_settings: ActivitySettings, policy: ApprovalPolicy):
    title = unique("four-eyes")
    trigger = script(model, unique("four-eyes"), note_call(title),
                     ScriptedReply(content="Done: {last_tool}"))
    handle = await start(client, four_eyes_queue, trigger, owner="alice", approval=policy)
    waiting = await settled(handle)
    assert waiting.status == "waiting_for_confirmation", waiting
    [pending] = waiting.pending_confirmations
    assert (pending.tool, pending.risk, pending.four_eyes) == ("create_note", "sensitive", True)
    assert note_rows(activity_settings.data_dir, title) == []  # nothing written before a person

    await handle.signal(ConversationWorkflow.confirm, ConfirmRequest(
        request_id="bob-ok", call_ids=[pending.call_id], approver="bob"))
    done = await settled(handle)
    assert done.stop_reason == "answered", done
    assert [(d.approver, d.approved) for d in done.decisions] == [("bob", True)]
    assert len(note_rows(activity_settings.data_dir, title)) == 1


# ----- 2. a request re-sent while its first copy waits -----

async def signals_recorded(handle: WorkflowHandle, count: int) -> None:
    signaled = EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        events = (await handle.fetch_history()).events
        if sum(e.event_type == signaled for e in events) >= count:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"the history never held {count} signal(s)")


async def test_a_request_resent_while_its_first_copy_waits_keeps_the_first_outcome(
        client: Client, task_queue: str, model: ScriptedModelServer,
        activity_settings: ActivitySettings):
    title = unique("resent")
    first = note_call(title).model_copy(update={"hold": True})
    trigger = script(model, unique("resent"), first, ScriptedReply(content="Done: {last_tool}"))
    handle = await start(client, task_queue, trigger)
    assert await asyncio.to_thread(model.wait_for_request, trigger, 0, 30.0)
    # Both name a call the held reply has not brought yet: the first waits for it, and the
    # second, with the same request id, is the same request.
    await handle.signal(ConversationWorkflow.confirm, ConfirmRequest(
        request_id="R", call_ids=[FIRST_CALL], approver="ann"))
    await handle.signal(ConversationWorkflow.reject, RejectRequest(
        request_id="R", call_ids=[FIRST_CALL], approver="bob", reason="changed my mind"))
    await signals_recorded(handle, 2)
    assert await handle.query(ConversationWorkflow.signal_outcome, "R") is None  # it waits
    model.release()

    done = await settled(handle)
    outcome = await outcome_of(handle, "R")
    assert outcome.accepted, outcome
    assert done.stop_reason == "answered", done
    assert [(d.call_id, d.approver, d.approved) for d in done.decisions] == [
        (FIRST_CALL, "ann", True)]
    assert len(note_rows(activity_settings.data_dir, title)) == 1


# ----- 3. a subagent whose budget share is 0 -----

PROFILES = {
    "researcher": AgentProfile(description="Finds facts", system_prompt="You research.",
                               tools=[], max_steps=2),
    "writer": AgentProfile(description="Writes", system_prompt="You write.", tools=[],
                           max_steps=2),
}
BUDGET = 8_000  # tokens: more than the parent's first step, less than that and the first child's
LONG_ANSWER = "x" * 4 * 2 * BUDGET  # about 2 × BUDGET completion tokens at 4 characters a token


@pytest_asyncio.fixture(scope="module")
async def agents_queue(client: Client, activity_settings: ActivitySettings) -> AsyncIterator[str]:
    settings = dataclasses.replace(activity_settings, profiles=Profiles(PROFILES))
    async with serving(client, settings) as queue:
        yield queue


async def exists(client: Client, workflow_id: str) -> bool:
    try:
        await client.get_workflow_handle(workflow_id).describe()
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            return False
        raise
    return True


async def settled_unless_stuck(handle: WorkflowHandle, timeout_s: float = 20):
    """`settled`, but a workflow task that fails (the conversation is stuck, and its queries
    would only time out) fails the test at once, with the reason."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for event in (await handle.fetch_history()).events:
            if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED:
                failure = event.workflow_task_failed_event_attributes.failure.message
                raise AssertionError(f"the conversation's workflow task failed: {failure}")
        try:
            status = await handle.query(ConversationWorkflow.status,
                                        rpc_timeout=timedelta(seconds=1))
        except RPCError:  # no answer while the task fails: look at the history again
            continue
        if status.status in SETTLED_STATUSES:
            return status
        await asyncio.sleep(0.1)
    raise AssertionError(f"the conversation did not settle in {timeout_s}s")


async def test_a_subagent_is_not_started_once_the_budget_is_used_up(
        client: Client, agents_queue: str, model: ScriptedModelServer):
    """The researcher runs at once (its policy lets it) and spends what is left; the writer
    waits for a person, and once approved finds nothing left: it is not delegated."""
    spender = script(model, unique("spender"), ScriptedReply(content=LONG_ANSWER))
    late = script(model, unique("late"), ScriptedReply(content="never asked"))
    parent = script(model, unique("budget"),
                    ScriptedReply(tool_calls=[
                        ScriptedToolCall(name="agent__researcher",
                                         arguments={"task": f"{spender}: go"}, id="r1"),
                        ScriptedToolCall(name="agent__writer",
                                         arguments={"task": f"{late}: go"}, id="w1")]),
                    ScriptedReply(content="after: {last_tool}"))
    policy = ApprovalPolicy(require_approval_for=["safe", "sensitive", "destructive"],
                            auto_approve=["agent__researcher"])
    handle = await start(client, agents_queue, parent, approval=policy, max_total_tokens=BUDGET)
    waiting = await settled(handle, timeout_s=60)
    assert waiting.status == "waiting_for_confirmation", waiting
    assert waiting.usage.total_tokens >= BUDGET  # the parent's step and the researcher's
    assert [p.call_id for p in waiting.pending_confirmations] == ["w1"]

    await handle.signal(ConversationWorkflow.confirm, ConfirmRequest(
        request_id="go", call_ids=["w1"], approver="ann"))
    done = await settled_unless_stuck(handle)
    assert done.stop_reason == "budget_exceeded", done
    observations = {m.tool_call_id: m.content for m in await tool_messages(handle)}
    assert observations["w1"].startswith(
        "Error: not delegated: the conversation's budget is used up"), observations["w1"]
    assert [(c.profile, c.status) for c in done.children] == [("researcher", "completed")]
    assert not await exists(client, f"{handle.id}/w1")
    assert model.count(late) == 0
    [own] = await steps_of(handle)
    assert own.tokens.total_tokens < BUDGET  # the parent's own step left some for the round


# ----- 4. a model call that times out falls back -----

async def test_a_model_call_that_times_out_falls_back_to_the_next_entry(
        client: Client, model: ScriptedModelServer, activity_settings: ActivitySettings):
    trigger = unique("too-slow")
    script(model, trigger, ScriptedReply(content="from the backup"))
    with ScriptedModelServer() as slow:  # answers only when released: never, here
        script(slow, trigger, ScriptedReply(content="from main, too late", hold=True))
        models = Models({"main": ModelEntry(model="main-model", base_url=slow.base_url),
                         "backup": ModelEntry(model="backup-model", base_url=model.base_url)},
                        default="main", fallbacks={"main": ["backup"]})
        llm = LLMOptions(timeout_s=1, heartbeat_timeout_s=3, max_attempts=1,
                         max_retry_interval_s=1)
        async with serving(client, dataclasses.replace(activity_settings, models=models)) as queue:
            handle = await start(client, queue, trigger, llm=llm)
            done = await settled(handle, timeout_s=30)
            [step] = await steps_of(handle)
        assert slow.count(trigger) == 1  # main was asked, and did not answer in time
    assert (done.stop_reason, done.final_answer) == ("answered", "from the backup"), done
    assert step.entry == "backup"
    assert done.turns[-1].fallbacks == 1


# ----- 5. an entry's max_concurrency -----

async def llm_call_started(handle: WorkflowHandle, timeout_s: float = 15) -> None:
    """Until the worker runs the conversation's model call (then waiting for a slot, if any)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        pending = (await handle.describe()).raw_description.pending_activities
        if any(a.activity_type.name.startswith("llm_")
               and a.state == PendingActivityState.PENDING_ACTIVITY_STATE_STARTED
               for a in pending):
            return
        await asyncio.sleep(0.05)
    raise AssertionError("the model call never started")


async def test_max_concurrency_one_serves_two_conversations_one_at_a_time(
        client: Client, model: ScriptedModelServer, activity_settings: ActivitySettings):
    triggers = [unique("solo-a"), unique("solo-b")]
    for trigger in triggers:
        script(model, trigger, ScriptedReply(content=f"answer to {trigger}", hold=True))
    models = Models({"solo": ModelEntry(model="solo-model", base_url=model.base_url,
                                        max_concurrency=1)}, default="solo")
    llm = FAST_LLM  # a 3 s heartbeat timeout: the call queued for its slot waits longer

    def arrived() -> list[str]:
        return [r.trigger for r in model.requests if r.trigger in triggers and r.kind == "chat"]

    async with serving(client, dataclasses.replace(activity_settings, models=models)) as queue:
        handles = [await start(client, queue, t, llm=llm) for t in triggers]
        try:
            for handle in handles:
                await llm_call_started(handle)
            await until(lambda: bool(arrived()), 15)
            other = next(t for t in triggers if t != arrived()[0])
            # The other call runs too, in the same worker: had it a slot, it would be out by now.
            # It waits past its heartbeat timeout, heartbeating: no retry sends it a second time.
            overlapped = await asyncio.to_thread(
                model.wait_for_request, other, None, llm.heartbeat_timeout_s + 1.5)
        finally:
            released = time.monotonic()
            model.release()
        assert not overlapped, f"both calls were in flight at once: {arrived()}"
        done = [await reaches(h, "idle") for h in handles]
    assert [d.final_answer for d in done] == [f"answer to {t}" for t in triggers]
    [later] = [r for r in model.requests if r.trigger == other]  # sent once, not once a retry
    assert later.at >= released  # it went out only once the first had its answer

