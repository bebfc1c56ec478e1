"""Helpers for conversation tests (not collected: no `test_` prefix)."""

from __future__ import annotations

import asyncio
import base64
import inspect
import json
import os
import shutil
import sqlite3
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import timedelta
from pathlib import Path

from google.protobuf import json_format
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle, WorkflowHistory
from temporalio.contrib.workflow_streams import WorkflowStreamClient
from temporalio.service import RPCError
from temporalio.worker import Replayer

from durable_react_agent.client.payloads import PayloadSettings, data_converter
from durable_react_agent.client.session import NO_ANSWER_YET
from durable_react_agent.contract import (
    SETTLED_STATUSES,
    AuditRecord,
    ConfirmRequest,
    ConversationInput,
    ConversationStatus,
    LLMOptions,
    RejectRequest,
    StreamEvent,
)
from durable_react_agent.contract.names import EVENTS_TOPIC, TOKENS_TOPIC
from durable_react_agent.rules.search_attributes import owned_by
from durable_react_agent.testing import (
    Scenario,
    Script,
    ScriptedModelServer,
    ScriptedReply,
    ScriptedToolCall,
)
from durable_react_agent.worker.app import WORKFLOWS, workflow_runner
from durable_react_agent.workflows.conversation import ConversationWorkflow
from durable_react_agent.workflows.signal_guard import SignalGuard
from tests.processes import LAYERS, ROOT

FAST_LLM = LLMOptions(heartbeat_timeout_s=3, max_retry_interval_s=2)
HISTORIES = Path(__file__).parent / "histories"
REPLAY_FAILURES = Path(tempfile.gettempdir()) / "agent-replay-failures"  # what did not replay


def code_copy(into: Path, checkout: Path = ROOT) -> Path:
    """A copy of a checkout's product code (this one's by default) laid out as the wheel
    installs it, `into/durable_react_agent/...`, for a test that changes a file of it or a
    benchmark that runs another version: a process whose path begins with `into` (its working
    directory, or PYTHONPATH) imports `durable_react_agent` from the copy, whatever the
    editable install maps. Returns the copy's root package."""
    root = into / "durable_react_agent"
    ignore = shutil.ignore_patterns("__pycache__")
    shutil.copytree(checkout / "durable_react_agent", root, ignore=ignore)
    for layer in LAYERS:
        shutil.copytree(checkout / layer, root / layer, ignore=ignore)
    return root
USER_TOOLS = Path(__file__).parent / "user_tools"  # tool modules a worker loads (AGENT_TOOLS)

# A script that replays a recorded history with the tests' sandbox; `workflows`, `rules` and
# `contract` come from sys.path[0] (the code of the version under test).
REPLAY = """
import asyncio, json, sys
from pathlib import Path
from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer
from durable_react_agent.worker.app import WORKFLOWS, workflow_runner
from durable_react_agent.workflows.conversation import ConversationWorkflow
from durable_react_agent.workflows.signal_guard import SignalGuard

data = json.loads(Path(sys.argv[1]).read_text())
history = WorkflowHistory.from_json(data.pop("workflowId", "probe"), data)
replayer = Replayer(workflows=[ConversationWorkflow], data_converter=pydantic_data_converter,
                    workflow_runner=workflow_runner(check_rules=True), interceptors=[SignalGuard()])
result = asyncio.run(replayer.replay_workflow(history, raise_on_replay_failure=False))
print("REPLAYED" if result.replay_failure is None else f"FAILED {result.replay_failure}")
"""

# `make test-long`: the stress-scale runs too (tests marked `long`, and bigger generated runs)
LONG = os.environ.get("AGENT_TEST_LONG") == "1"
_FAST = timedelta(milliseconds=20)
# The key the tests seal payloads with (a history recorded sealed replays with it), and where the
# large payloads of recorded histories are kept: a replay reads them as a worker would.
TEST_PAYLOAD_KEYS = {"tests-2026": bytes(range(32))}
# the same, as a process is given it (AGENT_PAYLOAD_KEYS)
TEST_PAYLOAD_KEYS_ENV = json.dumps({k: base64.b64encode(v).decode()
                                    for k, v in TEST_PAYLOAD_KEYS.items()})
