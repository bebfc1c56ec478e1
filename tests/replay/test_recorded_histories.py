"""History epochs: a recorded history of today's features (a change that alters the commands of
running conversations fails the replay test before it reaches them: `tests/histories/`), and
1.0's new epoch: its runs record no patch marker, a 0.x history does not replay on its code, and
a 1.0 worker will not start beside the 0.x conversations it would fail (`rules.epochs`)."""

from __future__ import annotations

import asyncio
import io
import json
import shlex
import subprocess
import sys
import time
from pathlib import Path

from temporalio import workflow
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from durable_react_agent.client.watch import Renderer, watch
from durable_react_agent.contract import (
    AnswerRequest,
    ConfirmRequest,
    EndRequest,
    RejectRequest,
    SayRequest,
)
from durable_react_agent.contract.names import WORKFLOW_TYPE
from durable_react_agent.rules.epochs import (
    CHANGE_VERSION,
    earlier_epoch_query,
    earlier_epoch_refusal,
)
from durable_react_agent.testing import ScriptedModelServer, ScriptedReply
from durable_react_agent.workflows.conversation import ConversationWorkflow
from tests.devserver import temporal_cli, worker_env
from tests.helpers import (
    HISTORIES,
    REPLAYER,
    kept_history,
    outcome_of,
    reaches,
    replay,
    script,
    settled,
    start,
    tool_call,
    unique,
)
from tests.processes import ROOT

EARLIER = sorted((HISTORIES / "0.x").glob("*.json"))
TODAYS = sorted(HISTORIES.glob("*.json"))


async def asked(handle, kind: str, timeout_s: float = 30) -> None:
    """Wait until the conversation's pending question is of `kind`."""
    deadline = time.monotonic() + timeout_s
    while True:
        question = (await handle.query(ConversationWorkflow.status)).pending_question
        if question is not None and question.kind == kind:
            return
        assert time.monotonic() < deadline, f"no {kind} question in {timeout_s}s: {question}"
        await asyncio.sleep(0.05)


async def test_streams_updates_questions_and_a_watcher_replay(
    client: Client, task_queue: str, model: ScriptedModelServer
):
    """Streamed tokens (publish signals), a live watcher (poll updates), decisions and answers by
    update and by signal, a queued message and an end: every kind of event a conversation sees."""
    trigger = script(
        model, unique("evolution"),
        ScriptedReply(content="Checking the weather first.", tool_calls=[
            tool_call("get_weather", {"location": "Paris"}),
            tool_call("create_note", {"title": unique("evo"), "body": "b"}),
            tool_call("delete_note", {"note_id": 909090}),
        ]),
        ScriptedReply(content="Two questions.", tool_calls=[
            tool_call("ask_choice", {"message": "Which city?", "options": ["Paris", "Tokyo"]}),
            tool_call("ask_input", {"message": "Your name?"}),
        ]),
        ScriptedReply(content="All done: {last_tool}"),
        ScriptedReply(content="You said: {last_user}"),
    )
    handle = await start(client, task_queue, trigger)
    shown = io.StringIO()
    watcher = asyncio.create_task(watch(client, handle.id, renderer=Renderer(handle.id, shown)))

    create, delete = (await reaches(handle, "waiting_for_confirmation")).pending_confirmations
    assert (await handle.execute_update(ConversationWorkflow.decide_confirm,
                                        ConfirmRequest(call_ids=[create.call_id], approver="ann"))).accepted
    await handle.signal(ConversationWorkflow.reject,
                        RejectRequest(call_ids=[delete.call_id], reason="keep it", request_id="r1"))
    assert (await outcome_of(handle, "r1")).accepted

    await reaches(handle, "waiting_for_input")
    assert (await handle.execute_update(ConversationWorkflow.give_answer,
                                        AnswerRequest(values=["Tokyo"]))).accepted
    await handle.signal(ConversationWorkflow.say, SayRequest(text="queued while asking", request_id="s1"))
    await asked(handle, "input")
    await handle.signal(ConversationWorkflow.answer, AnswerRequest(values=["Ada"], request_id="a1"))
    status = await settled(handle, turn=2)
    assert status.final_answer == "You said: queued while asking"

    await handle.signal(ConversationWorkflow.end, EndRequest(request_id="e1"))
    await handle.result()
    await asyncio.wait_for(watcher, timeout=30)
    assert "Checking the weather first." in shown.getvalue()
    assert "── turn 2 finished: answered" in shown.getvalue()
    await replay(handle, record_as="streams_updates_questions_watcher")


def test_a_run_of_today_records_no_patch_marker():
    """1.0's epoch: no recorded history of today's code holds a patch marker or the search
    attribute one sets, so none needs a `workflow.patched` branch to replay."""
    assert TODAYS, "no recorded histories; run the suite once with RECORD_HISTORIES=1"
    for path in TODAYS:
        for event in kept_history(path).events:
            assert not (event.event_type == EventType.EVENT_TYPE_MARKER_RECORDED and
                        event.marker_recorded_event_attributes.marker_name == "core_patch"), path
            if event.HasField("upsert_workflow_search_attributes_event_attributes"):
                fields = event.upsert_workflow_search_attributes_event_attributes \
                    .search_attributes.indexed_fields
                assert CHANGE_VERSION not in fields, path.name


