"""Durability for real: the worker runs as its own process and is SIGKILLed mid-conversation."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHistory
from temporalio.service import RPCError

from durable_react_agent.activities.memory import open_store
from durable_react_agent.client.cases import export
from durable_react_agent.client.connection import TemporalSettings
from durable_react_agent.client.payload_store import FileListing, gone_from, prune
from durable_react_agent.client.payloads import PayloadSettings, data_converter
from durable_react_agent.client.session import NO_ANSWER_YET, Session
from durable_react_agent.contract import ConfirmRequest, ConversationInput, SayRequest, StopRequest
from durable_react_agent.contract.names import ROUTED_DECISION_SIGNAL
from durable_react_agent.contract.owner import LEDGER_QUERY, LedgerView, ledger_id
from durable_react_agent.testing import Scenario, Script, ScriptedModelServer, ScriptedReply
from durable_react_agent.workflows.conversation import ConversationWorkflow
from tests.a2a_support import RemoteDesk, agents_file
from tests.devserver import worker_env
from tests.helpers import (
    TEST_PAYLOAD_KEYS,
    TEST_PAYLOAD_KEYS_ENV,
    USER_TOOLS,
    first_token,
    local_runs,
    note_rows,
    outcome_of,
    reaches,
    replay,
    scheduled,
    script,
    settled,
    start,
    stored_keys,
    tool_call,
    unique,
    until,
)
from tests.long_chat import message
from tests.processes import WorkerProcess
from tests.subagent_support import delegating
from tests.user_tools.big_reads import document


def count(history: WorkflowHistory, kind: int) -> int:
    return sum(1 for e in history.events if e.event_type == kind)


@pytest.fixture
def worker_process(
    temporal_address: str, model: ScriptedModelServer, tmp_path: Path
) -> Iterator[tuple[WorkerProcess, str]]:
    queue = unique("durable")
    worker = WorkerProcess(worker_env(temporal_address, queue, model.base_url, tmp_path / "data"),
                           tmp_path)
    try:
        yield worker, queue
    finally:
        worker.stop()


async def test_worker_killed_between_tool_and_next_llm_reply_resumes_without_rerunning_the_tool(
    client: Client, model: ScriptedModelServer, worker_process: tuple[WorkerProcess, str]
):
    worker, queue = worker_process
    trigger = script(
        model, unique("sigkill"),
        ScriptedReply(tool_calls=[tool_call("get_weather", {"location": "Berlin"})]),
        ScriptedReply(content="Berlin now: {last_tool}", hold=True),
    )
    forecast_before = model.forecast_calls  # every run of get_weather asks for the forecast
    worker.start()
    handle = await start(client, queue, f"{trigger}: weather in Berlin?")

    # The second LLM request has arrived, so the tool activity has completed; its reply is held.
    assert await asyncio.to_thread(model.wait_for_request, trigger, 1, 60.0)
    assert model.forecast_calls == forecast_before + 1
    worker.kill()

    worker.start()
    model.release()
    status = await settled(handle, timeout_s=90)

    assert status.stop_reason == "answered"
    assert status.final_answer.startswith("Berlin now: Berlin, Germany")
    assert model.count(trigger, step=1) >= 2, "the held LLM call should have been retried"
    assert model.forecast_calls == forecast_before + 1, "get_weather ran again"
    log = worker.log(2)
    # The new worker held no copy of the prompt the retried call names: it fetched it.
    assert '"event": "prompt fetched from the conversation"' in log
    retried = next(line for line in log.splitlines() if '"event": "llm reply"' in line)
    for field in (f'"workflow_id": "{handle.id}"', '"run_id": "', '"activity": "llm_step"',
                  '"attempt": 2', '"step": 2'):
        assert field in retried, (field, retried)


async def test_worker_killed_while_a_confirmation_waits_then_confirmed_with_no_worker_runs_once(
    client: Client, model: ScriptedModelServer, worker_process: tuple[WorkerProcess, str],
    tmp_path: Path,
):
    worker, queue = worker_process
    title = unique("durable-note")
    trigger = script(
        model, unique("kill-pending"),
        ScriptedReply(tool_calls=[tool_call("create_note", {"title": title, "body": "once"})]),
        ScriptedReply(content="{last_tool}"),
    )
    worker.start()
    handle = await start(client, queue, f"{trigger}")
    [pending] = (await reaches(handle, "waiting_for_confirmation", timeout_s=60)).pending_confirmations
    worker.kill()

    # The server takes the signal with no worker running; the decision waits in the history.
    await handle.signal(ConversationWorkflow.confirm,
                        ConfirmRequest(request_id="decided-offline", call_ids=[pending.call_id]))
    worker.start()
    status = await settled(handle, timeout_s=90)
    assert (await handle.query(ConversationWorkflow.signal_outcome, "decided-offline")).accepted
    assert status.final_answer.startswith("Created note #")
    assert len(note_rows(tmp_path / "data", title)) == 1


async def test_worker_killed_while_summarizing_folds_once_and_repeats_no_step(
    client: Client, model: ScriptedModelServer, worker_process: tuple[WorkerProcess, str]
):
    worker, queue = worker_process
    trigger = unique("kill-fold")
    kept = [s for s in model.script.scenarios if s.trigger != trigger]
    model.set_script(Script(scenarios=[*kept, Scenario(
        trigger=trigger, replies=[ScriptedReply(content="echo: {last_user}") for _ in range(10)],
        summary_hold=True)]))
    worker.start()
    handle = await start(client, queue, message(trigger, 1, 2000), context_budget_tokens=3000)
    for i in range(2, 7):
        await handle.signal(ConversationWorkflow.say, SayRequest(text=message(trigger, i, 2000)))
    assert await asyncio.to_thread(model.wait_for_request, trigger, -1, 60.0)  # a summary, held
    steps_before = [r.step for r in model.requests if r.trigger == trigger and r.kind == "chat"]
    worker.kill()

    worker.start()
    model.release()
    status = await settled(handle, turn=6, timeout_s=90)
    assert status.final_answer == f"echo: {message(trigger, 6, 2000)}"
    chat_steps = [r.step for r in model.requests if r.trigger == trigger and r.kind == "chat"]
    assert chat_steps[: len(steps_before)] == steps_before
    assert len(chat_steps) == len(set(chat_steps)) == 6  # each turn's model call ran once
    summaries = [r for r in model.requests if r.trigger == trigger and r.kind == "summary"]
    assert len(summaries) >= 2  # the summary in flight was asked again by the new worker
    folds = [r for r in await handle.query(ConversationWorkflow.history) if r.kind == "summary"]
    assert folds and folds[0].thought.startswith("First request:")


async def test_a_read_whose_worker_dies_runs_again_and_nothing_completed_runs_twice(
    client: Client, model: ScriptedModelServer, temporal_address: str, tmp_path: Path
):
    """A worker SIGKILLed while a local read runs: the next worker takes the workflow task once
    it times out, runs the read again (it never completed), and goes on. The long read marked
    `local=False` ran before as an activity, and the model calls that completed are not asked
    again."""
    data = tmp_path / "data"
    queue = unique("local-kill")
    env = worker_env(temporal_address, queue, model.base_url, data, AGENT_TOOLS="slow_reads",
                     PYTHONPATH=os.pathsep.join([str(USER_TOOLS),
                                                 os.environ.get("PYTHONPATH", "")]))
    worker = WorkerProcess(env, tmp_path)
    trigger = script(
        model, unique("local-kill"),
        ScriptedReply(tool_calls=[tool_call("archive_scan", {"query": "maps"})]),
        ScriptedReply(tool_calls=[tool_call("slow_lookup", {"query": "maps"})]),
        ScriptedReply(content="{last_tool}"),
    )
    runs = data / "slow_lookup.runs"
    worker.start()
    try:  # its workflow task times out in 3 s, not 10: a shorter wait for the next worker
        handle = await client.start_workflow(
            ConversationWorkflow.run, ConversationInput(prompt=trigger, one_shot=True),
            id=unique("conv"), task_queue=queue, task_timeout=timedelta(seconds=3))
        deadline = time.monotonic() + 60
        while not runs.exists():
            assert time.monotonic() < deadline, "the slow read never started"
            await asyncio.sleep(0.05)
        worker.kill()
        worker.start()
        status = await settled(handle, timeout_s=90)
    finally:
        worker.stop()
    assert (status.status, status.final_answer) == ("completed", "the archive has maps")
    assert len(runs.read_text().splitlines()) == 2  # the read in flight ran again, once
    assert [model.count(trigger, step) for step in (0, 1, 2)] == [1, 1, 1]
    history = await handle.fetch_history()
    assert scheduled(history) == ["llm_step", "archive_scan", "llm_step", "llm_step"]
    assert [name for name, _ in local_runs(history)] == ["list_tools", "slow_lookup"]
    assert count(history, EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT) >= 1
    await replay(handle, record_as="local_read_worker_killed")


async def test_worker_killed_while_a_child_waits_writes_the_note_once(
        client: Client, model: ScriptedModelServer, temporal_address: str, tmp_path):
    profiles = tmp_path / "profiles.json"
    profiles.write_text(json.dumps({"agents": {"writer": {
        "description": "Writes notes", "system_prompt": "You write notes.",
        "tools": ["create_note"], "max_steps": 4}}}))
    queue = unique("agents-kill")
    worker = WorkerProcess(worker_env(temporal_address, queue, model.base_url, tmp_path / "data",
                                      AGENT_PROFILES=str(profiles)), tmp_path)
    title = unique("kill-child-note")
    parent = delegating(model, "kill", "writer", "s1", [
        ScriptedReply(tool_calls=[tool_call("create_note", {"title": title, "body": "once"})]),
        ScriptedReply(content="{last_tool}")])
    worker.start()
    try:
        handle = await start(client, queue, parent)
        waiting = await reaches(handle, "waiting_for_confirmation", timeout_s=60)
        [pending] = waiting.pending_confirmations
        worker.kill()
        # With no worker running, the decision is sent to the parent, by the call's ref: the
        # next worker routes it to the child that owns the call, which takes it once.
        await handle.signal(ConversationWorkflow.confirm, ConfirmRequest(
            call_ids=[pending.ref], request_id="offline", approver="bob"))
        worker.start()
        status = await reaches(handle, "idle", timeout_s=90)
        assert status.final_answer.startswith("Created note #"), status
        assert len(note_rows(tmp_path / "data", title)) == 1
        assert (await outcome_of(handle, "offline")).accepted
        # the child took the part once, from its parent (its stream's own publishing signals,
        # which its model call may send, aside)
        child = await client.get_workflow_handle(pending.conversation_id).fetch_history()
        signals = [e.workflow_execution_signaled_event_attributes.signal_name
                   for e in child.events
                   if e.HasField("workflow_execution_signaled_event_attributes")]
        assert [s for s in signals if not s.startswith("__temporal")] == [ROUTED_DECISION_SIGNAL]
    finally:
        worker.stop()


async def test_worker_killed_after_a_grant_let_a_note_run_uses_it_once_and_writes_once(
    client: Client, model: ScriptedModelServer, worker_process: tuple[WorkerProcess, str],
    tmp_path: Path,
):
    """An owner's grant (kept in the workers' store) lets a second conversation's note run; the
    worker dies before the next reply. The new worker replays the grant's use and the note from
    the history: one use counted, one note written."""
    worker, queue = worker_process
    first, second = unique("granted"), unique("by-grant")
    asks = script(model, unique("grant-asks"),
                  ScriptedReply(tool_calls=[tool_call("create_note", {"title": first, "body": "b"})]),
                  ScriptedReply(content="{last_tool}"))
    granted = script(model, unique("grant-used"),
                     ScriptedReply(tool_calls=[tool_call("create_note", {"title": second, "body": "b"})]),
                     ScriptedReply(content="{last_tool}", hold=True))
    worker.start()
    handle = await start(client, queue, asks, owner="olive")
    [pending] = (await reaches(handle, "waiting_for_confirmation", timeout_s=60)).pending_confirmations
    assert (await handle.execute_update(ConversationWorkflow.decide_confirm, ConfirmRequest(
        call_ids=[pending.call_id], approver="alice", remember="owner", uses=3))).accepted
    await settled(handle, timeout_s=60)

    other = await start(client, queue, granted, owner="olive")
    assert await asyncio.to_thread(model.wait_for_request, granted, 1, 60.0)
    worker.kill()
    worker.start()
    model.release()
    status = await settled(other, timeout_s=90)
    assert status.final_answer.startswith("Created note #"), status
    assert len(note_rows(tmp_path / "data", second)) == 1
    [grant] = open_store(f"sqlite:///{(tmp_path / 'data' / 'memory.sqlite3').absolute()}") \
        .owner_grants("olive", datetime.now(timezone.utc))
    assert (grant.used, grant.uses_left) == (1, 2)
    assert status.decisions[-1].grant == grant.id


async def test_a_stop_sent_while_no_worker_runs_stops_the_turn_on_the_next_one(
    client: Client, model: ScriptedModelServer, worker_process: tuple[WorkerProcess, str],
):
    """The worker dies while the model streams; `stop` waits in the history, and the next
    worker stops the turn there: the text streamed before the kill is kept, the next message is
    answered once."""
    worker, queue = worker_process
    long = "Before the kill, a first part; " + "then more, " * 6 + "and never the end."
    trigger = script(model, unique("kill-stop"),
                     ScriptedReply(content=long, stream_pause_s=60),
                     ScriptedReply(content="After the stop."))
    worker.start()
    handle = await start(client, queue, trigger)
    said = (await first_token(client, handle.id)).text
    worker.kill()
    await handle.signal(ConversationWorkflow.stop, StopRequest(request_id="stopped-offline"))
    worker.start()
    status = await settled(handle, timeout_s=90)
    assert (status.status, status.stop_reason) == ("idle", "stopped")
    assert (await handle.query(ConversationWorkflow.signal_outcome, "stopped-offline")).reason \
        == "turn 1 stopped"
    assert long.startswith(status.final_answer) and status.final_answer.startswith(said)
    await handle.signal(ConversationWorkflow.say, SayRequest(text="go on", request_id="after"))
    status = await settled(handle, turn=2, timeout_s=60)
    assert status.final_answer == "After the stop."
    assert model.count(trigger, step=1) == 1  # the next turn's model call, once
    await replay(handle, record_as="stop_sent_while_no_worker_ran")


async def test_an_owner_s_daily_budget_holds_across_20_conversations_and_a_worker_kill(
        client: Client, model: ScriptedModelServer, temporal_address: str, tmp_path: Path):
    """The worker dies while model calls of an owner's conversations are in flight, their
    leases held: the next worker finishes them, the owner's spending is what the conversations
    used, counted once, and within the day's limit; the turns past it wait, saying why."""
    limit, owner, queue = 20_000, unique("dave"), unique("owner-kill")
    limits = tmp_path / "owner-limits.json"
    limits.write_text(json.dumps({"default": {"daily_tokens": limit}}))
    worker = WorkerProcess(worker_env(temporal_address, queue, model.base_url, tmp_path / "data",
                                      AGENT_OWNER_LIMITS=str(limits)), tmp_path)
    model.rearm()
    trigger = script(model, unique("budget-kill"),
                     ScriptedReply(content="Within budget.", hold=True))
    worker.start()
    try:
        handles = await asyncio.gather(*(start(client, queue, f"{trigger} {n}", owner=owner)
                                         for n in range(20)))
        assert await asyncio.to_thread(model.wait_for_request, trigger, None, 60.0)
        ledger = client.get_workflow_handle(ledger_id(owner))

        async def leased() -> bool:
            return (await ledger.query(LEDGER_QUERY, result_type=LedgerView)).held_tokens > 0

        await until(leased, timeout_s=60)
        worker.kill()
        worker.start()
        model.release()
        statuses: list = []
        view: LedgerView | None = None

        async def settled_or_held() -> bool:
            """Quiet: every turn answered or waiting, the ledger the same before and after
            the statuses were read (a grant lets a held turn run and end between two reads,
            while the turns that end free the budget for the next)."""
            nonlocal statuses, view
            try:
                before = await ledger.query(LEDGER_QUERY, result_type=LedgerView)
                statuses = await asyncio.gather(*(settled_or_waiting(h) for h in handles))
                view = await ledger.query(LEDGER_QUERY, result_type=LedgerView)
            except RPCError as err:  # a query the server gave up on ("buffered query cleared")
                if err.status not in NO_ANSWER_YET:
                    raise
                return False
            answered = sum(s is not None and s.status == "idle" for s in statuses)
            return (view == before and view.held_tokens == 0 and None not in statuses
                    and len(view.waiting) == 20 - answered)

        await until(settled_or_held, timeout_s=180, what=lambda: f"{view}: " + str(
            [s and (s.workflow_id, s.status, s.held and s.held.limit) for s in statuses]))
        answered = [s for s in statuses if s.status == "idle"]
        assert answered and {w.conversation_id for w in view.waiting} == {
            s.workflow_id for s in statuses if s.status != "idle"}, view
        assert {s.final_answer for s in answered} == {"Within budget."}
        assert view.used_tokens == sum(s.usage.total_tokens for s in statuses) <= limit, view
    finally:
        model.release()
        worker.stop()


