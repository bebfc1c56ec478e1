"""The CLI as users and scripts run it, configured by the environment: its entry in-process
(`tests.cli_support`), and as a process where only a process shows it (a closed pipe, Ctrl-C,
standard input; `test_commands_as_processes` runs each command once as one)."""

from __future__ import annotations

import asyncio
import getpass
import json
import os
import re
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from temporalio import workflow
from temporalio.api.sdk.v1 import WorkflowMetadata
from temporalio.client import Client
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from durable_react_agent.contract import (
    ConversationInput,
    EndRequest,
)
from durable_react_agent.contract.owner import LEDGER_WORKFLOW_TYPE, LedgerState, ledger_id
from durable_react_agent.rules.repair import SAFE_ID_CHARS
from durable_react_agent.rules.search_attributes import AGENT_STATUS
from durable_react_agent.testing import ScriptedModelServer, ScriptedReply, ScriptedToolCall
from durable_react_agent.workflows.conversation import ConversationWorkflow
from tests.generated import PRINTED
from tests.helpers import (
    approval_round,
    first_token,
    note_rows,
    reaches,
    replay,
    script,
    settled,
    start,
    tool_call,
    unique,
)
from tests.hostile_input import SHELL_ID
from tests.subagent_support import delegating

WEATHER = {"type": "object", "additionalProperties": False, "required": ["city", "celsius"],
           "properties": {"city": {"type": "string"}, "celsius": {"type": "number"}}}




ROOT = Path(__file__).resolve().parents[2]


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

    said = await cli("say", conv, "thanks!", "--wait", "--as", "ops-bob")
    assert said.returncode == 0, said.stderr
    assert "answer: You're welcome." in said.stdout and "turn 2" in said.stdout

    readable = await cli("status", conv)
    assert readable.returncode == 0 and f"agent say {conv}" in readable.stdout

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
    # The operator's tool audits the OS user (the owner, the ender), or whom --as names.
    assert json.loads(final.stdout)["owner"] == getpass.getuser()
    history = json.loads((await cli("history", conv, "--json")).stdout)
    assert [(r["kind"], r["by"]) for r in history if r["kind"] != "step"] == [
        ("start", getpass.getuser()), ("message", "ops-bob"), ("end", getpass.getuser())]
    shown = (await cli("history", conv)).stdout
    assert "turn 2  message by ops-bob: thanks!" in shown and "ended by" in shown

    late = await cli("say", conv, "anyone there?")
    assert late.returncode == 1 and "no such running conversation" in late.stderr


async def test_stop_ends_the_turn_in_flight_and_the_conversation_goes_on(
        cli, model: ScriptedModelServer, client: Client):
    trigger = script(model, unique("cli-stop"),
                     ScriptedReply(content="a long reply, said slowly", stream_pause_s=60),
                     ScriptedReply(content="heard: {last_user}"))
    conv = unique("cli-stop-conv")
    assert (await cli("start", "--id", conv, trigger)).returncode == 0
    await first_token(client, conv)  # it is saying something (which the next turn's model reads)
    stopped = await cli("stop", conv, "--as", "ops-ann")
    assert stopped.returncode == 0 and stopped.stdout.strip() == f"taken: {conv}: turn 1 stopped"
    assert "answer: heard: again" in (await cli("say", conv, "again", "--wait")).stdout
    status = json.loads((await cli("status", conv, "--json")).stdout)
    assert [t["stop_reason"] for t in status["turns"]] == ["stopped", "answered"]
    assert "turn stopped by ops-ann" in (await cli("history", conv)).stdout
    assert (await cli("end", conv)).returncode == 0


async def test_say_steer_reaches_the_turn_in_flight_or_is_a_message_as_any_other(
        cli, model: ScriptedModelServer, client: Client):
    trigger = script(model, unique("cli-steer"),
                     ScriptedReply(content="a reply, said slowly", stream_pause_s=5),
                     ScriptedReply(content="heard: {last_user}"),
                     ScriptedReply(content="and: {last_user}"))
    conv = unique("cli-steer-conv")
    assert (await cli("start", "--id", conv, trigger)).returncode == 0
    await first_token(client, conv)
    steered = await cli("say", conv, "--steer", "one more thing")
    assert steered.stdout.strip() == \
        "taken: steered into turn 1: its model gets it at its next step"
    # its turn ended first (a final answer): the next turn answers it
    assert (await settled(client.get_workflow_handle(conv), turn=2, timeout_s=60)
            ).final_answer == "heard: one more thing"
    idle = await cli("say", conv, "--steer", "and this", "--wait")  # no turn running: turn 3
    assert "answer: and: and this" in idle.stdout
    assert (await cli("end", conv)).returncode == 0


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
    for flag, value in (("--max-parallel-tools", "0"), ("--max-calls-per-step", "65")):
        limit = await cli("start", flag, value, "hello")
        assert (limit.returncode, limit.stderr.strip()) == (
            2, f"error: {flag} must be from 1 to 64")

    unreachable = await cli("status", "x", extra_env={"TEMPORAL_ADDRESS": "127.0.0.1:1"})
    assert unreachable.returncode == 1
    assert unreachable.stderr.startswith("error: cannot reach Temporal at 127.0.0.1:1")


