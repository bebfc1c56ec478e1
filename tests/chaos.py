"""Chaos: N conversations with approvals while the worker is SIGKILLed every few seconds and the
Temporal dev server is restarted once on the same SQLite file.

    python -m tests.chaos --conversations 100

Each conversation reads the weather, creates a note (approval) and deletes it by title
(approval). It reports completed/N, duplicate notes, non-safe executions without approval and
lost signals; the target is N/N, 0, 0, 0. `tests/test_chaos.py` runs a small version in CI.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass
from datetime import timedelta
from pathlib import Path

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.service import RPCError

from activities.tools.notes import SCHEMA as NOTES_SCHEMA
from scripted_model import (
    Scenario,
    Script,
    ScriptedModelServer,
    ScriptedReply,
    ScriptedToolCall,
)
from tests.devserver import dev_server_command, free_port, worker_env
from workflows.conversation import ConversationWorkflow
from workflows.models import (
    AnswerRequest,
    ConfirmRequest,
    ConversationInput,
    LLMOptions,
)

ROOT = Path(__file__).resolve().parent.parent
_RPC_TIMEOUT = timedelta(seconds=3)
RISKY = {"create_note", "delete_note"}


@dataclass
class ChaosReport:
    conversations: int
    completed: int  # answered with the expected answer: the note created, then deleted
    duplicate_notes: int
    unapproved_executions: int
    lost_signals: int
    worker_kills: int
    server_restarts: int
    seconds: float

    def ok(self) -> bool:
        return (self.completed == self.conversations and self.duplicate_notes == 0
                and self.unapproved_executions == 0 and self.lost_signals == 0)

    def markdown(self) -> str:
        return (
            "| conversations | completed | duplicate notes | unapproved executions | lost signals "
            "| worker kills | server restarts | seconds |\n|---|---|---|---|---|---|---|---|\n"
            f"| {self.conversations} | {self.completed}/{self.conversations} | "
            f"{self.duplicate_notes} | {self.unapproved_executions} | {self.lost_signals} | "
            f"{self.worker_kills} | {self.server_restarts} | {self.seconds:.0f} |"
        )


class Process:
    """A child process, restartable, with its output in a log file."""

    def __init__(self, argv: list[str], env: dict[str, str], log: Path):
        self.argv, self.env, self.log = argv, env, log
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(self.argv, cwd=ROOT, env=self.env, stdout=out,
                                         stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(timeout=30)


async def wait_for_server(address: str, deadline_s: float = 60) -> Client:
    deadline = time.monotonic() + deadline_s
    while True:
        try:
            return await Client.connect(address, data_converter=pydantic_data_converter)
        except RuntimeError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.3)


def scenario(trigger: str, title: str, think_s: float) -> Scenario:
    """`think_s` of model latency per step keeps conversations in flight across kills."""
    def step(name: str, arguments: dict) -> ScriptedReply:
        return ScriptedReply(tool_calls=[ScriptedToolCall(name=name, arguments=arguments)],
                             delay_s=think_s)

    return Scenario(trigger=trigger, replies=[
        step("get_weather", {"location": "Paris"}),
        step("create_note", {"title": title, "body": "{last_tool}"}),
        step("delete_note", {"title": title}),
        ScriptedReply(content="done: {last_tool}", delay_s=think_s),
    ])


def is_expected_answer(answer: str | None, title: str) -> bool:
    """Whether a final answer is the scenario's: the note titled `title` created, then deleted."""
    return bool(answer) and answer.startswith("done: Deleted note #") and answer.endswith(
        f"{title!r}.")


class Approver:
    """Approves every pending call, and answers any question (a duplicate note would ask one)."""

    def __init__(self) -> None:
        self.sent: dict[str, list[str]] = {}  # workflow id -> request ids the server accepted
        self.decided: set[tuple[str, str]] = set()
        self.answers: dict[str, str | None] = {}  # workflow id -> final answer, once settled

    async def tend(self, handle: WorkflowHandle) -> bool:
        """One look at a conversation; True once it is done (answered, or ended otherwise)."""
        status = await handle.query(ConversationWorkflow.status, rpc_timeout=_RPC_TIMEOUT)
        if status.status in ("idle", "completed", "failed"):
            self.answers[handle.id] = status.final_answer
            return True
        question = status.pending_question
        if question is not None and (handle.id, question.call_id) not in self.decided:
            request_id = uuid.uuid4().hex
            await handle.signal(ConversationWorkflow.answer, AnswerRequest(
                request_id=request_id, values=[(question.options or ["yes"])[0]]))
            self.sent.setdefault(handle.id, []).append(request_id)
            self.decided.add((handle.id, question.call_id))
        for pending in status.pending_confirmations:
            if (handle.id, pending.call_id) in self.decided:
                continue
            request_id = uuid.uuid4().hex
            await handle.signal(ConversationWorkflow.confirm, ConfirmRequest(
                request_id=request_id, call_ids=[pending.call_id], approver="chaos"))
            self.sent.setdefault(handle.id, []).append(request_id)
            self.decided.add((handle.id, pending.call_id))
        return False


