"""The example pack, examples/ticket_tracker: its tools as plain functions, its installation with
pip, whose entry point brings the tools to a worker without AGENT_TOOLS, and one approved
create_ticket end to end that opens exactly one ticket.

The pack is installed only into a temporary directory, never into the venv the tests run in:
there every worker of every other test would load its tools."""

from __future__ import annotations

import importlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys
from importlib.metadata import distributions
from pathlib import Path
from types import ModuleType

import pytest
from temporalio.client import Client

from durable_react_agent import NeedsInput, ToolContext, ToolError
from durable_react_agent.activities.settings import ActivitySettings
from durable_react_agent.contract import ConfirmRequest
from durable_react_agent.testing import ScriptedModelServer, ScriptedReply
from durable_react_agent.testing.script import load_script
from durable_react_agent.workflows.conversation import ConversationWorkflow
from tests.devserver import worker_env
from tests.fake_tools import NO_HTTP
from tests.helpers import reaches, script, settled, start, tool_call, unique
from tests.processes import WorkerProcess

ROOT = Path(__file__).resolve().parents[2]
PACK = ROOT / "examples" / "ticket_tracker"
DISTRIBUTION = "acme-ticket-tracker"


@pytest.fixture
def tickets(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """The pack's tools module, imported from its source tree."""
    monkeypatch.syspath_prepend(str(PACK / "src"))
    monkeypatch.delenv("TICKETS_DB", raising=False)
    return importlib.import_module("acme_tickets.tools")


def context(data_dir: Path, key: str = "key-1", answer: str | None = None) -> ToolContext:
    """A call's context as a worker gives it: `key` is the same on every attempt of one call."""
    return ToolContext(settings=ActivitySettings(data_dir=data_dir), http=NO_HTTP,
                       call_id="call_0", idempotency_key=key, answer=answer)


def rows(db: Path, table: str = "tickets") -> list[tuple]:
    with sqlite3.connect(db) as conn:
        return conn.execute(f"SELECT * FROM {table} ORDER BY 1").fetchall()


def test_the_tools_are_described_by_their_docstrings_and_typed_by_their_hints(tickets):
    specs = [tickets.list_tickets, tickets.create_ticket, tickets.update_ticket,
             tickets.delete_ticket]
    assert [(s.name, s.risk, s.keyed) for s in specs] == [
        ("list_tickets", "safe", False), ("create_ticket", "sensitive", True),
        ("update_ticket", "sensitive", True), ("delete_ticket", "destructive", True)]
    assert tickets.create_ticket.description == "Open a new ticket."
    create = tickets.create_ticket.definition().parameters
    assert create["required"] == ["title"]
    assert create["properties"]["title"]["description"] == "what is wrong or wanted, in a line"
    assert create["properties"]["priority"]["default"] == "normal"
    assert create["$defs"]["Priority"]["enum"] == ["low", "normal", "high", "urgent"]
    status = tickets.update_ticket.definition().parameters["properties"]["status"]
    assert status["anyOf"][0]["enum"] == ["open", "in_progress", "closed"]
    assert status["description"] == "its new status"


def test_a_create_retried_under_its_key_opens_the_ticket_once(tickets, tmp_path: Path):
    first = tickets.create_ticket("Printer on fire", context(tmp_path, "key-1"),
                                  priority=tickets.Priority.URGENT)
    retried = tickets.create_ticket("Printer on fire", context(tmp_path, "key-1"),
                                    priority=tickets.Priority.URGENT)
    other = tickets.create_ticket("Printer on fire", context(tmp_path, "key-2"))
    assert retried == first and (first.id, first.status, first.priority.value) == (1, "open",
                                                                                    "urgent")
    assert other.id == 2  # another call, another ticket
    assert [r[:2] for r in rows(tmp_path / "tickets.sqlite3")] == [(1, "Printer on fire"),
                                                                  (2, "Printer on fire")]


def test_list_searches_by_status_assignee_and_text_most_urgent_first(tickets, tmp_path: Path):
    for n, (title, priority, assignee) in enumerate([
        ("VPN drops every hour", "normal", "ann"),
        ("Coffee machine at 100% descaling", "low", None),
        ("Payroll export fails", "urgent", "bob"),
        ("VPN client outdated", "high", "ann"),
    ]):
        tickets.create_ticket(title, context(tmp_path, f"key-{n}"), assignee=assignee,
                              priority=tickets.Priority(priority))
    tickets.update_ticket(3, context(tmp_path, "close"), status="closed")

    def titles(**filters) -> list[str]:
        return [t.title for t in tickets.list_tickets(context(tmp_path), **filters)]

    assert titles() == ["Payroll export fails", "VPN client outdated", "VPN drops every hour",
                        "Coffee machine at 100% descaling"]
    assert titles(status="open", assignee="ann") == ["VPN client outdated", "VPN drops every hour"]
    assert titles(text="vpn", limit=1) == ["VPN client outdated"]
    assert titles(text="100%") == ["Coffee machine at 100% descaling"]  # taken literally
    assert titles(text="0%d") == []
    assert titles(status="closed") == ["Payroll export fails"]


def test_an_update_retried_under_its_key_does_not_undo_a_later_one(tickets, tmp_path: Path):
    tickets.create_ticket("VPN drops", context(tmp_path, "create"))
    closed = tickets.update_ticket(1, context(tmp_path, "close"), status="closed", assignee="ann")
    assert (closed.status, closed.assignee) == ("closed", "ann")
    reopened = tickets.update_ticket(1, context(tmp_path, "reopen"), status="open", assignee="")
    assert (reopened.status, reopened.assignee) == ("open", None)  # "" unassigns
    # A late retry of the first update answers what it did then, and changes nothing now.
    retried = tickets.update_ticket(1, context(tmp_path, "close"), status="closed", assignee="ann")
    assert retried == closed
    [now] = tickets.list_tickets(context(tmp_path))
    assert now == reopened


def test_what_the_model_can_fix_is_a_tool_error(tickets, tmp_path: Path):
    with pytest.raises(ToolError, match="there is no ticket #7"):
        tickets.update_ticket(7, context(tmp_path), status="closed")
    with pytest.raises(ToolError, match="nothing to change"):
        tickets.update_ticket(7, context(tmp_path))
    with pytest.raises(ToolError, match="there is no ticket #7"):
        tickets.delete_ticket(context(tmp_path), ticket_id=7)
    with pytest.raises(ToolError, match="no ticket's title contains 'printer'"):
        tickets.delete_ticket(context(tmp_path), title_contains="printer")
    assert rows(tmp_path / "tickets.sqlite3", "changes") == []  # a failed call records nothing


def test_delete_asks_which_ticket_when_that_is_not_clear(tickets, tmp_path: Path):
    for n, title in enumerate(["Printer on fire", "Printer out of toner", "VPN drops"]):
        tickets.create_ticket(title, context(tmp_path, f"key-{n}"))

    with pytest.raises(NeedsInput) as asked:
        tickets.delete_ticket(context(tmp_path, "del"), title_contains="printer")
    question = asked.value.question
    assert (question.kind, question.message) == (
        "choice", "2 tickets' titles contain 'printer'. Which one should be deleted?")
    assert question.options == ["#2 Printer out of toner (open, normal)",
                                "#1 Printer on fire (open, normal)"]
    with pytest.raises(ToolError, match="names none of the tickets offered"):
        tickets.delete_ticket(context(tmp_path, "del", answer="#3 VPN drops"),
                              title_contains="printer")
    answered = context(tmp_path, "del", answer=question.options[1])
    assert tickets.delete_ticket(answered, title_contains="printer") == (
        "Deleted ticket #1 'Printer on fire'.")
    assert tickets.delete_ticket(answered, title_contains="printer") == (  # a retry
        "Deleted ticket #1 'Printer on fire'.")
    assert tickets.delete_ticket(context(tmp_path, "del-2"), title_contains="PRINTER") == (
        "Deleted ticket #2 'Printer out of toner'.")  # the only match left: no question

    with pytest.raises(NeedsInput) as unnamed:  # nothing named: always ask
        tickets.delete_ticket(context(tmp_path, "del-3"))
    assert unnamed.value.question.options == ["#3 VPN drops (open, normal)"]
    assert [r[1] for r in rows(tmp_path / "tickets.sqlite3")] == ["VPN drops"]


def test_tickets_db_says_where_the_database_is(tickets, tmp_path: Path, monkeypatch):
    monkeypatch.setenv("TICKETS_DB", str(tmp_path / "team" / "tracker.db"))
    tickets.create_ticket("VPN drops", context(tmp_path / "data"))
    assert [r[1] for r in rows(tmp_path / "team" / "tracker.db")] == ["VPN drops"]
    assert not (tmp_path / "data").exists()


def test_the_offline_script_of_the_readme_calls_the_tools_as_they_are(tickets):
    specs = {s.name: s for s in (tickets.list_tickets, tickets.create_ticket,
                                 tickets.update_ticket, tickets.delete_ticket)}
    script = load_script(PACK / "offline-model.json")
    calls = [c for s in script.scenarios for reply in s.replies for c in reply.tool_calls]
    assert sorted(c.name for c in calls) == sorted(specs)
    for call in calls:
        specs[call.name].args_model.model_validate(call.arguments)


@pytest.fixture(scope="module")
def installed_pack(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory holding the pack as `pip install` leaves it, offline. It is built from a copy,
    because pip builds in the source tree and leaves build/ and *.egg-info there."""
    assert DISTRIBUTION not in {d.metadata["Name"] for d in distributions()}, (
        "the pack is installed in the tests' venv, so every worker there loads its tools: "
        f"pip uninstall {DISTRIBUTION}")
    home = tmp_path_factory.mktemp("pack")
    source = home / "source"
    shutil.copytree(PACK, source,
                    ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    done = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
         "--no-index", "--no-deps", "--no-build-isolation", "--target", str(home / "site"),
         str(source)],
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert done.returncode == 0, ("an offline build needs setuptools>=70.1 in the venv (the dev "
                                  f"extra; `make install`). pip said:\n{done.stderr}")
    return home / "site"


def with_pack(installed_pack: Path, env: dict[str, str]) -> dict[str, str]:
    """`env` with the pack importable, and no AGENT_TOOLS: only its entry point names it."""
    paths = [str(installed_pack), *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))]
    return {k: v for k, v in env.items() if k not in ("AGENT_TOOLS", "AGENT_BUILTIN_TOOLS")} | {
        "PYTHONPATH": os.pathsep.join(paths)}


FIND_TOOLS = """
import json
from durable_react_agent.activities.settings import ActivitySettings
from durable_react_agent.activities.tools.loader import sources
from durable_react_agent.worker.app import tool_registry
print(json.dumps({
    "sources": [source for source, _ in sources([])],
    "tools": [[d.name, d.risk, d.keyed] for d in
              tool_registry(ActivitySettings.from_env()).definitions()],
}))
"""


def test_installed_with_pip_the_pack_brings_its_tools_without_agent_tools(installed_pack: Path):
    assert sorted(p.name for p in installed_pack.iterdir()) == [
        "acme_ticket_tracker-0.1.0.dist-info", "acme_tickets"]
    done = subprocess.run([sys.executable, "-c", FIND_TOOLS], cwd=ROOT, timeout=60,
                          env=with_pack(installed_pack, dict(os.environ)),
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.splitlines()[-1])
    assert found["sources"] == [f"entry point tickets = acme_tickets.tools of {DISTRIBUTION}"]
    assert found["tools"] == [
        ["get_weather", "safe", False], ["list_notes", "safe", False],
        ["create_note", "sensitive", True], ["delete_note", "destructive", True],
        ["remember", "sensitive", True], ["recall", "safe", False],
        ["forget", "sensitive", True], ["list_tickets", "safe", False], ["create_ticket", "sensitive", True],
        ["update_ticket", "sensitive", True], ["delete_ticket", "destructive", True]]


async def test_an_approved_create_ticket_opens_exactly_one_ticket(
    client: Client, temporal_address: str, model: ScriptedModelServer, tmp_path: Path,
    installed_pack: Path,
):
    """A worker with the pack installed and no AGENT_TOOLS: the model's create_ticket waits for a
    human, nothing is written until then, and the approved call opens one ticket."""
    db = tmp_path / "tickets.sqlite3"
    queue = unique("tickets")
    env = with_pack(installed_pack, worker_env(temporal_address, queue, model.base_url,
                                               tmp_path / "data", TICKETS_DB=str(db)))
    args = {"title": "Printer on fire", "priority": "urgent"}
    trigger = script(model, unique("ticket"),
                     ScriptedReply(tool_calls=[tool_call("create_ticket", args)]),
                     ScriptedReply(content="{last_tool}"))
    worker = WorkerProcess(env, tmp_path)
    worker.start()
    try:
        handle = await start(client, queue, trigger)
        [pending] = (await reaches(handle, "waiting_for_confirmation", timeout_s=60)
                     ).pending_confirmations
        assert (pending.tool, pending.risk, pending.args) == ("create_ticket", "sensitive", args)
        assert not db.exists(), "it ran before anyone approved it"
        await handle.signal(ConversationWorkflow.confirm,
                            ConfirmRequest(call_ids=[pending.call_id], approver="ann"))
        status = await settled(handle, timeout_s=60)
    finally:
        worker.stop()
    assert status.status == "idle"
    ticket = json.loads(status.final_answer)
    assert (ticket["id"], ticket["title"], ticket["priority"], ticket["status"]) == (
        1, "Printer on fire", "urgent", "open")
    assert [r[:2] for r in rows(db)] == [(1, "Printer on fire")]
    assert len(rows(db, "changes")) == 1
    assert f"entry point tickets = acme_tickets.tools of {DISTRIBUTION}" in worker.log(1)