async def test_query_waits_for_a_worker_and_says_so(cli, client, temporal_address: str):
    from durable_react_agent.contract import ConversationInput
    from durable_react_agent.workflows.conversation import ConversationWorkflow

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
    assert f"approve: agent confirm {conv} {create['call_id']}" in readable.stdout
    assert f"reject:  agent reject {conv} {delete['call_id']}" in readable.stdout

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
    history = (await cli("history", conv)).stdout  # the question, then its answer
    assert history.index("action:  ask_choice(") < history.index("answer by "), history
    records = json.loads((await cli("history", conv, "--json")).stdout)  # as the API has them
    kinds = [(r["kind"], [a["tool"] for a in r.get("actions") or []]) for r in records]
    assert kinds.index(("step", ["ask_choice"])) < kinds.index(("answer", [])), kinds
    again = await cli("answer", conv, "red")
    assert again.returncode == 1 and "no question is waiting" in again.stdout


def test_options_and_values_come_in_any_order():
    """As `status` prints `answer ID --call-id REF 'your answer'` (argparse alone binds no
    values before the option and refuses those after it)."""
    from durable_react_agent.client.cli import build_parser

    parse = build_parser().parse_args
    for argv in (["answer", "c", "--call-id", "call_0", "red", "blue"],
                 ["answer", "c", "red", "--call-id", "call_0", "blue"]):
        args = parse(argv)
        assert (args.id, args.call_id, args.values) == ("c", "call_0", ["red", "blue"])
    args = parse(["confirm", "c", "--as", "bob", "call_0", "call_1"])
    assert (args.who, args.call_ids) == ("bob", ["call_0", "call_1"])


@workflow.defn(name="ConversationWorkflow")
class StuckConversation:
    """Answers queries but never takes a signal: as a conversation whose tasks cannot progress."""

    @workflow.run
    async def run(self, inp: dict) -> None:
        await workflow.wait_condition(lambda: False)

    @workflow.signal(name="say")
    def say(self, request: dict) -> None:
        pass

    @workflow.query(name="signal_outcome")
    def signal_outcome(self, request_id: str) -> None:
        return None


async def test_a_signal_never_taken_is_reported_after_the_timeout(cli, client, task_queue: str):
    queue = unique("stuck")
    conv = unique("stuck-conv")
    async with Worker(client, task_queue=queue, workflows=[StuckConversation],
                      workflow_runner=UnsandboxedWorkflowRunner()):
        await client.start_workflow("ConversationWorkflow", {"prompt": "hi"}, id=conv, task_queue=queue)
        out = await cli("say", conv, "anyone?", "--timeout", "2", timeout=30)
        await client.get_workflow_handle(conv).terminate()
    assert out.returncode == 1
    assert "recorded no outcome for the signal in 2s" in out.stderr


async def test_status_fails_when_the_conversation_did_and_lists_show_closed_runs(
    cli, client, model: ScriptedModelServer, task_queue: str
):
    trigger = script(model, unique("cli-401"), ScriptedReply(content="x", errors=[401]))
    conv = unique("cli-llm-error")
    started = await cli("start", "--id", conv, "--wait", trigger)
    assert started.returncode == 1 and "stop reason: llm_error" in started.stdout
    status = await cli("status", conv)
    assert status.returncode == 1 and "401" in status.stdout

    broken = unique("cli-terminated")
    await client.start_workflow(ConversationWorkflow.run, ConversationInput(prompt="hi"),
                                id=broken, task_queue=unique("nobody"))
    await client.get_workflow_handle(broken).terminate()
    rows = []
    for _ in range(50):  # visibility is eventually consistent
        rows = json.loads((await cli("list", "--status", "failed", "--json")).stdout)
        if broken in [r["workflow_id"] for r in rows]:
            break
        await asyncio.sleep(0.2)
    [row] = [r for r in rows if r["workflow_id"] == broken]
    assert (row["status"], row["execution"]) == ("failed", "terminated")


