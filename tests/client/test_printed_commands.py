"""Every command the product prints for a person to run, run as printed.

The commands are printed by `status` (`client.render.render_status`, which `start --wait` prints
too), by `watch`, and in the Temporal UI's details (`__temporal_workflow_metadata`). Real
conversations are driven into each state that prints some: calls waiting for approval (of the
conversation's own, and of a subagent's, shown in its parent), each kind of question (an MCP
server's included), and idle. Each printed line is split as a POSIX shell splits it, `python`
being this venv's, and only the placeholders the product marks as such (`rules.commands.TEXT`
and `REASON`, `client.render.ANSWER_PLACEHOLDERS`) are filled in. It must exit 0 and do what it
says. Every form of command printed (its conversation, calls and placeholders put as names) is
run at least once.

A conversation that has ended shows nothing pending, and prints no command."""

from __future__ import annotations

import asyncio
import getpass
import json
import os
import shlex
import subprocess
import sys
import threading
import time
from collections.abc import Callable

import httpx
import pytest_asyncio
from temporalio.client import Client, WorkflowHandle

from durable_react_agent.activities.mcp import McpToolbox, load_mcp_config
from durable_react_agent.activities.settings import ActivitySettings
from durable_react_agent.client.render import ANSWER_PLACEHOLDERS, render_status
from durable_react_agent.contract import ConversationStatus, EndRequest
from durable_react_agent.rules.commands import REASON, TEXT
from durable_react_agent.testing import ScriptedModelServer, ScriptedReply, ScriptedToolCall
from durable_react_agent.worker.app import build_worker
from durable_react_agent.workflows.conversation import ConversationWorkflow
from tests.api_support import ROOT
from tests.fake_tools import registry_with_test_tools
from tests.generated import PRINTED, printed_commands
from tests.helpers import note_rows, script, settled, start, tool_call, unique
from tests.mcp_support import asking_config
from tests.subagent_support import delegating

PLACEHOLDERS = {*shlex.split(TEXT), *shlex.split(REASON)[1:],
                *(p for kind in ANSWER_PLACEHOLDERS.values() for p in kind)}
ME = getpass.getuser()  # whom the CLI's decisions and answers name


def create(title: str) -> ScriptedToolCall:
    return tool_call("create_note", {"title": title, "body": "b"})


def ask(tool: str, message: str, *options: str) -> ScriptedReply:
    args = {"message": message, **({"options": list(options)} if options else {})}
    return ScriptedReply(tool_calls=[tool_call(tool, args)])