async def settled_or_waiting(handle):
    """The status once the turn answered or waits for its owner's share; else None."""
    status = await handle.query(ConversationWorkflow.status)
    return status if status.status == "idle" or status.held is not None else None


async def test_a_worker_killed_while_it_stores_a_large_result_repeats_nothing_completed(
        client: Client, model: ScriptedModelServer, temporal_address: str, tmp_path: Path):
    """The worker's file store has written half of a 3 MB result (sealed) when the worker is
    SIGKILLed. The read never completed, so the next worker runs it again, once, and stores it
    whole; the model call before it is not asked again; the half-written file is never read,
    and `prune` clears it; export reads the whole result by reference."""
    data, store, marker = tmp_path / "data", tmp_path / "payloads", tmp_path / "storing"
    queue = unique("store-kill")
    env = worker_env(temporal_address, queue, model.base_url, data, AGENT_TOOLS="big_reads",
                     AGENT_PAYLOAD_STORE=store.as_uri(), AGENT_PAYLOAD_KEYS=TEST_PAYLOAD_KEYS_ENV,
                     SLOW_STORE_MARKER=str(marker),
                     PYTHONPATH=os.pathsep.join([str(USER_TOOLS),
                                                 os.environ.get("PYTHONPATH", "")]))
    slow = WorkerProcess(env, tmp_path, executable=sys.executable,
                         args=(str(Path(__file__).parents[1] / "slow_store_worker.py"),))
    worker = WorkerProcess(env, tmp_path)
    payloads = PayloadSettings(path=store, keys=TEST_PAYLOAD_KEYS)
    sealed = await Client.connect(temporal_address, data_converter=data_converter(payloads))
    trigger = script(model, unique("store-kill"),
                     ScriptedReply(tool_calls=[tool_call("big_document", {"size": 3_000_000})]),
                     ScriptedReply(content="archived"))
    slow.start()
    try:
        handle = await start(sealed, queue, trigger, one_shot=True)
        await until(marker.exists, timeout_s=60, what="the store's half-written file")
        half = Path(marker.read_text())
        slow.kill()
        worker.start()
        status = await settled(handle, timeout_s=90)
        assert (status.status, status.final_answer) == ("completed", "archived")
        session = Session(sealed, TemporalSettings(task_queue=queue, payloads=payloads), 30)
        [call] = (await export(session, handle.id)).calls()
    finally:
        worker.stop()
    assert call.full_result == document(3_000_000)
    assert len((data / "big_document.runs").read_text().splitlines()) == 2  # it never completed
    assert [model.count(trigger, step) for step in (0, 1)] == [1, 1]
    history = await handle.fetch_history()
    assert scheduled(history) == ["llm_step", "big_document", "llm_step"]
    assert half.exists() and str(half.relative_to(store)) not in json.dumps(stored_keys(history))
    os.utime(half, (0, 0))  # a day later
    report = await prune(FileListing(store), "default", gone_from(sealed), grace_s=3600)
    assert report.partial == 1 and not half.exists() and report.removed == []


