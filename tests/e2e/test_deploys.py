"""Deploys without patches, for real: `agent-worker --deployment NAME --build-id ID` processes
of two versions on one dev server, promoted with the temporal CLI as an operator would.

A conversation is pinned to the version it runs on; at a turn boundary it moves to the
deployment's new target version (current, or ramping to it) by continuing as new, carrying its
state. The second test's v2 is other code, whose commands differ: a conversation that was not
pinned would fail on it mid-turn."""

from __future__ import annotations

import asyncio
import base64
import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.api.sdk.v1 import WorkflowMetadata
from temporalio.client import Client, WorkflowHandle

from durable_react_agent.contract import (
    ConfirmRequest,
    ConversationInput,
    ConversationStatus,
    SayRequest,
)
from durable_react_agent.rules.search_attributes import WORKER_VERSION
from durable_react_agent.testing import ScriptedModelServer, ScriptedReply
from durable_react_agent.worker.deployment import DeploymentRefused, version_from
from durable_react_agent.workflows.conversation import ConversationWorkflow
from tests.devserver import temporal_cli, worker_env
from tests.helpers import (
    HISTORIES,
    REPLAY,
    USER_TOOLS,
    code_copy,
    keep_history,
    note_rows,
    reaches,
    replay_runs,
    run_histories,
    script,
    settled,
    start,
    status_of,
    tool_call,
    unique,
)
from tests.processes import ROOT, WorkerProcess
from tests.subagent_support import delegate

STARTED = '"event": "worker started"'
PROFILES = {"agents": {"researcher": {"description": "Finds facts",
                                      "system_prompt": "You research.",
                                      "tools": ["get_weather"], "max_steps": 4}}}


@pytest.fixture
def fleet(temporal_address: str, model: ScriptedModelServer, tmp_path: Path
          ) -> Iterator[tuple[str, str, dict[str, str], list[WorkerProcess]]]:
    """A deployment name, a task queue, the workers' environment, and the worker processes a
    test starts (stopped at the end)."""
    profiles = tmp_path / "profiles.json"
    profiles.write_text(json.dumps(PROFILES))
    queue = unique("deploys")
    env = worker_env(temporal_address, queue, model.base_url, tmp_path / "data",
                     AGENT_PROFILES=str(profiles))
    workers: list[WorkerProcess] = []
    try:
        yield unique("agents"), queue, env, workers
    finally:
        for worker in workers:
            worker.stop()


def versioned(fleet: tuple, name: str, log_dir: Path, cwd: Path = ROOT,
              build: str | None = None, **extra: str) -> WorkerProcess:
    """A worker process of build `build` (default: `name`), its logs in `log_dir/name`; with
    `build`, `name` is its role."""
    deployment, _, env, workers = fleet
    (log_dir / name).mkdir(exist_ok=True)
    role = ("--role", name) if build is not None else ()
    build = build or name
    worker = WorkerProcess({**env, **extra}, log_dir / name, cwd=cwd,
                           args=("--deployment", deployment, "--build-id", build, *role))
    workers.append(worker)
    worker.start()
    log = worker.wait_for_log(STARTED)  # logged once the server lists the version
    assert f'"version": "{deployment}:{build}"' in log
    return worker