RECORDED_PAYLOADS = HISTORIES / "payloads"
# As every process of the product converts payloads: pydantic, the codec (a history of an
# earlier version, in clear, passes through it), External Storage.
SEALED = data_converter(PayloadSettings(path=RECORDED_PAYLOADS, keys=TEST_PAYLOAD_KEYS))
REPLAYER = Replayer(workflows=WORKFLOWS, data_converter=SEALED,
                    workflow_runner=workflow_runner(check_rules=True), interceptors=[SignalGuard()])


async def steps_of(handle: WorkflowHandle) -> list[AuditRecord]:
    """The audit trail's step records (not a person's inputs, nor the context's folds)."""
    return [r for r in await handle.query(ConversationWorkflow.history) if r.kind == "step"]


async def replay(handle: WorkflowHandle, record_as: str, store: Path | None = None) -> None:
    """Replay a finished conversation; with RECORD_HISTORIES=1, keep it for future replays (and,
    from `store`, the large payloads it references)."""
    history = await handle.fetch_history()
    replayer = REPLAYER
    if store is not None:
        replayer = Replayer(workflows=WORKFLOWS, workflow_runner=workflow_runner(check_rules=True),
                            interceptors=[SignalGuard()], data_converter=data_converter(
                                PayloadSettings(path=store, keys=TEST_PAYLOAD_KEYS)))
    try:
        await replayer.replay_workflow(history)
    except Exception:  # keep what did not replay, to replay it again at leisure
        REPLAY_FAILURES.mkdir(parents=True, exist_ok=True)
        kept = REPLAY_FAILURES / f"{record_as}.{history.run_id}.json"
        keep_history(history, kept)
        print(f"the history that did not replay is kept in {kept}; its events:")
        print(" ".join(f"{e.event_id}:{EventType.Name(e.event_type)[len('EVENT_TYPE_'):]}"
                       for e in history.events))  # (what a CI log keeps of it)
        raise
    if os.environ.get("RECORD_HISTORIES"):
        keep_history(history, HISTORIES / f"{record_as}.json")
        if store is not None:
            for key in stored_keys(history):
                (RECORDED_PAYLOADS / key).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(store / key, RECORDED_PAYLOADS / key)


def stored_keys(history: WorkflowHistory) -> list[str]:
    """The store's keys a history's references name (a payload with `externalPayloads`)."""
    found: list[str] = []

    def walk(value) -> None:
        if isinstance(value, dict):
            if "externalPayloads" in value:
                found.append(json.loads(base64.b64decode(value["data"]))["claimData"]["key"])
            for inner in value.values():
                walk(inner)
        elif isinstance(value, list):
            for inner in value:
                walk(inner)

    for event in history.events:
        walk(json_format.MessageToDict(event))
    return found


def keep_history(history: WorkflowHistory, path: Path) -> None:
    """Write a history with its workflow id, which a subagent's id is derived from."""
    path.write_text(json.dumps({"workflowId": history.workflow_id,
                                  **json.loads(history.to_json())}))


def kept_history(path: Path) -> WorkflowHistory:
    """A recorded history; files recorded before ids were kept replay under their name."""
    data = json.loads(path.read_text())
    workflow_id = data.pop("workflowId", path.stem)
    return WorkflowHistory.from_json(workflow_id, data)


async def run_histories(client: Client, handle: WorkflowHandle) -> list[WorkflowHistory]:
    """The history of every run of a conversation, first to last (it may continue as new)."""
    run_id, histories = handle.first_execution_run_id, []
    while run_id:
        history = await client.get_workflow_handle(handle.id, run_id=run_id).fetch_history()
        histories.append(history)
        last = history.events[-1]
        run_id = (last.workflow_execution_continued_as_new_event_attributes.new_execution_run_id
                  if last.HasField("workflow_execution_continued_as_new_event_attributes") else None)
    return histories