class Printed:
    """What the product printed for one conversation, and which forms of it were run."""

    def __init__(self, client: Client, cli, wid: str, env: dict[str, str]) -> None:
        self.client, self.cli, self.wid = client, cli, wid
        self.forms: set[tuple[str, ...]] = set()
        self.run_forms: set[tuple[str, ...]] = set()
        self.refs: set[str] = set()  # of the calls and questions shown
        self.watch = subprocess.Popen([sys.executable, "-m", "durable_react_agent.client", "watch", wid], cwd=ROOT,
                                      env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True)
        self.watched: list[str] = []
        threading.Thread(target=self._read_watch, daemon=True).start()

    def _read_watch(self) -> None:
        for line in self.watch.stdout:  # type: ignore[union-attr]
            self.watched.append(line.rstrip("\n"))

    async def settles(self, shown: Callable[[ConversationStatus], bool],
                      timeout_s: float = 60) -> ConversationStatus:
        """The status once `shown` holds of it."""
        handle = self.client.get_workflow_handle(self.wid)
        deadline = time.monotonic() + timeout_s
        while not shown(status := await handle.query(ConversationWorkflow.status)):
            assert time.monotonic() < deadline, f"not reached in {timeout_s}s: {status}"
            await asyncio.sleep(0.1)
        return status

    async def shown(self, status: ConversationStatus, *watched: str,
                    cli_text: str | None = None) -> dict[str, list[str]]:
        """The commands printed now: by `status` (`cli_text`, else as it renders `status`),
        in the UI's details, and by `watch` once it has printed each of `watched`."""
        text = render_status(status) if cli_text is None else cli_text
        details = await details_of(self.client.get_workflow_handle(self.wid))
        deadline = time.monotonic() + 60
        while not all(any(w in line for line in self.watched) for w in watched):
            assert time.monotonic() < deadline, f"watch printed no {watched}: {self.watched}"
            await asyncio.sleep(0.1)
        found = {"status": printed_commands(text, ""), "details": printed_commands("", details),
                 "watch": [line[m.start():] for line in self.watched
                           if (m := PRINTED.search(line))]}
        self.refs |= {p.ref or p.call_id for p in status.pending_confirmations}
        if status.pending_question is not None:
            self.refs.add(status.pending_question.ref or status.pending_question.call_id)
        for commands in found.values():
            self.forms |= {self.form(c) for c in commands}
        return found

    def form(self, command: str) -> tuple[str, ...]:
        """A command with its conversation, calls, edited arguments and placeholders as names."""
        words, named = shlex.split(command), []
        for before, word in zip(["", *words], words):
            if word == self.wid:
                named.append("ID")
            elif word in self.refs:
                named.append("CHILD_CALL" if "/" in word else "CALL")
            elif before == "--args":
                named.append("ARGS")
            elif word in PLACEHOLDERS:
                named.append("VALUE")
            else:
                named.append(word)
        return tuple(named)

    async def run(self, command: str, *values: str) -> subprocess.CompletedProcess:
        """Run a printed command as printed, its placeholders (one run of them) filled with
        `values`; it must exit 0."""
        words = shlex.split(command)
        marked = [n for n, word in enumerate(words) if word in PLACEHOLDERS]
        assert bool(marked) == bool(values), (command, values)
        if marked:
            assert marked == list(range(marked[0], marked[-1] + 1)), command
            words[marked[0]:marked[-1] + 1] = values
        assert words[0] == "agent", command
        done = await self.cli(*words[1:])
        assert done.returncode == 0, (command, words, done.stdout, done.stderr)
        self.run_forms.add(self.form(command))
        return done

    async def finished(self) -> None:
        """Every form printed was run (and `watch`, stopped, had no error)."""
        self.watch.terminate()
        _, err = await asyncio.to_thread(self.watch.communicate, timeout=60)
        assert "Traceback" not in err, err
        assert self.forms - self.run_forms == set(), "printed, never run"


async def details_of(handle: WorkflowHandle) -> str:
    """The Temporal UI's details of a conversation, as the UI reads them."""
    return (await handle.query("__temporal_workflow_metadata")).current_details


def one(commands: list[str], *words: str, but: tuple[str, ...] = ()) -> str:
    """The printed command that holds each of `words` as a word, and none of `but`."""
    [found] = {c for c in commands
               if all(w in shlex.split(c) for w in words) and not set(but) & set(shlex.split(c))}
    return found


def decided(status: ConversationStatus) -> dict[str, tuple[bool, str, str | None]]:
    return {d.call_id: (d.approved, d.approver, d.reason) for d in status.decisions}


def cli_env(temporal_address: str, task_queue: str) -> dict[str, str]:
    """The environment of the `cli` fixture's processes."""
    return {**os.environ, "TEMPORAL_ADDRESS": temporal_address, "AGENT_TASK_QUEUE": task_queue}


