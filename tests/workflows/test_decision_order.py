"""A human request and the result it depends on, in one workflow task or in two.

Temporal may hand the conversation a model reply and a decision about one of the reply's calls in
one workflow task, and applies the decision first. The run that recorded the history may have
seen them in two (a task whose completion was lost while the server restarted: a chaos run of
0.x found two such histories). The conversation must do the same whichever way they come. Here the workflow worker is stopped while the model call is in
flight, so that the reply and the request land in one task, in either order; the history is then
replayed.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import httpx
import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle

from durable_react_agent.activities.settings import ActivitySettings
from durable_react_agent.contract import (
    AnswerRequest,
    ConfirmRequest,
    ConversationStatus,
    SayRequest,
)
from durable_react_agent.rules.gate import args_hash
from durable_react_agent.testing import ScriptedModelServer, ScriptedReply
from durable_react_agent.worker.app import build_worker
from durable_react_agent.workflows.conversation import ConversationWorkflow
from tests.fake_tools import registry_with_test_tools
from tests.helpers import (
    note_rows,
    outcome_of,
    reaches,
    replay,
    script,
    settled,
    start,
    tool_call,
    unique,
)

FIRST_CALL = "call_0_0"  # the scripted model numbers calls `call_{step}_{i}`
Send = Callable[[WorkflowHandle], Awaitable[None]]
COMPLETED = EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED
SIGNALED = EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED


@asynccontextmanager
async def serving(client: Client, queue: str, settings: ActivitySettings, *,
                  workflows: bool = True, activities: bool = True) -> AsyncIterator[None]:
    async with httpx.AsyncClient(timeout=10) as http:
        async with build_worker(client, queue, settings, http, registry_with_test_tools(),
                                workflows=workflows, activities=activities):
            yield


async def events_of(handle: WorkflowHandle) -> list:
    return list((await handle.fetch_history()).events)


async def until_recorded(handle: WorkflowHandle, kind: int, count: int = 1) -> None:
    for _ in range(300):
        if sum(e.event_type == kind for e in await events_of(handle)) >= count:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"the history never held {count} event(s) of type {kind}")


@asynccontextmanager
async def landed_together(client: Client, model: ScriptedModelServer, settings: ActivitySettings,
                          trigger: str, send: Send, signal_first: bool
                          ) -> AsyncIterator[WorkflowHandle]:
    """A conversation on `trigger` whose first model reply and a signal (`send`) landed in one
    workflow task, in the order asked: its workflow worker is stopped while the model call is
    in flight (the activities are served throughout), and started again once both are in."""
    queue = unique("order")
    async with serving(client, queue, settings, workflows=False):
        async with serving(client, queue, settings, activities=False):
            handle = await start(client, queue, f"{trigger} go")
            assert await asyncio.to_thread(model.wait_for_request, trigger, 0, 30.0)
        if signal_first:
            await send(handle)
            await until_recorded(handle, SIGNALED)
        model.release()
        await until_recorded(handle, COMPLETED)  # the model call (the handshake ran locally)
        if not signal_first:
            await send(handle)
            await until_recorded(handle, SIGNALED)
        async with serving(client, queue, settings, activities=False):
            yield handle


async def assert_one_task_took_both(handle: WorkflowHandle, signal_first: bool) -> None:
    events = await events_of(handle)
    reply = next(e.event_id for e in events if e.event_type == COMPLETED)
    signal = next(e.event_id for e in events if e.event_type == SIGNALED)
    assert (signal < reply) == signal_first
    between = [e for e in events if min(reply, signal) < e.event_id < max(reply, signal)]
    assert not any(e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED for e in between)


def confirming(request_id: str, **fields) -> Send:
    async def send(handle: WorkflowHandle) -> None:
        await handle.signal("confirm", ConfirmRequest(request_id=request_id, approver="ann",
                                                      **fields))
    return send


def note_reply(title: str) -> ScriptedReply:
    return ScriptedReply(tool_calls=[tool_call("create_note", {"title": title, "body": "b"})],
                         hold=True)


ORDERS = pytest.mark.parametrize("signal_first", [False, True],
                                 ids=["reply-then-signal", "signal-then-reply"])


@ORDERS
async def test_a_confirm_in_the_task_of_the_reply_naming_its_call_is_taken(
    client: Client, model: ScriptedModelServer, activity_settings: ActivitySettings,
    signal_first: bool,
):
    title = unique("order-note")
    trigger = script(model, unique("order"), note_reply(title),
                     ScriptedReply(content="done: {last_tool}"))
    async with landed_together(client, model, activity_settings, trigger,
                               confirming("c1", call_ids=[FIRST_CALL]), signal_first) as handle:
        final = await settled(handle, timeout_s=60)
        outcome = await outcome_of(handle, "c1")
    await assert_one_task_took_both(handle, signal_first)
    assert outcome.accepted, outcome
    assert final.stop_reason == "answered" and final.status == "idle", final
    assert len(note_rows(activity_settings.data_dir, title)) == 1
    assert [(d.call_id, d.approver) for d in final.decisions] == [(FIRST_CALL, "ann")]
    await replay(handle, f"decision_in_the_reply_task_{'signal' if signal_first else 'reply'}_first")


@ORDERS
async def test_a_confirm_bound_to_other_args_or_naming_no_call_of_the_reply_is_refused(
    client: Client, model: ScriptedModelServer, activity_settings: ActivitySettings,
    signal_first: bool,
):
    title = unique("order-note")
    trigger = script(model, unique("order"), note_reply(title),
                     ScriptedReply(content="done: {last_tool}"))

    async def send(handle: WorkflowHandle) -> None:
        seen = {FIRST_CALL: args_hash({"title": "other", "body": "b"})}
        await confirming("bound", call_ids=[FIRST_CALL], seen=seen)(handle)
        await confirming("unknown", call_ids=["call_9_9"])(handle)

    async with landed_together(client, model, activity_settings, trigger, send,
                               signal_first) as handle:
        status = await settled(handle, timeout_s=60)
        bound, unknown = await outcome_of(handle, "bound"), await outcome_of(handle, "unknown")
        assert status.status == "waiting_for_confirmation"
        assert [p.call_id for p in status.pending_confirmations] == [FIRST_CALL]
        assert not bound.accepted and "not the ones this decision saw" in bound.reason
        assert not unknown.accepted and "unknown call id call_9_9" in unknown.reason
        seen = {FIRST_CALL: status.pending_confirmations[0].args_hash}
        await confirming("right", call_ids=[FIRST_CALL], seen=seen)(handle)
        assert (await outcome_of(handle, "right")).accepted
        final = await settled(handle, timeout_s=60)
    assert final.stop_reason == "answered" and len(note_rows(activity_settings.data_dir, title)) == 1
    await replay(handle, "refused_decisions_in_the_reply_task")


@ORDERS
async def test_an_answer_in_the_task_of_the_reply_that_asks_is_taken(
    client: Client, model: ScriptedModelServer, activity_settings: ActivitySettings,
    signal_first: bool,
):
    trigger = script(
        model, unique("order"),
        ScriptedReply(tool_calls=[tool_call("ask_choice", {"message": "Which?",
                                                           "options": ["red", "blue"]})],
                      hold=True),
        ScriptedReply(content="you chose {last_tool}"))

    async def send(handle: WorkflowHandle) -> None:
        await handle.signal("answer", AnswerRequest(request_id="a1", values=["blue"]))

    async with landed_together(client, model, activity_settings, trigger, send,
                               signal_first) as handle:
        final = await settled(handle, timeout_s=60)
        outcome = await outcome_of(handle, "a1")
    await assert_one_task_took_both(handle, signal_first)
    assert outcome.accepted, outcome
    assert final.final_answer == "you chose blue", final


async def test_a_request_id_acts_once_even_when_its_call_comes_back(
    client: Client, model: ScriptedModelServer, activity_settings: ActivitySettings
):
    """A retried confirm (a lost response, AG-UI's deterministic resume ids, an Update that got
    a 503 and was applied later) must not approve the call again once the worker has put it
    back before a human at a higher risk under the same id."""
    from tests.fake_tools import registry  # a tool whose risk the worker decides

    queue = unique("once")
    trigger = script(model, unique("once"),
                     ScriptedReply(tool_calls=[tool_call("account_read", {"what": "balance"})]),
                     ScriptedReply(content="{last_tool}"))
    async with httpx.AsyncClient(timeout=10) as http:
        async with build_worker(client, queue, activity_settings, http, registry("sensitive")):
            handle = await start(client, queue, trigger)
            waiting = await reaches(handle, "waiting_for_confirmation")
        [pending] = waiting.pending_confirmations
        assert pending.risk == "sensitive"
        async with build_worker(client, queue, activity_settings, http, registry("destructive")):
            retried = ConfirmRequest(request_id="r1", call_ids=[pending.call_id], approver="ann")
            await handle.signal("confirm", retried)
            back = await reaches_risk(handle, "destructive")
            await handle.signal("confirm", retried)  # the same request, delivered again
            await handle.signal("say", SayRequest(text="hello", request_id="s1"))
            await handle.execute_update("send_message", SayRequest(text="hello", request_id="s1"))
            again = await handle.query("status", result_type=ConversationStatus)
            assert [p.call_id for p in again.pending_confirmations] == [back.call_id]
            assert again.queued_messages == 1  # the message once, though sent twice
            assert (await outcome_of(handle, "r1")).accepted
            await handle.signal("confirm", ConfirmRequest(request_id="r2", approver="bob",
                                                          call_ids=[back.call_id]))
            await settled(handle, turn=2)
            records = await handle.query(ConversationWorkflow.history)
    [action] = [a for r in records for a in r.actions]
    assert (action.status, action.decision.approver) == ("ok", "bob")  # not the retried r1
    assert [r.turn for r in records if r.stop_reason] == [1, 2]  # "hello" made one turn


async def reaches_risk(handle: WorkflowHandle, risk: str):
    for _ in range(300):
        status = await handle.query("status", result_type=ConversationStatus)
        if status.pending_confirmations and status.pending_confirmations[0].risk == risk:
            return status.pending_confirmations[0]
        await asyncio.sleep(0.1)
    raise AssertionError(f"the call never came back at {risk}")