async def replay_runs(client: Client, handle: WorkflowHandle, record_as: str) -> int:
    """Replay every run of a conversation that continued as new, first to last (the later runs
    start from a carried state). With RECORD_HISTORIES=1, keep the first two runs and the last:
    a fresh start, a start from a carried state, and a completion. Returns the number of runs."""
    histories = await run_histories(client, handle)
    for history in histories:
        await REPLAYER.replay_workflow(history)
    if os.environ.get("RECORD_HISTORIES"):
        for run in sorted({1, 2, len(histories)} & set(range(1, len(histories) + 1))):
            keep_history(histories[run - 1], HISTORIES / f"{record_as}.run{run}.json")
    return len(histories)


def tool_call(name: str, arguments: dict | str) -> ScriptedToolCall:
    return ScriptedToolCall(name=name, arguments=arguments)


def script(model: ScriptedModelServer, trigger: str, *replies: ScriptedReply, **scenario) -> str:
    """Script one scenario (`scenario`: its other fields, as `review`), keeping the others, and
    return its trigger."""
    kept = [s for s in model.script.scenarios if s.trigger != trigger]
    model.set_script(Script(scenarios=[*kept, Scenario(trigger=trigger, replies=list(replies),
                                                       **scenario)]))
    return trigger


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


async def start(
    client: Client, task_queue: str, prompt: str, **options
) -> WorkflowHandle:
    options.setdefault("llm", FAST_LLM)
    return await client.start_workflow(
        ConversationWorkflow.run,
        ConversationInput(prompt=prompt, **options),
        id=unique("conv"),
        task_queue=task_queue,
        search_attributes=owned_by(options.get("owner")),  # as the CLI and the API start them
    )


async def status_of(handle: WorkflowHandle, deadline: float) -> ConversationStatus:
    """The status query, asked again while it fails for a while: a worker just SIGKILLed holds
    the conversation's queries until the server gives up on it."""
    while True:
        try:
            return await handle.query(ConversationWorkflow.status)
        except RPCError as err:  # as the CLI does: only while no worker answers
            if err.status not in NO_ANSWER_YET or time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.5)


async def settled(handle: WorkflowHandle, turn: int = 1, timeout_s: float = 30) -> ConversationStatus:
    """Poll the status query until `turn` needs a human, is answered, or the conversation ended."""
    deadline = time.monotonic() + timeout_s
    while True:
        status = await status_of(handle, deadline)
        if status.status in ("completed", "failed") or (
            status.turn >= turn and status.status in SETTLED_STATUSES
        ):
            return status
        if time.monotonic() > deadline:
            raise AssertionError(f"turn {turn} did not settle in {timeout_s}s: {status}")
        await asyncio.sleep(0.1)


async def until(condition: Callable[[], bool | Awaitable[bool]], timeout_s: float = 30,
                what: str | Callable[[], str] = "the condition") -> None:
    """Wait for `condition` to hold, looking every 50 ms: something the test sees (a counter, a
    file, a receiver's deliveries) or asks (a coroutine function: a history, a description).
    `what` names it in the failure; a function gives what is worth seeing then (a log, say)."""
    deadline = time.monotonic() + timeout_s
    while True:
        held = condition()
        if inspect.isawaitable(held):
            held = await held
        if held:
            return
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what() if callable(what) else what} never held in "
                                 f"{timeout_s}s")
        await asyncio.sleep(0.05)


async def reaches(handle: WorkflowHandle, status: str, timeout_s: float = 30) -> ConversationStatus:
    """Poll until the conversation shows `status`."""
    deadline = time.monotonic() + timeout_s
    while True:
        current = await status_of(handle, deadline)
        if current.status == status:
            return current
        if time.monotonic() > deadline:
            raise AssertionError(f"never reached {status} in {timeout_s}s: {current}")
        await asyncio.sleep(0.1)


async def outcome_of(handle: WorkflowHandle, request_id: str, timeout_s: float = 10):
    deadline = time.monotonic() + timeout_s
    while True:
        outcome = await handle.query(ConversationWorkflow.signal_outcome, request_id)
        if outcome is not None:
            return outcome
        if time.monotonic() > deadline:
            raise AssertionError(f"no outcome recorded for {request_id}")
        await asyncio.sleep(0.05)