async def unapproved_executions(handle: WorkflowHandle) -> int:
    """Risky activities scheduled before a confirm that the workflow took (its outcome accepted)
    named their call. A refused confirm approves nothing."""
    converter = pydantic_data_converter.payload_converter
    events = [event async for event in handle.fetch_history_events()]
    confirms = []
    for event in events:
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
            attrs = event.workflow_execution_signaled_event_attributes
            if attrs.signal_name == "confirm":
                [request] = converter.from_payloads(attrs.input.payloads, [ConfirmRequest])
                confirms.append(request)
    taken = set()
    for request in confirms:
        outcome = await _retry(lambda: handle.query(
            ConversationWorkflow.signal_outcome, request.request_id, rpc_timeout=_RPC_TIMEOUT))
        if outcome is not None and outcome.accepted:
            taken.add(request.request_id)
    approved: set[str] = set()
    bad = 0
    for event in events:
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
            attrs = event.workflow_execution_signaled_event_attributes
            if attrs.signal_name == "confirm":
                [request] = converter.from_payloads(attrs.input.payloads, [ConfirmRequest])
                if request.request_id in taken:
                    approved.update(request.call_ids)
        elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            attrs = event.activity_task_scheduled_event_attributes
            if attrs.activity_type.name in RISKY:
                payload = json.loads(attrs.input.payloads[0].data)
                bad += payload["call_id"] not in approved
    return bad


async def run_chaos(
    conversations: int, kill_every: tuple[float, float] = (2.0, 5.0), timeout_s: float = 600,
    seed: int | None = None, think_s: float = 1.5,
) -> ChaosReport:
    rng = random.Random(seed)
    work = Path(tempfile.mkdtemp(prefix="chaos-"))
    port = free_port()
    address = f"127.0.0.1:{port}"
    server = Process(dev_server_command(work / "chaos.db", port), dict(os.environ),
                     work / "server.log")
    model = ScriptedModelServer().start()
    queue = "chaos"
    worker = Process([sys.executable, "-m", "worker"],
                     worker_env(address, queue, model.base_url, work / "data"), work / "worker.log")
    _count_inserts(work / "data")
    kills = restarts = 0
    started = time.monotonic()
    try:
        server.start()
        client = await wait_for_server(address)
        worker.start()
        titles = [f"chaos-{i}-{uuid.uuid4().hex[:6]}" for i in range(conversations)]
        model.set_script(Script(scenarios=[scenario(f"[{t}]", t, think_s) for t in titles]))
        llm = LLMOptions(heartbeat_timeout_s=3, max_retry_interval_s=2, max_attempts=50)
        handles = [
            await client.start_workflow(
                ConversationWorkflow.run,
                ConversationInput(prompt=f"[{t}] weather, then note it, then delete it", llm=llm),
                id=f"chaos-{t}", task_queue=queue,
            )
            for t in titles
        ]
        approver = Approver()
        done: set[str] = set()
        next_kill = time.monotonic() + rng.uniform(*kill_every)
        restart_at = started + 6
        while len(done) < conversations and time.monotonic() - started < timeout_s:
            now = time.monotonic()
            if restart_at and now >= restart_at:
                server.kill(signal.SIGTERM)
                server.start()
                client = await wait_for_server(address)
                handles = [client.get_workflow_handle(h.id) for h in handles]
                restarts, restart_at = restarts + 1, 0
            if now >= next_kill:
                worker.kill()
                worker.start()
                kills += 1
                next_kill = now + rng.uniform(*kill_every)
            open_handles = [h for h in handles if h.id not in done]
            looks = await asyncio.gather(*(approver.tend(h) for h in open_handles),
                                         return_exceptions=True)
            for handle, finished in zip(open_handles, looks):
                if finished is True:
                    done.add(handle.id)
                elif isinstance(finished, BaseException) and not isinstance(finished, RPCError):
                    raise finished  # RPCError: no worker or no server right now; look again
            await asyncio.sleep(0.2)
        worker.kill()
        worker.start()  # queries below need a worker
        unapproved = sum([await unapproved_executions(h) for h in handles])
        lost = 0
        for handle in handles:
            for request_id in approver.sent.get(handle.id, []):
                outcome = await _retry(lambda: handle.query(
                    ConversationWorkflow.signal_outcome, request_id, rpc_timeout=_RPC_TIMEOUT))
                lost += outcome is None
        answered = sum(is_expected_answer(approver.answers.get(h.id), t)
                       for t, h in zip(titles, handles))
        return ChaosReport(
            conversations=conversations, completed=answered,
            duplicate_notes=_duplicate_notes(work / "data"),
            unapproved_executions=unapproved, lost_signals=lost, worker_kills=kills,
            server_restarts=restarts, seconds=time.monotonic() - started,
        )
    finally:
        worker.kill(signal.SIGTERM)
        server.kill(signal.SIGTERM)
        model.stop()


async def _retry(call, attempts: int = 120):
    """A query, again until a worker answers it: after the kills, every conversation replays, and
    a task that times out under that load leaves queries refused for a while."""
    for i in range(attempts):
        try:
            return await call()
        except RPCError:
            if i == attempts - 1:
                raise
            await asyncio.sleep(1.0)


def _count_inserts(data_dir: Path) -> None:
    """Log every insert into the notes table, so a duplicate write shows even after a delete."""
    data_dir.mkdir(parents=True)
    with sqlite3.connect(data_dir / "notes.sqlite3") as conn:
        conn.executescript(NOTES_SCHEMA + """;
            CREATE TABLE note_inserts (title TEXT);
            CREATE TRIGGER count_inserts AFTER INSERT ON notes
            BEGIN INSERT INTO note_inserts VALUES (NEW.title); END;
        """)


def _duplicate_notes(data_dir: Path) -> int:
    with sqlite3.connect(data_dir / "notes.sqlite3") as conn:
        rows = conn.execute("SELECT COUNT(*) FROM note_inserts GROUP BY title").fetchall()
    return sum(n - 1 for (n,) in rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--conversations", "-n", type=int, default=100)
    parser.add_argument("--timeout", type=float, default=900)
    parser.add_argument("--seed", type=int)
    args = parser.parse_args()
    report = asyncio.run(run_chaos(args.conversations, timeout_s=args.timeout, seed=args.seed))
    print(report.markdown())
    print(json.dumps(asdict(report)))
    sys.exit(0 if report.ok() else 1)


if __name__ == "__main__":
    main()