async def test_each_command_status_watch_and_the_ui_print_runs_as_printed(
        cli, client: Client, model: ScriptedModelServer, temporal_address: str, task_queue: str,
        activity_settings: ActivitySettings):
    """Calls to approve, edit, reject, and all at once; each kind of question; idle; and, once
    ended with a question open, nothing pending and no command."""
    title = unique("printed")
    trigger = script(
        model, unique("printed"),
        ScriptedReply(tool_calls=[create(f"{title} 1"), tool_call("delete_note", {"note_id": 0}),
                                  create(f"{title} 2"), create(f"{title} 3")]),
        ask("ask_input", "Your name?"),
        ask("ask_choice", "Colour?", "red", "blue"),
        ask("ask_multi_choice", "Days?", "mon", "tue", "wed"),
        ask("ask_confirm", "Sure?"),
        ScriptedReply(content="Done: {last_tool}"),
        ask("ask_input", "Anything else?"),
    )
    wid = unique("printed-conv")
    started = await cli("start", "--id", wid, "--wait", trigger)
    assert started.returncode == 0, started.stderr
    p = Printed(client, cli, wid, cli_env(temporal_address, task_queue))

    # Four calls wait: one approved, one rejected, one edited, each as printed; then the rest
    # (the fourth) all at once.
    status = await p.settles(lambda s: len(s.pending_confirmations) == 4)
    first, delete, second, third = (c.call_id for c in status.pending_confirmations)
    shown = await p.shown(status, f"call {third}", cli_text=started.stdout)
    await asyncio.gather(
        p.run(one(shown["status"], "confirm", first, but=("--args",))),
        p.run(one(shown["watch"], "reject", delete), "not this one"),
        p.run(one(shown["status"], "confirm", second, "--args")))
    await p.settles(lambda s: len(s.decisions) == 3)
    await p.run(one(shown["status"], "--all"))
    status = await p.settles(lambda s: len(s.decisions) == 4)
    assert decided(status) == {first: (True, ME, None), delete: (False, ME, "not this one"),
                               second: (True, ME, None), third: (True, ME, None)}
    await p.settles(lambda s: s.status == "waiting_for_input")
    assert [len(note_rows(activity_settings.data_dir, f"{title} {n}")) for n in (1, 2, 3)] \
        == [1, 1, 1]

    # Each kind of question, answered by the command of one place or another.
    for kind, where, values, taken in (
            ("input", "status", ["Ada"], "Ada"),
            ("choice", "watch", ["blue"], "blue"),
            ("multi_choice", "status", ["mon", "wed"], '["mon", "wed"]'),
            ("confirm", "details", ["yes"], "yes")):
        status = await p.settles(lambda s: s.pending_question is not None
                                 and s.pending_question.kind == kind)
        question = status.pending_question.call_id
        shown = await p.shown(status, f"--call-id {question}")
        await p.run(one(shown[where], "answer", question), *values)
        await p.settles(lambda s: s.pending_question is None
                        or s.pending_question.call_id != question)
        answers = [r for r in await client.get_workflow_handle(wid).query(
            ConversationWorkflow.history) if r.kind == "answer"]
        assert (answers[-1].by, answers[-1].text) == (ME, taken)

    # Idle: the next message, then the end.
    status = await p.settles(lambda s: s.status == "idle")
    assert status.final_answer == "Done: yes"
    shown = await p.shown(status)
    await p.run(one(shown["status"], "say"), "and now?")
    status = await p.settles(lambda s: s.turn == 2 and s.status == "waiting_for_input")
    await p.shown(status, "Anything else?")
    await p.run(one(shown["details"], "end"))

    # Ended with its question open: nothing pending, no command.
    final = await p.settles(lambda s: s.status == "completed")
    assert final.stop_reason == "ended"
    assert (final.pending_question, final.pending_confirmations) == (None, [])
    text = render_status(final)
    assert not PRINTED.search(text) and "question" not in text, text
    await p.finished()


@pytest_asyncio.fixture(scope="module")
async def asking_queue(client: Client, activity_settings: ActivitySettings,
                       tmp_path_factory) -> str:
    """A worker with the MCP server that asks back (`tests/mcp_servers/asking_server.py`)."""
    config, _ = asking_config(tmp_path_factory.mktemp("asking"), timeout_s=20)
    queue = unique("printed-asking")
    async with (McpToolbox(load_mcp_config(config, {})) as toolbox,
                httpx.AsyncClient(timeout=10) as http,
                build_worker(client, queue, activity_settings, http, registry_with_test_tools(),
                             mcp=toolbox)):
        yield queue


async def test_an_mcp_servers_question_is_answered_by_the_command_printed(
        cli, client: Client, model: ScriptedModelServer, temporal_address: str,
        asking_queue: str):
    """Its answer is a JSON object, shown with its schema; once ended with a call waiting,
    nothing is pending and no command is printed."""
    trigger = script(model, unique("printed-mcp"),
                     ScriptedReply(tool_calls=[tool_call("asking__book", {"city": "Lyon"})]),
                     ScriptedReply(tool_calls=[create(unique("after-lyon"))]))
    handle = await start(client, asking_queue, trigger)
    p = Printed(client, cli, handle.id, cli_env(temporal_address, asking_queue))
    status = await p.settles(lambda s: s.status == "waiting_for_input")
    shown = await p.shown(status, "--call-id")
    assert '"nights"' in render_status(status)  # what the answer must hold
    await p.run(one(shown["status"], "answer"), '{"nights": 3}')
    await p.settles(lambda s: s.status == "waiting_for_confirmation")
    assert "booked 3 nights in Lyon" in json.dumps(
        [m.model_dump(mode="json") for m in await handle.query(ConversationWorkflow.messages)])

    # the first test runs what a call waiting for approval prints; this one ends it
    await handle.signal(ConversationWorkflow.end, EndRequest())
    final = await p.settles(lambda s: s.status == "completed")
    assert (final.pending_question, final.pending_confirmations) == (None, [])
    assert not PRINTED.search(render_status(final))
    await p.finished()


