"""Fair limits per owner (issue 50, `AGENT_OWNER_LIMITS`): an owner's turns running at once and
daily budget, held by the owner's ledger workflow. A turn past a limit waits and says why
(status `held`, the stream, webhooks), and goes on when a turn ends or an admin raises it."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import AsyncIterator

import httpx
import pytest
import pytest_asyncio
from temporalio.client import Client, WorkflowHandle

from durable_react_agent.activities.settings import ActivitySettings
from durable_react_agent.activities.webhooks import Webhook, Webhooks
from durable_react_agent.contract import ConfirmRequest, ConversationStatus, EndRequest
from durable_react_agent.contract.owner import (
    LEDGER_QUERY,
    LEDGER_WORKFLOW_TYPE,
    SET_LIMITS_UPDATE,
    LedgerState,
    LedgerView,
    OwnerLimits,
    OwnerLimitsFile,
    SetLimits,
    ledger_id,
)
from durable_react_agent.testing import ScriptedModelServer, ScriptedReply
from durable_react_agent.worker.app import build_worker
from durable_react_agent.workflows.conversation import ConversationWorkflow
from tests.fake_tools import registry_with_test_tools
from tests.helpers import replay, script, settled, start, status_of, tool_call, unique, until
from tests.webhook_support import SECRET, Receiver


def limited(settings: ActivitySettings, **limits) -> ActivitySettings:
    return dataclasses.replace(settings, owner_limits=OwnerLimitsFile.model_validate(
        {"default": limits}))


@pytest_asyncio.fixture
async def two_turns_queue(client: Client, activity_settings: ActivitySettings,
                          receiver: Receiver, monkeypatch: pytest.MonkeyPatch
                          ) -> AsyncIterator[str]:
    """A worker that lets an owner run two turns at once, and tells a receiver of a turn that
    waits (`turn_held`)."""
    monkeypatch.setenv("TEST_HOOK_SECRET", SECRET)
    hooks = Webhooks([Webhook(url=receiver.url, secret_env="TEST_HOOK_SECRET",
                              events=["turn_held"])], public_url="http://127.0.0.1:8000")
    queue = unique("owner-turns")
    async with httpx.AsyncClient(timeout=10) as http, build_worker(
            client, queue, dataclasses.replace(limited(activity_settings, running_turns=2),
                                               webhooks=hooks), http, registry_with_test_tools()):
        yield queue


async def held(handle: WorkflowHandle) -> ConversationStatus:
    status: ConversationStatus | None = None

    async def is_held() -> bool:
        nonlocal status
        status = await status_of(handle, time.monotonic() + 30)
        return status.held is not None

    await until(is_held, what=lambda: f"{handle.id} held: {status}")
    assert status is not None
    return status


async def ledger(client: Client, owner: str) -> LedgerView:
    return await client.get_workflow_handle(ledger_id(owner)).query(
        LEDGER_QUERY, result_type=LedgerView)


async def test_an_owner_with_two_running_turns_has_the_third_wait_and_then_run(
        client: Client, two_turns_queue: str, model: ScriptedModelServer, receiver: Receiver):
    owner, note = unique("alice"), unique("note")
    waits = script(model, note, ScriptedReply(tool_calls=[tool_call(
        "create_note", {"title": "t", "body": "b"})]), ScriptedReply(content="Noted."))
    quick = script(model, unique("quick"), ScriptedReply(content="Quick answer."))
    first, second = [await start(client, two_turns_queue, f"{waits} {n}", owner=owner)
                     for n in range(2)]
    for handle in (first, second):
        assert (await settled(handle)).status == "waiting_for_confirmation"
    third = await start(client, two_turns_queue, quick, owner=owner)
    status = await held(third)
    assert status.status == "running" and status.held.limit == "running_turns"
    assert status.held.message == (f"queued behind 2 running turn(s) of {owner} (at most 2 at "
                                   "once)")
    held_hook, = await receiver.until("turn_held")
    assert held_hook["json"]["conversation_id"] == third.id
    assert (held_hook["json"]["limit"], held_hook["json"]["message"]) == (
        "running_turns", status.held.message)
    view = await ledger(client, owner)
    assert view.running == sorted([first.id, second.id])
    assert [w.conversation_id for w in view.waiting] == [third.id]
    # someone else's turns are not held by alice's
    other = await start(client, two_turns_queue, quick, owner=unique("bob"))
    assert (await settled(other)).final_answer == "Quick answer."

    call = (await status_of(first, time.monotonic() + 30)).pending_confirmations[0].call_id
    await first.signal(ConversationWorkflow.confirm, ConfirmRequest(call_ids=[call]))
    assert (await settled(first)).final_answer == "Noted."
    status = await settled(third)
    assert status.final_answer == "Quick answer." and status.held is None
    await until(lambda: ledger_running(client, owner, [second.id]),
                what="the third turn's slot given back")
    for handle in (first, second, third, other):
        await handle.signal(ConversationWorkflow.end, EndRequest())
        await handle.result()
    await replay(third, record_as="third_turn_waited_for_the_owner_s_slot")
    await replay(client.get_workflow_handle(ledger_id(owner)), record_as="owner_ledger_of_slots")


async def ledger_running(client: Client, owner: str, running: list[str]) -> bool:
    view = await ledger(client, owner)
    return view.running == running and not view.waiting


async def test_a_daily_budget_holds_across_20_conversations_until_an_admin_raises_it(
        client: Client, activity_settings: ActivitySettings, model: ScriptedModelServer):
    """Each conversation's one model call sets aside its prompt and a reply's reserve; the
    owner's spending never passes the limit, the rest wait saying why, and a raised limit
    lets them go on."""
    owner, queue = unique("carol"), unique("owner-budget")
    trigger = script(model, unique("budget"), ScriptedReply(content="Within budget."))
    async with httpx.AsyncClient(timeout=10) as http, build_worker(
            client, queue, limited(activity_settings, daily_tokens=20_000), http,
            registry_with_test_tools()):
        handles = await asyncio.gather(*(start(client, queue, f"{trigger} {n}", owner=owner)
                                         for n in range(20)))

        statuses: list[ConversationStatus] = []

        async def settled_or_held() -> bool:  # and the ledger holds nothing for a running turn
            nonlocal statuses
            statuses = await asyncio.gather(*(status_of(h, time.monotonic() + 30)
                                              for h in handles))
            view = await ledger(client, owner)
            return view.held_tokens == 0 and all(s.status == "idle" or s.held is not None
                                                 for s in statuses)

        await until(settled_or_held, timeout_s=120, what=lambda: str([s and (s.status, s.held and s.held.limit) for s in statuses]))
        answered = [s for s in statuses if s.status == "idle"]
        waiting = [s for s in statuses if s.held is not None]
        assert answered and waiting and len(answered) + len(waiting) == 20
        spent = sum(s.usage.total_tokens for s in statuses)
        view = await ledger(client, owner)
        assert spent == view.used_tokens <= 20_000, (spent, view)
        assert len(view.waiting) == len(waiting), view
        assert all(s.held.limit == "daily_tokens" for s in waiting)
        # as things stand now (a turn may have been told it waits behind others when it asked)
        assert all("daily budget of 20,000 tokens is spent" in w.message for w in view.waiting)

        raised = await client.get_workflow_handle(ledger_id(owner)).execute_update(
            SET_LIMITS_UPDATE, SetLimits(limits=OwnerLimits(daily_tokens=200_000), by="admin"),
            result_type=LedgerView)
        assert raised.limits.daily_tokens == 200_000
        assert raised.waiting == [] and raised.held_tokens > 0  # granted before the answer
        statuses = await asyncio.gather(*(settled(h, timeout_s=120) for h in handles))
        assert {s.final_answer for s in statuses} == {"Within budget."}
        view = await ledger(client, owner)
        assert view.used_tokens == sum(s.usage.total_tokens for s in statuses)
        assert view.held_tokens == 0 and view.running == [] and view.waiting == []
        for handle in handles:
            await handle.signal(ConversationWorkflow.end, EndRequest())
        await asyncio.gather(*(h.result() for h in handles))
        await replay(handles[-1], record_as="turn_waited_for_the_owner_s_daily_budget")
        await replay(client.get_workflow_handle(ledger_id(owner)),
                     record_as="owner_ledger_raised_by_an_admin")


async def test_a_slot_held_by_a_terminated_conversation_is_taken_back_for_the_next_turn(
        client: Client, two_turns_queue: str, model: ScriptedModelServer):
    """A conversation terminated mid-turn never gives its slot back: once a turn has waited a
    while (here a second), the ledger finds its holder closed, counts its lease as spent, and
    lets the waiting turn run."""
    owner = unique("frank")
    await client.start_workflow(
        LEDGER_WORKFLOW_TYPE, LedgerState(owner=owner, look_after_s=1), id=ledger_id(owner),
        task_queue=two_turns_queue)
    waits = script(model, unique("terminated"), ScriptedReply(tool_calls=[tool_call(
        "create_note", {"title": "t", "body": "b"})]), ScriptedReply(content="Noted."))
    quick = script(model, unique("after-terminated"), ScriptedReply(content="Ran."))
    gone = [await start(client, two_turns_queue, f"{waits} {n}", owner=owner) for n in range(2)]
    for handle in gone:
        assert (await settled(handle)).status == "waiting_for_confirmation"
        await handle.terminate("an operator's")
    after = await start(client, two_turns_queue, quick, owner=owner)
    assert (await settled(after, timeout_s=60)).final_answer == "Ran."
    view = await ledger(client, owner)
    assert view.running == [] and view.waiting == [], view
    await after.signal(ConversationWorkflow.end, EndRequest())
    await replay(client.get_workflow_handle(ledger_id(owner)),
                 record_as="owner_ledger_took_back_a_terminated_slot")


async def test_a_ledger_continues_as_new_with_its_counts_and_leases(
        client: Client, activity_settings: ActivitySettings, model: ScriptedModelServer):
    """A ledger whose history grows hands over to a fresh run: today's spending and the turn
    waiting carry over, and the waiting turn is granted by the new run."""
    owner, queue = unique("gina"), unique("owner-handover")
    ledger_handle = await client.start_workflow(
        LEDGER_WORKFLOW_TYPE, LedgerState(owner=owner, handover_events=20), id=ledger_id(owner),
        task_queue=queue)
    trigger = script(model, unique("handover"), ScriptedReply(content="Counted."))
    async with httpx.AsyncClient(timeout=10) as http, build_worker(
            client, queue, limited(activity_settings, running_turns=1, daily_tokens=100_000),
            http, registry_with_test_tools()):
        handles = await asyncio.gather(*(start(client, queue, f"{trigger} {n}", owner=owner)
                                         for n in range(6)))
        statuses = await asyncio.gather(*(settled(h, timeout_s=120) for h in handles))
        assert {s.final_answer for s in statuses} == {"Counted."}
        view = await ledger(client, owner)
        assert view.used_tokens == sum(s.usage.total_tokens for s in statuses)
        assert view.running == [] and view.waiting == []
        latest = await client.get_workflow_handle(ledger_id(owner)).describe()
        assert latest.run_id != ledger_handle.first_execution_run_id  # it handed over
        for handle in handles:
            await handle.signal(ConversationWorkflow.end, EndRequest())