def lines_until(stream, text: str) -> str:
    """Read `stream` line by line up to the first line holding `text`; fail if it ends first."""
    read = ""
    while text not in (line := stream.readline()):
        assert line, f"the output ended without {text!r}: {read!r}"
        read += line
    return read + line


async def test_cancel_end_help_and_ctrl_c(cli, client, model: ScriptedModelServer,
                                          temporal_address: str, task_queue: str):
    trigger = script(model, unique("cli-cancel"), *[ScriptedReply(content="hello")] * 2)
    conv = unique("cli-cancel-conv")
    assert (await cli("start", "--id", conv, "--wait", trigger)).returncode == 0
    cancelled = await cli("cancel", conv)
    assert cancelled.returncode == 0 and "stop_reason=cancelled" in cancelled.stdout
    for _ in range(50):
        final = json.loads((await cli("status", conv, "--json")).stdout)
        if final["status"] == "completed":
            break
        await asyncio.sleep(0.1)
    assert (final["status"], final["stop_reason"]) == ("completed", "cancelled")

    other = unique("cli-end-conv")
    assert (await cli("start", "--id", other, "--wait", trigger)).returncode == 0
    ended = await cli("end", other)
    assert ended.returncode == 0 and ended.stdout.strip() == f"taken: {other} is ending; work in flight is cancelled"

    helped = await cli("say", "--help")
    assert "the conversation's id (its workflow id)" in helped.stdout
    assert "print JSON instead of text" in helped.stdout and "- reads it from stdin" in helped.stdout

    unserved = unique("cli-unserved")  # its status waits for a worker that never comes
    await client.start_workflow(ConversationWorkflow.run, ConversationInput(prompt="hi"),
                                id=unserved, task_queue=unique("nobody"))
    env = {**os.environ, "TEMPORAL_ADDRESS": temporal_address, "AGENT_TASK_QUEUE": task_queue}
    # Ctrl-C as a terminal sends it, whether or not SIGINT is ignored here (a shell that runs the
    # suite in the background ignores it, for its children too)
    waiting = subprocess.Popen([sys.executable, "-m", "durable_react_agent.client", "status", unserved], cwd=ROOT,
                               env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:  # interrupted once it says it waits: its first query found no worker, it asks again
        told = await asyncio.wait_for(asyncio.to_thread(lines_until, waiting.stderr,
                                                        "waiting for a worker"), timeout=60)
    finally:
        waiting.send_signal(signal.SIGINT)
        _, rest = await asyncio.to_thread(waiting.communicate, timeout=30)
    err = told + rest
    await client.get_workflow_handle(unserved).terminate()
    assert waiting.returncode == 130 and err.strip().endswith("interrupted")
    assert "Traceback" not in err


async def test_refusals_of_the_server_are_reported_not_waited_out(monkeypatch):
    from temporalio.service import RPCError, RPCStatusCode

    from durable_react_agent.client.connection import TemporalSettings
    from durable_react_agent.client.session import CliError, Session

    class Refusing:
        async def query(self, *args, **kwargs):
            raise RPCError("request unauthorized", RPCStatusCode.UNAUTHENTICATED, b"")

    session = Session(client=None, settings=TemporalSettings(), timeout_s=30)  # type: ignore[arg-type]
    monkeypatch.setattr(session, "handle", lambda workflow_id: Refusing())
    with pytest.raises(RPCError) as refused:
        await asyncio.wait_for(session.status("x"), timeout=5)
    assert refused.value.status == RPCStatusCode.UNAUTHENTICATED
    assert not isinstance(refused.value, CliError)


def to_a_closed_pipe(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    """`agent ARGS` with its output read by no one: as `... | head -1` once head
    has exited."""
    read, write = os.pipe()
    os.close(read)
    try:
        return subprocess.run([sys.executable, "-m", "durable_react_agent.client", *args], cwd=ROOT, env=env,
                              stdout=write, stderr=subprocess.PIPE, text=True, timeout=60)
    finally:
        os.close(write)


async def test_output_to_a_closed_pipe_ends_quietly(cli, model: ScriptedModelServer,
                                                    temporal_address: str, task_queue: str):
    """`status ID | head` and the like: no traceback, and 0 or 141 (128 + SIGPIPE), as Unix
    tools exit; with Python's output buffered (the default) and unbuffered."""
    trigger = script(model, unique("cli-pipe"), ScriptedReply(content="piped"))
    conv = unique("cli-pipe-conv")
    assert (await cli("start", "--id", conv, "--wait", "--one-shot", trigger)).returncode == 0
    env = {**os.environ, "TEMPORAL_ADDRESS": temporal_address, "AGENT_TASK_QUEUE": task_queue}
    buffered = {k: v for k, v in env.items() if k != "PYTHONUNBUFFERED"}
    runs = [(["status", conv], buffered), (["history", conv], {**env, "PYTHONUNBUFFERED": "1"}),
            (["watch", conv], buffered), (["--help"], buffered)]
    done = await asyncio.gather(*(asyncio.to_thread(to_a_closed_pipe, args, e)
                                  for args, e in runs))
    for (args, _), out in zip(runs, done):
        # (a query a loaded worker could not answer yet is waited for, and said: no traceback)
        said = set(out.stderr.splitlines()) - {"waiting for a worker to answer..."}
        assert out.returncode in (0, 141) and not said, (args, out.returncode, out.stderr)


async def test_cli_history_and_watch(client: Client, task_queue: str, model: ScriptedModelServer,
                                     cli):
    handle, create, _ = await approval_round(client, task_queue, model)
    await handle.signal(ConversationWorkflow.end, EndRequest())
    await handle.result()
    history = await cli("history", handle.id)
    assert history.returncode == 0, history.stderr
    assert "thought: Let me check." in history.stdout
    assert "decision: approved by ann" in history.stdout and "observation: rejected" in history.stdout
    watched = await cli("watch", handle.id)
    assert watched.returncode == 0, watched.stderr
    assert "── turn 1 finished: answered" in watched.stdout
    resumed = await cli("watch", handle.id, "--from-offset", "3")
    assert resumed.returncode == 0 and "── turn 1:" not in resumed.stdout


async def test_the_cli_refuses_a_3_mb_message_and_the_next_one_is_answered(
    cli_process, task_queue: str, client: Client, model: ScriptedModelServer
):
    """From standard input (`-`), as a process reads it."""
    trigger = script(model, unique("cli-3mb"), *[ScriptedReply(content="heard: {last_user}")] * 2)
    handle = await start(client, task_queue, trigger)
    await settled(handle)

    def say(text: str, *extra: str):
        return cli_process("say", handle.id, "-", *extra, input=text)

    big = await say("m" * 3 * 1024 * 1024)
    assert big.returncode == 1
    assert big.stderr.strip() == "refused: the message is 3,145,728 bytes, over the limit of 262,144 bytes"
    ok = await say("and now a short one", "--wait", "--json")
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["final_answer"] == "heard: and now a short one"


async def test_the_cli_reads_the_schema_inline_or_from_a_file_and_refuses_a_bad_one(cli, tmp_path):
    from durable_react_agent.client.cli import read_output_schema
    path = tmp_path / "schema.json"
    path.write_text(json.dumps(WEATHER))
    assert read_output_schema(str(path)) == read_output_schema(json.dumps(WEATHER)) == WEATHER
    bad = await cli("start", "hi", "--output-schema", '{"type": "nope"}',
                    extra_env={"TEMPORAL_ADDRESS": "127.0.0.1:1"})
    assert bad.returncode == 2 and "output schema is not usable" in bad.stderr


async def test_the_cli_starts_a_typed_conversation(
        cli, model: ScriptedModelServer, tmp_path):
    schema = tmp_path / "weather.json"
    schema.write_text(json.dumps(WEATHER))
    trigger = script(model, unique("typed-cli"),
                     ScriptedReply(content="Mild, 12 degrees."),
                     ScriptedReply(content='{"city": "Lyon", "celsius": 12}'))
    done = await cli("start", "--wait", "--json", "--output-schema", str(schema), trigger)
    assert done.returncode == 0, done.stderr
    status = json.loads(done.stdout)
    assert status["final_output"] == {"city": "Lyon", "celsius": 12}
    assert status["stop_reason"] == "answered" and model.count(trigger) == 2


async def test_a_childs_approval_surfaces_in_the_parent_and_is_decided_through_it(
        client: Client, agents_queue: str, model: ScriptedModelServer, activity_settings, cli):
    title = unique("child-note")
    parent = delegating(model, "write", "writer", "w1", [
        ScriptedReply(tool_calls=[tool_call("create_note", {"title": title, "body": "b"})]),
        ScriptedReply(content="Saved: {last_tool}")], "Writer said: {last_tool}")
    handle = await start(client, agents_queue, parent)
    waiting = await reaches(handle, "waiting_for_confirmation", timeout_s=30)
    child_id = f"{handle.id}/w1"
    [pending] = waiting.pending_confirmations
    assert (pending.tool, pending.conversation_id) == ("create_note", child_id)
    assert [(c.workflow_id, c.profile, c.status) for c in waiting.children] == [
        (child_id, "writer", "waiting_for_confirmation")]
    described = await handle.describe()
    assert described.typed_search_attributes.get(AGENT_STATUS) == "waiting_for_confirmation"
    metadata = await handle.query("__temporal_workflow_metadata", result_type=WorkflowMetadata)
    assert pending.ref == f"w1/{pending.call_id}"  # the child's call, by its path from here
    assert f"confirm {handle.id} {pending.ref}" in metadata.current_details  # the UI says how

    # The CLI's `confirm PARENT CALL_ID` reaches the child; the decision is recorded there.
    done = await cli("confirm", handle.id, pending.call_id, "--as", "alice",
                     extra_env={"AGENT_TASK_QUEUE": agents_queue})
    assert done.returncode == 0, done.stderr
    status = await settled(handle, timeout_s=30)
    assert status.final_answer.startswith("Writer said: Saved: Created note")
    assert len(note_rows(activity_settings.data_dir, title)) == 1
    kid = client.get_workflow_handle(child_id)
    [decision] = [a.decision for r in await kid.query(ConversationWorkflow.history)
                  for a in r.actions if a.decision]
    assert (decision.approver, decision.approved) == ("alice", True)
    assert not status.pending_confirmations and status.children[0].status == "completed"
    await handle.signal(ConversationWorkflow.end, EndRequest())
    await handle.result()
    await replay(handle, "subagent_approval_parent")  # with the child's status reports
    await replay(kid, "subagent_approval_child")  # a subagent reporting to its parent


async def test_a_models_call_id_never_reaches_a_shell(
        client: Client, task_queue: str, model: ScriptedModelServer, cli):
    """Ids with shell syntax, a slash (a ref's separator) or 5,000 bytes are replaced at intake
    by ids of a safe alphabet; every command the CLI and the Temporal UI show is one command."""
    odd_ids = [SHELL_ID, "a/b", "z" * 5000, "ok_id-1"]
    trigger = script(model, unique("shell-ids"), ScriptedReply(tool_calls=[
        ScriptedToolCall(name="create_note", arguments={"title": unique("t"), "body": str(n)},
                         id=call_id) for n, call_id in enumerate(odd_ids)]),
        ScriptedReply(content="done"))
    handle = await start(client, task_queue, trigger)
    status = await settled(handle)
    ids = [p.call_id for p in status.pending_confirmations]
    assert len(ids) == 4 and "ok_id-1" in ids  # a safe id is kept
    assert all(SAFE_ID_CHARS.issuperset(i) and len(i) <= 64 for i in ids), ids
    shown = (await cli("status", handle.id)).stdout
    metadata = await handle.query("__temporal_workflow_metadata")
    details = metadata.current_details
    commands = [line.split(": ", 1)[1] for line in shown.splitlines()
                if PRINTED.search(line) and ": " in line]
    commands += re.findall(r"`(agent [^`]*)`", details)
    assert len(commands) >= 8, (shown, details)
    for line in commands:
        argv = shlex.split(line.split("   or   ")[0])
        assert argv[:1] == ["agent"] and not any(
            ch in arg for arg in argv for ch in ";|&`$"), line
    await handle.signal(ConversationWorkflow.end)
    await replay(handle, "unsafe_call_ids_replaced")


async def test_limits_shows_an_owner_s_ledger_and_sets_its_limits(
        cli, client: Client, task_queue: str):
    owner = unique("erin")
    none = await cli("limits", owner)
    assert (none.returncode, none.stdout.strip()) == (
        0, f"{owner} has no ledger: no turn of theirs has run under AGENT_OWNER_LIMITS yet")
    refused = await cli("limits", owner, "--turns", "2")
    assert refused.returncode == 1 and "has no ledger" in refused.stderr
    await client.start_workflow(LEDGER_WORKFLOW_TYPE, LedgerState(owner=owner),
                                id=ledger_id(owner), task_queue=task_queue)
    shown = await cli("limits", owner, "--turns", "2", "--tokens", "50000", "--as", "ops")
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.splitlines()[0] == \
        f"owner {owner}: limits running turns 2, daily tokens 50,000"
    assert "set by an admin: running_turns 2, daily_tokens 50000" in shown.stdout
    view = json.loads((await cli("limits", owner, "--json")).stdout)
    assert view["limits"]["running_turns"] == 2 and view["waiting"] == []
    assert (await cli("limits", owner, "--turns", "0")).returncode == 2
    reset = json.loads((await cli("limits", owner, "--reset", "--json")).stdout)
    assert reset["limits"] == {"running_turns": None, "daily_tokens": None, "daily_usd": None}