async def test_a_subagents_calls_and_question_are_decided_from_the_parent_as_printed(
        cli, client: Client, model: ScriptedModelServer, temporal_address: str,
        agents_queue: str, activity_settings: ActivitySettings):
    title = unique("printed-child")
    parent = delegating(model, "printed", "writer", "w1", [
        ScriptedReply(tool_calls=[create(f"{title} {n}") for n in (1, 2, 3, 4)]),
        ask("ask_confirm", "Keep them?"),
        ScriptedReply(content="kept: {last_tool}"),
    ], parent_answer="child says {last_tool}")
    handle = await start(client, agents_queue, parent)
    p = Printed(client, cli, handle.id, cli_env(temporal_address, agents_queue))
    child = client.get_workflow_handle(f"{handle.id}/w1")

    status = await p.settles(lambda s: len(s.pending_confirmations) == 4)
    refs = [c.ref for c in status.pending_confirmations]
    assert all(ref.startswith("w1/") for ref in refs)
    shown = await p.shown(status, f"call {refs[3]}")
    await asyncio.gather(
        p.run(one(shown["details"], "confirm", refs[0], but=("--args",))),
        p.run(one(shown["status"], "confirm", refs[1], "--args")),
        p.run(one(shown["watch"], "reject", refs[2]), "no third"))
    await p.settles(lambda s: len(s.pending_confirmations) == 1)
    await p.run(one(shown["status"], "--all"))
    status = await p.settles(lambda s: s.pending_question is not None)
    ref = status.pending_question.ref
    shown = await p.shown(status, f"--call-id {ref}")
    await p.run(one(shown["status"], "answer", ref), "yes")
    final = await p.settles(lambda s: s.status == "idle")
    assert final.final_answer.startswith("child says kept: yes"), final
    own = await child.query(ConversationWorkflow.status)
    assert decided(own) == {ref.split("/")[1]: (ref != refs[2], ME, None if ref != refs[2]
                                                 else "no third") for ref in refs}
    assert [len(note_rows(activity_settings.data_dir, f"{title} {n}")) for n in (1, 2, 3, 4)] \
        == [1, 1, 0, 1]
    await handle.signal(ConversationWorkflow.end, EndRequest())  # idle's: the first test
    await p.finished()



async def ended_while_waiting(client: Client, model: ScriptedModelServer, task_queue: str,
                              reply: ScriptedReply) -> WorkflowHandle:
    """A conversation ended while its first step waits for a person, once it has completed."""
    handle = await start(client, task_queue, script(model, unique("ended-waiting"), reply))
    await settled(handle)
    await handle.signal(ConversationWorkflow.end, EndRequest())
    await handle.result()
    return handle


async def test_an_ended_conversation_shows_nothing_pending_and_prints_no_command(
        client: Client, model: ScriptedModelServer, task_queue: str):
    for reply in (ask("ask_input", "Name?"), ScriptedReply(tool_calls=[create("never")])):
        handle = await ended_while_waiting(client, model, task_queue, reply)
        status = await handle.query(ConversationWorkflow.status)
        assert (status.status, status.stop_reason) == ("completed", "ended")
        assert (status.pending_question, status.pending_confirmations) == (None, [])
        assert not PRINTED.search(render_status(status))


async def test_an_ended_conversations_ui_details_print_no_command(
        client: Client, model: ScriptedModelServer, task_queue: str):
    handle = await ended_while_waiting(client, model, task_queue, ask("ask_input", "Name?"))
    details = await details_of(handle)
    assert "**Stop reason:** ended" in details
    assert not PRINTED.search(details), details
