"""The CLI as users and scripts run it: a subprocess, configured by the environment."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from scripted_model import ScriptedModelServer, ScriptedReply
from tests.helpers import script, tool_call, unique

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def cli(temporal_address: str, task_queue: str):
    env = {**os.environ, "TEMPORAL_ADDRESS": temporal_address, "AGENT_TASK_QUEUE": task_queue}

    async def run(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
        return await asyncio.to_thread(
            subprocess.run, [sys.executable, "-m", "client", *args], cwd=ROOT, env=env,
            capture_output=True, text=True, timeout=timeout,
        )

    return run


async def test_start_wait_say_status_list_end(cli, model: ScriptedModelServer):
    trigger = script(
        model, unique("cli"),
        ScriptedReply(tool_calls=[tool_call("get_weather", {"location": "London"})]),
        ScriptedReply(content="London: {last_tool}"),
        ScriptedReply(content="You're welcome."),
    )
    conv = unique("cli-conv")
    started = await cli("start", "--id", conv, "--wait", "--json", f"{trigger}: weather in London?")
    assert started.returncode == 0, started.stderr
    status = json.loads(started.stdout)
    assert status["workflow_id"] == conv and status["status"] == "idle"
    assert status["final_answer"].startswith("London: London, United Kingdom")
    for key in ("turn", "steps", "llm_calls", "tools_used", "stop_reason", "pending_confirmations",
                "pending_question", "usage", "error"):
        assert key in status

    again = await cli("start", "--id", conv, "hello")
    assert again.returncode == 1 and "already running" in again.stderr

    said = await cli("say", conv, "thanks!", "--wait")
    assert said.returncode == 0, said.stderr
    assert "answer: You're welcome." in said.stdout and "turn 2" in said.stdout

    readable = await cli("status", conv)
    assert readable.returncode == 0 and f"python -m client say {conv}" in readable.stdout

    listed = []
    for _ in range(50):  # visibility is eventually consistent
        out = await cli("list", "--status", "idle", "--json")
        listed = [row["workflow_id"] for row in json.loads(out.stdout)]
        if conv in listed:
            break
        await asyncio.sleep(0.2)
    assert conv in listed

    ended = await cli("end", conv)
    assert ended.returncode == 0 and "taken" in ended.stdout
    final = await cli("status", conv, "--json")
    assert json.loads(final.stdout)["stop_reason"] == "ended"

    late = await cli("say", conv, "anyone there?")
    assert late.returncode == 1 and "no such running conversation" in late.stderr


async def test_start_without_wait_prints_the_id(cli, model: ScriptedModelServer):
    trigger = script(model, unique("cli-nowait"), ScriptedReply(content="ok"))
    out = await cli("start", "--json", "--one-shot", trigger)
    assert out.returncode == 0
    assert json.loads(out.stdout)["workflow_id"].startswith("conv-")


async def test_clear_errors_and_exit_codes(cli, temporal_address: str):
    missing = await cli("status", "no-such-conversation", "--timeout", "5")
    assert missing.returncode == 1
    assert missing.stderr.strip() == "error: no such conversation: no-such-conversation"

    usage = await cli("start")
    assert usage.returncode == 2

    env = {**os.environ, "TEMPORAL_ADDRESS": "127.0.0.1:1"}
    unreachable = await asyncio.to_thread(
        subprocess.run, [sys.executable, "-m", "client", "status", "x"], cwd=ROOT, env=env,
        capture_output=True, text=True, timeout=60,
    )
    assert unreachable.returncode == 1
    assert unreachable.stderr.startswith("error: cannot reach Temporal at 127.0.0.1:1")


async def test_query_waits_for_a_worker_and_says_so(cli, client, temporal_address: str):
    from workflows.conversation import ConversationWorkflow
    from workflows.models import ConversationInput

    conv = unique("no-worker")
    await client.start_workflow(ConversationWorkflow.run, ConversationInput(prompt="hi"),
                                id=conv, task_queue=unique("nobody-serves-this"))
    out = await cli("status", conv, "--timeout", "2")
    assert out.returncode == 1
    assert "waiting for a worker to answer..." in out.stderr
    assert "no worker answered for 2s" in out.stderr
    await client.get_workflow_handle(conv).terminate()


async def test_confirm_reject_and_answer_report_taken_or_refused(cli, model: ScriptedModelServer):
    trigger = script(
        model, unique("cli-hitl"),
        ScriptedReply(tool_calls=[tool_call("create_note", {"title": unique("cli"), "body": "b"}),
                                  tool_call("delete_note", {"note_id": 424242})]),
        ScriptedReply(tool_calls=[tool_call("ask_choice", {"message": "Color?", "options": ["red", "blue"]})]),
        ScriptedReply(content="You chose {last_tool}."),
    )
    conv = unique("cli-hitl-conv")
    started = await cli("start", "--id", conv, "--wait", "--json", trigger)
    status = json.loads(started.stdout)
    assert status["status"] == "waiting_for_confirmation"
    create, delete = status["pending_confirmations"]

    readable = await cli("status", conv)
    assert f"approve: python -m client confirm {conv} {create['call_id']}" in readable.stdout
    assert f"reject:  python -m client reject {conv} {delete['call_id']}" in readable.stdout

    assert (await cli("confirm", conv)).returncode == 2
    assert (await cli("confirm", conv, create["call_id"], "--args", "{not json")).returncode == 2
    unknown = await cli("confirm", conv, "call_nope")
    assert unknown.returncode == 1 and unknown.stdout.strip() == "refused: unknown call id call_nope"
    bad_edit = await cli("confirm", conv, create["call_id"], "--args", '{"title": ""}')
    assert bad_edit.returncode == 1 and "invalid edited args" in bad_edit.stdout

    rejected = await cli("reject", conv, delete["call_id"], "--reason", "keep it", "--as", "dora")
    assert rejected.returncode == 0 and rejected.stdout.strip() == "taken"
    confirmed = await cli("confirm", conv, create["call_id"], "--as", "alice", "--wait", "--json")
    assert confirmed.returncode == 0, confirmed.stderr
    after = json.loads(confirmed.stdout)
    assert after["status"] == "waiting_for_input" and after["pending_question"]["options"] == ["red", "blue"]
    assert {(d["approver"], d["approved"]) for d in after["decisions"]} == {("dora", False), ("alice", True)}

    wrong = await cli("answer", conv, "green")
    assert wrong.returncode == 1 and "not one of the options" in wrong.stdout
    answered = await cli("answer", conv, "blue", "--wait")
    assert answered.returncode == 0 and "answer: You chose blue." in answered.stdout
    again = await cli("answer", conv, "red")
    assert again.returncode == 1 and "no question is waiting" in again.stdout