def note_rows(data_dir: Path, title: str | None = None) -> list[tuple]:
    db = data_dir / "notes.sqlite3"
    if not db.exists():
        return []
    with sqlite3.connect(db) as conn:
        if title is None:
            return conn.execute("SELECT id, title, body FROM notes ORDER BY id").fetchall()
        return conn.execute("SELECT id, title, body FROM notes WHERE title = ? ORDER BY id",
                            (title,)).fetchall()


def local_runs(history: WorkflowHistory) -> list[tuple[str, str | None]]:
    """The local activities a history recorded: (type, the summary the Temporal UI shows)."""
    runs = []
    for event in history.events:
        marker = event.marker_recorded_event_attributes
        if event.HasField("marker_recorded_event_attributes") and \
                marker.marker_name == "core_local_activity":
            data = json.loads(marker.details["data"].payloads[0].data)
            summary = event.user_metadata.summary.data if event.HasField("user_metadata") else None
            runs.append((data["activity_type"], json.loads(summary) if summary else None))
    return runs


def scheduled(history: WorkflowHistory) -> list[str]:
    """The activities a history scheduled on the server, by type."""
    return [e.activity_task_scheduled_event_attributes.activity_type.name for e in history.events
            if e.HasField("activity_task_scheduled_event_attributes")]


async def tool_messages(handle: WorkflowHandle) -> list:
    return [m for m in await handle.query(ConversationWorkflow.messages) if m.role == "tool"]


WORKFLOW_TASK_EVENTS = frozenset({
    EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED, EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED,
    EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED, EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED,
    EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT,
})


async def recorded_events(handle: WorkflowHandle) -> list[int]:
    """The types of a history's events, without workflow-task bookkeeping. A refused update
    records nothing, but the server may still persist the speculative workflow task that
    carried it (timed out under load, or failed by a worker that had evicted the conversation):
    compare these, not the number of events."""
    history = await handle.fetch_history()
    return [e.event_type for e in history.events if e.event_type not in WORKFLOW_TASK_EVENTS]


async def stream_events(client: Client, workflow_id: str) -> list[StreamEvent]:
    """Everything the stream holds, once the conversation has completed."""
    stream = WorkflowStreamClient.create(client, workflow_id)
    return [item.data async for item in stream.subscribe(
        [EVENTS_TOPIC, TOKENS_TOPIC], result_type=StreamEvent, poll_cooldown=_FAST)]


async def first_token(client: Client, workflow_id: str, timeout_s: float = 60) -> StreamEvent:
    """The first piece of a streamed reply, once the conversation holds it (a stop keeps it)."""
    async def first() -> StreamEvent:
        stream = WorkflowStreamClient.create(client, workflow_id)
        async for item in stream.subscribe([TOKENS_TOPIC], result_type=StreamEvent,
                                           poll_cooldown=_FAST):
            if item.data.kind == "token":
                return item.data
        raise AssertionError("the stream ended without a token")

    return await asyncio.wait_for(first(), timeout_s)


async def approval_round(client: Client, task_queue: str, model: ScriptedModelServer):
    """A turn with a read, a write and a delete: a stale confirm, then the write confirmed by
    ann and the delete rejected by bo. Returns the handle and the two pending calls."""
    title = unique("seen")
    trigger = script(
        model, unique("story"),
        ScriptedReply(content="Let me check.", tool_calls=[
            tool_call("get_weather", {"location": "Paris"}),
            tool_call("create_note", {"title": title, "body": "b"}),
            tool_call("delete_note", {"note_id": 777001}),
        ]),
        ScriptedReply(content="Noted the weather in Paris."),
    )
    handle = await start(client, task_queue, trigger)
    waiting = await reaches(handle, "waiting_for_confirmation")
    create, delete = waiting.pending_confirmations
    await handle.signal(ConversationWorkflow.confirm,
                        ConfirmRequest(call_ids=["nope"], request_id="bad"))
    await handle.signal(ConversationWorkflow.confirm,
                        ConfirmRequest(call_ids=[create.call_id], approver="ann"))
    await handle.signal(ConversationWorkflow.reject,
                        RejectRequest(call_ids=[delete.call_id], reason="keep it", approver="bo"))
    await settled(handle)
    return handle, create, delete
