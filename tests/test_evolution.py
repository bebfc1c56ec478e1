"""Recorded histories of today's features, so that a change which alters the commands of running
conversations fails here before it reaches them (see `tests/histories/`)."""

from __future__ import annotations

import asyncio
import io
import json
import time

import httpx
import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer, UnsandboxedWorkflowRunner

from durable_react_agent.activities.settings import ActivitySettings
from durable_react_agent.client.watch import Renderer, watch
from durable_react_agent.contract import (
    AnswerRequest,
    ConfirmRequest,
    EndRequest,
    RejectRequest,
    SayRequest,
)
from durable_react_agent.testing import ScriptedModelServer, ScriptedReply
from tests.helpers import (
    HISTORIES,
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
from durable_react_agent.worker.app import build_worker
from durable_react_agent.workflows.conversation import ConversationWorkflow
from durable_react_agent.workflows import patches
from durable_react_agent.workflows.patches import BOUNDED_CONTEXT_PATCH, LATEST_PATCH, STANDS_FOR
from durable_react_agent.workflows.signal_guard import SignalGuard


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


async def test_a_conversation_begun_before_the_bounds_keeps_its_ways_until_it_continues_as_new(
    client: Client, model: ScriptedModelServer, activity_settings: ActivitySettings
):
    """A deploy, live: a worker that leaves the patch inactive stands for the version before it.
    The new worker replays the run and keeps its old behaviour (a 300 KB message is taken); the
    run's next continue-as-new starts a bounded one (the same message is refused)."""
    queue = unique("deploy")
    trigger = script(model, unique("deploy"), *[ScriptedReply(content="got it")] * 4)
    async with httpx.AsyncClient(timeout=10) as http:
        async with build_worker(client, queue, activity_settings, http,
                                patch_activation_callback=lambda _: False):
            handle = await start(client, queue, trigger, continue_as_new_after_turns=2)
            await settled(handle)
        first_run = handle.first_execution_run_id
        async with build_worker(client, queue, activity_settings, http):
            await handle.signal(ConversationWorkflow.say, SayRequest(text="x" * 300_000, request_id="old"))
            assert (await outcome_of(handle, "old")).accepted
            status = await settled(handle, turn=2)
            assert status.final_answer == "got it"
            deadline = time.monotonic() + 30
            while (await handle.query(ConversationWorkflow.status)).runs < 2:
                assert time.monotonic() < deadline, "the run never continued as new"
                await asyncio.sleep(0.1)
            await handle.signal(ConversationWorkflow.say, SayRequest(text="y" * 300_000, request_id="new"))
            refused = await outcome_of(handle, "new")
            assert not refused.accepted and "over the limit of 262,144 bytes" in refused.reason

    def markers(history) -> list[str]:
        return [json.loads(e.marker_recorded_event_attributes.details["patch-data"].payloads[0]
                           .data)["id"]
                for e in history.events if e.event_type == EventType.EVENT_TYPE_MARKER_RECORDED
                and e.marker_recorded_event_attributes.marker_name == "core_patch"]

    old = await client.get_workflow_handle(handle.id, run_id=first_run).fetch_history()
    new = await handle.fetch_history()
    assert markers(old) == []  # as the code before any patch
    # The new run asks the latest patch alone, which stands for the bounds and every other
    assert markers(new) == [LATEST_PATCH] and BOUNDED_CONTEXT_PATCH in STANDS_FOR[LATEST_PATCH]


def test_the_latest_patch_stands_for_every_patch_before_it():
    """A run begun now asks one patch: it must stand for every other, or a run begun now would
    ask an older one after a local activity, which does not replay (`workflows.patches`)."""
    every = {value for name, value in vars(patches).items()
             if name.endswith("_PATCH") and name != "LATEST_PATCH"}
    assert STANDS_FOR[LATEST_PATCH] | {LATEST_PATCH} == every


async def test_conversations_begun_before_local_reads_would_break_without_their_patch(
    monkeypatch: pytest.MonkeyPatch,
):
    """The histories recorded by the code before local reads (`histories/main-3c10fa6/`) replay
    (the replay test's), and would not if the patch were taken away: each one's commands differ
    from what a run begun now issues. So the patch is what keeps them running across the
    deploy."""
    def begun_now(self: patches.Patches) -> None:
        self._held = STANDS_FOR[LATEST_PATCH] | {LATEST_PATCH}

    monkeypatch.setattr(patches.Patches, "__init__", begun_now)
    replayer = Replayer(workflows=[ConversationWorkflow], data_converter=pydantic_data_converter,
                        workflow_runner=UnsandboxedWorkflowRunner(), interceptors=[SignalGuard()])
    before = sorted((HISTORIES / "main-3c10fa6").glob("*.json"))
    assert len(before) >= 10
    for path in before:
        result = await replayer.replay_workflow(kept_history(path), raise_on_replay_failure=False)
        assert result.replay_failure is not None, path.name


async def test_a_turn_that_recalls_needs_the_memory_patch(monkeypatch: pytest.MonkeyPatch):
    """The recorded turns that recall memories (`histories/memory_recall_*`) replay (the replay
    test's), and would not if a run begun with the memory patch were read as one begun before
    it: the patch is what tells the two apart."""
    def begun_before(self: patches.Patches) -> None:
        self._held = STANDS_FOR[patches.LOCAL_READS_PATCH] | {patches.LOCAL_READS_PATCH}

    monkeypatch.setattr(patches.Patches, "__init__", begun_before)
    replayer = Replayer(workflows=[ConversationWorkflow], data_converter=pydantic_data_converter,
                        workflow_runner=UnsandboxedWorkflowRunner(), interceptors=[SignalGuard()])
    recalled = sorted(HISTORIES.glob("memory_recall_*.json"))
    assert recalled
    for path in recalled:
        result = await replayer.replay_workflow(kept_history(path), raise_on_replay_failure=False)
        assert result.replay_failure is not None, path.name


async def test_the_real_models_shapes_need_their_patch(monkeypatch: pytest.MonkeyPatch):
    """The recorded conversations of the real models' shapes (a restated call answered, an
    echoed question not asked, a first message too long for the model refused) replay (the
    replay test's), and would not if their run were read as one begun before the patch: each
    issued other commands than a run begun before it would. The histories of the code before
    it (`histories/main-5627dca/`) replay with today's code (the replay test's)."""
    has = patches.Patches.has
    monkeypatch.setattr(patches.Patches, "has", lambda self, patch: False
                        if patch == patches.REAL_MODEL_SHAPES_PATCH else has(self, patch))
    replayer = Replayer(workflows=[ConversationWorkflow], data_converter=pydantic_data_converter,
                        workflow_runner=UnsandboxedWorkflowRunner(), interceptors=[SignalGuard()])
    for name in ("restated_call_written_once", "echoed_question_not_asked",
                 "first_message_too_long"):
        result = await replayer.replay_workflow(kept_history(HISTORIES / f"{name}.json"),
                                                raise_on_replay_failure=False)
        assert "Nondeterminism" in str(result.replay_failure), name
        assert "patch marker" not in str(result.replay_failure), name
    assert len(list((HISTORIES / "main-5627dca").glob("*.json"))) >= 8