async def test_worker_killed_while_a_remote_agent_works_follows_its_task_without_sending_again(
    client: Client, model: ScriptedModelServer, temporal_address: str, tmp_path: Path
):
    """The call's task id is heartbeated; the next worker's attempt follows that task on the
    agent's stream, and the agent is sent the message once."""
    queue = unique("a2a-kill")
    with RemoteDesk() as remote:
        agents = agents_file(tmp_path / "agents.json",
                             {"desk": {"card": remote.card_url("stream"), "risk": "safe"}})
        worker = WorkerProcess(worker_env(temporal_address, queue, model.base_url,
                                          tmp_path / "data", AGENT_A2A_AGENTS=str(agents)),
                               tmp_path)
        trigger = script(model, unique("a2a-kill"),
                         ScriptedReply(tool_calls=[tool_call("desk", {"message": "slow: report"})]),
                         ScriptedReply(content="{last_tool}"))
        try:
            worker.start()
            handle = await start(client, queue, trigger)

            async def task_heartbeated() -> bool:  # the task's id, once the agent has it
                pending = (await handle.describe()).raw_description.pending_activities
                return any(p.activity_type.name == "desk" and p.heartbeat_details.payloads
                           and json.loads(p.heartbeat_details.payloads[0].data).get("sent")
                           for p in pending)

            await until(task_heartbeated, timeout_s=60, what="the task id in a heartbeat")
            assert len(remote.desk.received) == 1
            worker.kill()
            worker.start()
            await until(lambda: '"remote task resumed, not sent again"' in worker.log(2), timeout_s=60,
                        what=lambda: worker.log(2)[-2000:])
            remote.desk.release()
            status = await settled(handle, timeout_s=90)
        finally:
            worker.stop()
    assert status.final_answer == "Desk says: slow: report", status
    assert len(remote.desk.received) == 1, remote.desk.received  # sent once, followed twice
    history = await handle.fetch_history()
    [attempted] = [e.activity_task_started_event_attributes.attempt for e in history.events
                   if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED
                   and e.activity_task_started_event_attributes.attempt > 1]
    assert attempted == 2