def operator(address: str, *args: str) -> str:
    """`temporal worker deployment ...`, as the README's operator runs it."""
    done = subprocess.run([temporal_cli(), "worker", "deployment", *args, "--address", address,
                           "--yes"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


async def on_version(handle: WorkflowHandle, version: str, timeout_s: float = 30
                     ) -> ConversationStatus:
    """The status once the conversation runs on `version` and is idle or waiting."""
    deadline = time.monotonic() + timeout_s
    while True:
        status = await status_of(handle, deadline)
        if status.version == version and status.status != "running":
            return status
        if time.monotonic() > deadline:
            raise AssertionError(f"never on {version} in {timeout_s}s: {status}")
        await asyncio.sleep(0.2)


async def version_of(client: Client, workflow_id: str) -> str | None:
    """Temporal's own word (the search attribute), not the workflow's."""
    description = await client.get_workflow_handle(workflow_id).describe()
    return description.typed_search_attributes.get(WORKER_VERSION)


async def listed(cli, version: str) -> list[str]:
    done = await cli("list", "--version", version, "--json")
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)
    assert all(row["version"] == version for row in rows)
    return [row["workflow_id"] for row in rows]


async def test_a_conversation_moves_to_a_ramped_version_at_its_turn_boundary_with_its_subagents(
    client: Client, model: ScriptedModelServer, temporal_address: str, fleet, tmp_path: Path,
    cli,
):
    deployment, queue, _, _ = fleet
    v1, v2 = f"{deployment}:v1", f"{deployment}:v2"
    children = [script(model, unique(f"deploy-child{i}"), ScriptedReply(content=f"child {i} done"))
                for i in (1, 2)]
    trigger = script(
        model, unique("deploy-parent"),
        ScriptedReply(tool_calls=[delegate("researcher", f"{children[0]}: go", "c1")]),
        ScriptedReply(content="turn 1: {last_tool}"),
        ScriptedReply(tool_calls=[delegate("researcher", f"{children[1]}: go", "c2")]),
        ScriptedReply(content="turn 2: {last_tool}"),
    )
    old = versioned(fleet, "v1", tmp_path)
    operator(temporal_address, "set-current-version", "--deployment-name", deployment,
             "--build-id", "v1")
    handle = await start(client, queue, f"{trigger}: research", version_check_s=1)
    first = await settled(handle, timeout_s=60)
    assert (first.final_answer, first.version, first.runs) == ("turn 1: child 1 done", v1, 1)
    assert await version_of(client, f"{handle.id}/c1") == v1  # the subagent ran on its parent's

    # v2 (with one more tool) ramps to every conversation: the idle one moves at its next check,
    # carrying its state, and shakes hands with v2.
    versioned(fleet, "v2", tmp_path, AGENT_TOOLS="slow_reads", PYTHONPATH=str(USER_TOOLS))
    operator(temporal_address, "set-ramping-version", "--deployment-name", deployment,
             "--build-id", "v2", "--percentage", "100")
    moved = await on_version(handle, v2)
    assert moved.runs == 2 and moved.status == "idle"
    assert (moved.turn, moved.final_answer, moved.llm_calls) == (1, "turn 1: child 1 done", 2)
    assert await version_of(client, handle.id) == v2
    assert handle.id in await listed(cli, v2) and handle.id not in await listed(cli, v1)
    refused = await cli("list", "--version", f"{deployment}.v2")  # Temporal's other spelling
    assert refused.returncode == 2 and "--version is NAME:ID" in refused.stderr
    metadata = await handle.query("__temporal_workflow_metadata", result_type=WorkflowMetadata)
    assert f"**Version:** `{v2}`" in metadata.current_details  # as the Temporal UI shows it

    # v2 current, v1 still running: a new conversation starts on v2; v1 serves only its pinned.
    operator(temporal_address, "set-current-version", "--deployment-name", deployment,
             "--build-id", "v2")
    other = await start(client, queue, "hello there", one_shot=True)
    assert (await settled(other, timeout_s=60)).version == v2
    old.stop()

    await handle.signal(ConversationWorkflow.say, SayRequest(text="and again"))
    second = await settled(handle, turn=2, timeout_s=60)
    assert (second.final_answer, second.version) == ("turn 2: child 2 done", v2)
    assert await version_of(client, f"{handle.id}/c2") == v2
    asked = [r for r in model.requests if r.trigger == trigger and r.kind == "chat"]
    assert len({r.step for r in asked}) == len(asked) == 4  # none asked twice across the move
    offered = [{t["function"]["name"] for t in r.body.get("tools", [])} for r in asked]
    assert [("slow_lookup" in names) for names in offered] == [False, False, True, True]

    await handle.signal(ConversationWorkflow.end)
    await handle.result()
    assert await replay_runs(client, handle, "deploy_moved_at_boundary") == 2


# v2's code: a timer before every turn. A conversation mid-turn that met it would fail with a
# non-determinism error: its history has the model call where v2 starts a timer.
V2_CHANGE = ("        if text is not None:\n            self._begin_turn(text)",
             "        await __import__('temporalio').workflow.sleep(0.01)  # v2\n"
             "        if text is not None:\n            self._begin_turn(text)")
def other_code(into: Path) -> Path:
    """A copy of the worker's code whose workflow issues other commands."""
    turn = code_copy(into) / "workflows" / "turn.py"
    source = turn.read_text()
    assert source.count(V2_CHANGE[0]) == 1
    turn.write_text(source.replace(*V2_CHANGE))
    return into


def replayed_by(code: Path, history: Path) -> str:
    (code / "replay.py").write_text(REPLAY)
    done = subprocess.run([sys.executable, "replay.py", str(history)], cwd=code,
                          env={"PATH": "/usr/bin:/bin"}, capture_output=True, text=True,
                          timeout=120)
    return done.stdout + done.stderr


async def test_a_pinned_turn_finishes_on_v1_then_the_conversation_moves_to_other_code(
    client: Client, model: ScriptedModelServer, temporal_address: str, fleet, tmp_path: Path,
):
    deployment, queue, env, _ = fleet
    v1, v2 = f"{deployment}:v1", f"{deployment}:v2"
    title = unique("deploy-note")
    trigger = script(
        model, unique("deploy-approve"),
        ScriptedReply(tool_calls=[tool_call("create_note", {"title": title, "body": "once"})]),
        ScriptedReply(content="{last_tool}"),
        ScriptedReply(content="second turn: {last_user}"),
    )
    old = versioned(fleet, "v1", tmp_path)
    operator(temporal_address, "set-current-version", "--deployment-name", deployment,
             "--build-id", "v1")
    handle = await start(client, queue, trigger, version_check_s=1)
    [pending] = (await reaches(handle, "waiting_for_confirmation", timeout_s=60)
                 ).pending_confirmations

    code = other_code(tmp_path / "v2-code")
    versioned(fleet, "v2", tmp_path, cwd=code)
    operator(temporal_address, "set-current-version", "--deployment-name", deployment,
             "--build-id", "v2")
    # Proof that v2 is other code: the conversation as it stands does not replay on it.
    waiting = tmp_path / "waiting.json"
    [history] = await run_histories(client, handle)
    keep_history(history, waiting)
    replayed = replayed_by(code, waiting)
    assert "FAILED" in replayed and "ondeterminism" in replayed, replayed[-3000:]

    # Still waiting on v1, pinned. v1's worker is SIGKILLed; the decision arrives with none of
    # v1 running, and v2 does not take it: the turn waits for its own version's worker.
    still = await status_of(handle, time.monotonic() + 10)
    assert (still.status, still.version) == ("waiting_for_confirmation", v1)
    old.kill()
    await handle.signal(ConversationWorkflow.confirm,
                        ConfirmRequest(request_id="deploy-ok", call_ids=[pending.call_id]))
    await asyncio.sleep(3)
    assert note_rows(tmp_path / "data", title) == []
    old.start()
    old.wait_for_log(STARTED)
    moved = await on_version(handle, v2, timeout_s=60)  # the turn ended on v1, then it moved
    # The v1 worker started after v2 became current serves only its pinned conversations.
    other = await start(client, queue, "hello there", one_shot=True)
    assert (await settled(other, timeout_s=60)).version == v2
    assert moved.runs == 2 and moved.final_answer.startswith("Created note #")
    old.stop()

    await handle.signal(ConversationWorkflow.say, SayRequest(text="more please"))
    second = await settled(handle, turn=2, timeout_s=60)
    assert (second.final_answer, second.version) == ("second turn: more please", v2)
    assert len(note_rows(tmp_path / "data", title)) == 1  # the approved write ran once
    runs = await run_histories(client, handle)
    assert [v2_timers(run) for run in runs] == [0, 1]  # v2's code ran the second turn, once


def v2_timers(history) -> int:
    """The timers of v2's change (10 ms; the idle waits' are of seconds)."""
    return sum(1 for e in history.events if e.event_type == EventType.EVENT_TYPE_TIMER_STARTED
               and e.timer_started_event_attributes.start_to_fire_timeout.ToTimedelta()
               < timedelta(seconds=0.5))


async def test_bad_deployments_are_refused_at_start(tmp_path: Path, temporal_address: str,
                                                    model: ScriptedModelServer):
    env = worker_env(temporal_address, unique("bad-deploy"), model.base_url, tmp_path / "data")
    for args, words in [
        (("--deployment", "agents.prod", "--build-id", "v1"), "may not hold '.'"),
        (("--build-id", "v1"), "--deployment (AGENT_DEPLOYMENT) is missing"),
    ]:
        done = subprocess.run([sys.executable, "-m", "durable_react_agent.worker", *args], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 2, (args, done.stdout[-2000:], done.stderr[-2000:])
        assert "cannot start: bad deployment" in done.stdout + done.stderr
        assert words in done.stdout + done.stderr, (words, done.stdout[-2000:])


def test_the_version_comes_from_the_flags_or_the_environment():
    env = {"AGENT_DEPLOYMENT": "agents", "AGENT_BUILD_ID": "b7"}
    assert version_from(None, None, {}) is None
    assert version_from(None, None, env).build_id == "b7"
    flagged = version_from("other", "b8", env)
    assert (flagged.deployment_name, flagged.build_id) == ("other", "b8")
    for deployment, build_id, words in [
        ("agents", "", "--build-id (AGENT_BUILD_ID) is missing"),
        ("", "b1", "--deployment (AGENT_DEPLOYMENT) is missing"),
        ("agents.prod", "b1", "may not hold '.'"), ("agents:prod", "b1", "may not hold ':'"),
        ("agents", "x" * 256, "at most 255"), ("__agents", "b1", "may not start with '__'"),
        ("agents", "__b1", "may not start with '__'"),
    ]:
        with pytest.raises(DeploymentRefused, match=re.escape(words)):
            version_from(deployment, build_id, {})
    assert version_from("agents", "x" * 255, {}) is not None  # the longest Temporal takes


def recorded_carries() -> list[Path]:
    """Every recorded run that began from a carried state, of every version kept."""
    return sorted(p for p in HISTORIES.rglob("*.run*.json")
                  if not p.name.endswith(".run1.json"))


def carry_of(path: Path) -> dict:
    started = json.loads(path.read_text())["events"][0]
    [payload] = started["workflowExecutionStartedEventAttributes"]["input"]["payloads"]
    return json.loads(base64.b64decode(payload["data"]))


@pytest.mark.parametrize("path", recorded_carries(), ids=lambda p: str(p.relative_to(HISTORIES)))
def test_every_recorded_carry_of_every_version_reads_whole_today(path: Path):
    """The carried state is the contract between versions: what an older version handed over
    at its boundary, today's code takes, keeping what the conversation was."""
    raw = carry_of(path)
    inp = ConversationInput.model_validate(raw)
    if inp.carry is not None:  # the shape before `state` (issue 10), still read
        assert inp.carry.model_dump(exclude_unset=True).keys() <= set(raw["carry"])
        return
    assert inp.state is not None
    # No field lost or changed on the way in; fields added since come with their defaults.
    assert holds(inp.state.model_dump(mode="json"), raw["state"])


def holds(kept: object, sent: object, where: str = "state") -> bool:
    """Whether `kept` has everything `sent` had (dicts may have more keys)."""
    if isinstance(sent, dict):
        assert isinstance(kept, dict), where
        for name, value in sent.items():
            assert name in kept, f"{where}.{name} was lost"
            holds(kept[name], value, f"{where}.{name}")
    elif isinstance(sent, list):
        assert isinstance(kept, list) and len(kept) == len(sent), where
        for i, (k, v) in enumerate(zip(kept, sent)):
            holds(k, v, f"{where}[{i}]")
    else:
        assert kept == sent, f"{where}: {sent!r} became {kept!r}"
    return True


async def test_a_conversation_carried_by_an_older_version_goes_on_today(
    client: Client, model: ScriptedModelServer, task_queue: str,
):
    """A run of today's code, begun from the carry the last 0.x version handed over at a turn
    boundary (`histories/0.x/`), answers the next message with the whole conversation before
    it: a 0.x conversation pinned to its version moves onto 1.0 at its boundary."""
    old = HISTORIES / "0.x" / "delta_context_across_runs.run3.json"
    inp = ConversationInput.model_validate(carry_of(old))
    assert inp.state is not None and not inp.state.current.in_progress
    earlier = [m.content for m in inp.state.context.messages if m.role == "user"]
    handle = await client.start_workflow(ConversationWorkflow.run, inp, id=unique("carried"),
                                         task_queue=task_queue)
    text = unique("after the deploy")
    await handle.signal(ConversationWorkflow.say, SayRequest(text=text))
    status = await settled(handle, turn=inp.state.current.number + 1, timeout_s=60)
    assert status.stop_reason == "answered" and status.runs == inp.state.runs
    assert status.version is None  # an unversioned worker's
    assert status.usage.total_tokens > inp.state.usage.total_tokens
    [asked] = [r for r in model.requests if text in json.dumps(r.body["messages"])]
    shown = json.dumps(asked.body["messages"])
    assert earlier and all(json.dumps(m)[1:-1] in shown for m in earlier if isinstance(m, str))
    await handle.signal(ConversationWorkflow.end)
    await handle.result()


async def test_every_role_runs_as_the_version_and_serves_its_pinned_conversations(
    client: Client, model: ScriptedModelServer, temporal_address: str, fleet, tmp_path: Path,
):
    """`--role workflows`, `models` and `tools` as three processes of one version: the pinned
    conversation's model calls and tool runs reach the processes of its version."""
    deployment, queue, _, _ = fleet
    for role in ("workflows", "models", "tools"):
        worker = versioned(fleet, role, tmp_path, build="b1")
        assert f'"role": "{role}"' in worker.log(1)
    operator(temporal_address, "set-current-version", "--deployment-name", deployment,
             "--build-id", "b1")
    trigger = script(model, unique("deploy-roles"),
                     ScriptedReply(tool_calls=[tool_call("get_weather", {"location": "Berlin"})]),
                     ScriptedReply(content="Berlin: {last_tool}"))
    handle = await start(client, queue, f"{trigger}: weather in Berlin?", one_shot=True)
    status = await settled(handle, timeout_s=60)
    assert status.final_answer.startswith("Berlin: Berlin, Germany") and status.version == (
        f"{deployment}:b1")