async def test_a_0x_history_does_not_replay_on_todays_code_and_says_why():
    """What a 1.0 worker would do with a 0.x conversation's next task: fail it at its first
    patch marker. Hence the versioned path (it stays on its version, then moves with its
    carry: `tests/e2e/test_deploys.py`) or the start refusal below."""
    assert len(EARLIER) >= 30
    for path in EARLIER[::8]:
        result = await REPLAYER.replay_workflow(kept_history(path), raise_on_replay_failure=False)
        assert "patch marker" in str(result.replay_failure), path.name


def test_the_0x_conversations_a_worker_could_be_handed_and_what_it_says():
    unversioned = earlier_epoch_query('q"1', versioned=False)
    assert f'WorkflowType = "{WORKFLOW_TYPE}"' in unversioned
    assert 'TaskQueue = "q\\"1"' in unversioned and f"{CHANGE_VERSION} IS NOT NULL" in unversioned
    assert 'ExecutionStatus = "Running"' in unversioned
    assert "TemporalWorkerDeploymentVersion" not in unversioned
    # a versioned worker is handed no run pinned to a version: those stay on theirs
    assert earlier_epoch_query("q", versioned=True).endswith(
        " AND TemporalWorkerDeploymentVersion IS NULL")
    query = earlier_epoch_query("react-agent", versioned=False)
    assert earlier_epoch_refusal(0, [], "q", query, "h:7233", "default") is None
    said = earlier_epoch_refusal(7, ["a", "b", "c", "d", "e"], "react-agent", query, "h:7233",
                                 "default")
    assert said.startswith("7 conversation(s) on task queue react-agent began on a 0.x worker "
                           "(a, b, c, d, e and 2 more)")
    assert "python -m worker" in said and "AGENT_TASK_QUEUE" in said
    listing = said.split("Find them with: ")[1]
    assert shlex.split(listing) == ["temporal", "workflow", "list", "--address", "h:7233",
                                    "--namespace", "default", "--query", query]


@workflow.defn(name=WORKFLOW_TYPE)
class ZeroX:
    """A conversation as a 0.x worker began it: a patch marker (and its search attribute) in
    its first task, then waiting."""

    @workflow.run
    async def run(self, _: object) -> None:
        workflow.patched("real-model-shapes")
        await workflow.wait_condition(lambda: False)


async def test_a_worker_will_not_start_beside_a_0x_conversation_and_says_what_to_run(
        client: Client, model: ScriptedModelServer, temporal_address: str, tmp_path: Path):
    queue, conv = unique("epochs"), unique("zero-x")
    async with Worker(client, task_queue=queue, workflows=[ZeroX],
                      workflow_runner=UnsandboxedWorkflowRunner()):
        handle = await client.start_workflow(WORKFLOW_TYPE, {}, id=conv, task_queue=queue)
        query = earlier_epoch_query(queue, versioned=False)
        deadline = time.monotonic() + 30
        while (await client.count_workflows(query)).count < 1:  # visibility, eventually
            assert time.monotonic() < deadline, "the 0.x run never listed"
            await asyncio.sleep(0.2)
    env = worker_env(temporal_address, queue, model.base_url, tmp_path / "data")
    try:
        refused = await asyncio.to_thread(
            subprocess.run, [sys.executable, "-m", "durable_react_agent.worker"], cwd=ROOT,
            env=env, capture_output=True, text=True, timeout=120)
        said = refused.stdout + refused.stderr
        assert refused.returncode == 2, said[-3000:]
        assert "cannot start: conversations of 0.x on this task queue" in said
        assert f"1 conversation(s) on task queue {queue} began on a 0.x worker ({conv})" in said
        assert "python -m worker" in said and "Traceback" not in said
        # the listing it prints runs as printed, and finds the conversation
        printed = json.loads(next(line for line in said.splitlines() if "cannot start" in line))
        listing = printed["error"].split("Find them with: ")[1]
        assert listing.startswith("temporal workflow list ")
        found = await asyncio.to_thread(
            subprocess.run, [temporal_cli(), *shlex.split(listing)[1:]], capture_output=True,
            text=True, timeout=60)
        assert found.returncode == 0 and conv in found.stdout, found.stdout + found.stderr
        # an activity-only worker replays nothing: it starts
        tools = await asyncio.to_thread(
            subprocess.Popen, [sys.executable, "-m", "durable_react_agent.worker", "--role",
                               "tools"], cwd=ROOT, env=env, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True)
        try:
            line = await asyncio.wait_for(asyncio.to_thread(_started, tools), timeout=60)
            assert '"event": "worker started"' in line
        finally:
            tools.terminate()
            await asyncio.to_thread(tools.wait, 15)
    finally:
        await handle.terminate()


def _started(process: subprocess.Popen) -> str:
    for line in process.stdout:
        if "worker started" in line or "cannot start" in line:
            return line
    return ""
