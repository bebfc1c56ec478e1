"""Chaos: N conversations with approvals while the worker is SIGKILLed every few seconds of its
serving and the Temporal dev server is restarted once on the same SQLite file.

    python -m tests.chaos --conversations 100 [--cpu-load 2]

Each conversation reads the weather, creates a note (approval) and deletes it by title
(approval). It reports completed/N, duplicate notes, non-safe executions without approval, lost
signals, conversations whose history their own code cannot replay and final checks that got no
answer; the target is N/N, 0, 0, 0, 0, 0. It also counts failed queries, which are never fatal:
most are a worker or the server being down at the time. `tests/e2e/test_chaos.py` runs a small
version in CI.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import timedelta
from pathlib import Path

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle, WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.service import RPCError

from durable_react_agent.activities.tools.notes import SCHEMA as NOTES_SCHEMA
from durable_react_agent.contract import (
    AnswerRequest,
    ConfirmRequest,
    ConversationInput,
    LLMOptions,
)
from durable_react_agent.contract.owner import ANONYMOUS, LEDGER_QUERY, LedgerView, ledger_id
from durable_react_agent.testing import (
    Scenario,
    Script,
    ScriptedModelServer,
    ScriptedReply,
    ScriptedToolCall,
)
from durable_react_agent.workflows.conversation import ConversationWorkflow
from tests.devserver import dev_server_command, free_port, worker_env
from tests.helpers import REPLAYER, keep_history, run_histories
from tests.timer_ids import recorded_timers, timers_started

ROOT = Path(__file__).resolve().parent.parent
_RPC_TIMEOUT = timedelta(seconds=3)
RISKY = {"create_note", "delete_note"}
# A conversation whose queries fail other than for want of a worker or server (its workflow task
# fails, as on a nondeterminism error) for this long is not waited for any more.
GIVE_UP_AFTER_S = 60.0


@dataclass
class ChaosReport:
    conversations: int
    completed: int  # answered with the expected answer: the note created, then deleted
    duplicate_notes: int
    unapproved_executions: int
    lost_signals: int
    histories_not_replaying: int  # conversations with a run that their own code cannot replay
    unanswered_checks: int  # final queries and history fetches that never answered
    failed_queries: int  # queries, signals and fetches that raised, each attempt counted
    worker_kills: int
    server_restarts: int
    seconds: float
    worker_start_s: float | None = None  # the median, from its process to "worker started"
    cpu_load: int = 0  # busy-loop processes running beside it
    query_errors: dict[str, int] = field(default_factory=dict)  # failed_queries by error type
    kept_failed: str | None = None  # where the runs that do not replay were written
    # with `--owner-turns`: the owner's ledger, once all ended, still holding a slot or an ask
    leaked_leases: int | None = None

    def ok(self) -> bool:
        return (self.completed == self.conversations and self.duplicate_notes == 0
                and self.unapproved_executions == 0 and self.lost_signals == 0
                and self.histories_not_replaying == 0 and self.unanswered_checks == 0
                and not self.leaked_leases)

    def markdown(self) -> str:
        return (
            "| conversations | completed | duplicate notes | unapproved executions | lost signals "
            "| histories not replaying | unanswered checks | failed queries | worker kills "
            "| server restarts | cpu load | seconds | worker start (s) |\n" + "|---" * 13 + "|\n"
            f"| {self.conversations} | {self.completed}/{self.conversations} | "
            f"{self.duplicate_notes} | {self.unapproved_executions} | {self.lost_signals} | "
            f"{self.histories_not_replaying} | {self.unanswered_checks} | {self.failed_queries} | "
            f"{self.worker_kills} | {self.server_restarts} | {self.cpu_load} | {self.seconds:.0f} | "
            f"{self.worker_start_s} |"
        )


class Process:
    """A child process, restartable, with its output in a log file."""

    def __init__(self, argv: list[str], env: dict[str, str], log: Path):
        self.argv, self.env, self.log = argv, env, log
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        self.offset = self.log.stat().st_size if self.log.exists() else 0
        self.began = time.monotonic()
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(self.argv, cwd=ROOT, env=self.env, stdout=out,
                                         stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def said(self, text: str) -> bool:
        """Whether this run of the process has logged `text` (read from where its log began)."""
        with open(self.log, "rb") as log:
            log.seek(self.offset)
            return text.encode() in log.read()

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(timeout=30)


class CpuLoad:
    """Busy-loop processes, so that a run on a loaded machine can be reproduced."""

    # Spins until its parent is gone, so that even a SIGKILLed harness leaves no load behind.
    LOOP = "import os\np = os.getppid()\nwhile os.getppid() == p:\n    sum(range(10**6))\n"

    def __init__(self, processes: int):
        self.processes, self.procs = processes, []

    def start(self) -> None:
        for _ in range(self.processes):
            self.procs.append(subprocess.Popen([sys.executable, "-c", self.LOOP],
                                               stdin=subprocess.DEVNULL))

    def stop(self) -> None:
        for proc in self.procs:
            proc.kill()
        for proc in self.procs:
            proc.wait()


UNANSWERED = object()  # what FailedQueries.ask returns once it gives up


class FailedQueries:
    """Every query, signal or history fetch of the harness that raised, by error type, and the
    final checks that never got an answer. None is fatal: one bad conversation must not end the
    run."""

    def __init__(self) -> None:
        self.by_type: Counter[str] = Counter()
        self.unanswered = 0

    def record(self, err: Exception) -> None:
        self.by_type[type(err).__name__] += 1

    async def ask(self, call, attempts: int = 120):
        """A query, again until a worker answers it: after the kills, every conversation replays,
        and a task that times out under that load leaves queries refused for a while. UNANSWERED
        once it gives up, at once if the workflow task itself fails (not an `RPCError`)."""
        for i in range(attempts):
            try:
                return await call()
            except Exception as err:
                self.record(err)
                if not isinstance(err, RPCError) or i == attempts - 1:
                    self.unanswered += 1
                    return UNANSWERED
                await asyncio.sleep(1.0)


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
        self.failed = FailedQueries()
        self.failing_since: dict[str, float] = {}  # workflow id -> since when its task fails

    async def tend(self, handle: WorkflowHandle) -> bool:
        """One look at a conversation; True once it is done (answered, or ended otherwise). A
        query or signal that fails is counted and means "not done yet": the run goes on."""
        try:
            done = await self._look(handle)
        except Exception as err:
            self.failed.record(err)
            if not isinstance(err, RPCError):  # not a missing worker or server
                self.failing_since.setdefault(handle.id, time.monotonic())
            return False
        self.failing_since.pop(handle.id, None)
        return done

    def given_up(self, after_s: float = GIVE_UP_AFTER_S) -> set[str]:
        """The conversations whose workflow task has failed for `after_s`: not worth waiting for."""
        now = time.monotonic()
        return {wid for wid, since in self.failing_since.items() if now - since > after_s}

    async def _look(self, handle: WorkflowHandle) -> bool:
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


async def unapproved_executions(handle: WorkflowHandle, failed: FailedQueries) -> int:
    """Risky activities scheduled before a confirm that the workflow took (its outcome accepted)
    named their call. A refused confirm approves nothing. 0 if the history or an outcome cannot
    be had: `failed` counts that check as unanswered."""
    events = await failed.ask(lambda: _history_events(handle))
    if events is UNANSWERED:
        return 0
    confirms = dict(_confirms(events))  # event index -> its confirm request
    taken = set()
    for request in confirms.values():
        outcome = await failed.ask(lambda: handle.query(
            ConversationWorkflow.signal_outcome, request.request_id, rpc_timeout=_RPC_TIMEOUT))
        if outcome is UNANSWERED:
            return 0
        if outcome is not None and outcome.accepted:
            taken.add(request.request_id)
    approved: set[str] = set()
    bad = 0
    for i, event in enumerate(events):
        if i in confirms and confirms[i].request_id in taken:
            approved.update(confirms[i].call_ids)
        elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            attrs = event.activity_task_scheduled_event_attributes
            if attrs.activity_type.name in RISKY:
                payload = json.loads(attrs.input.payloads[0].data)
                bad += payload["call_id"] not in approved
    return bad


async def _history_events(handle: WorkflowHandle) -> list:
    return [event async for event in handle.fetch_history_events()]


def _confirms(events: list):
    converter = pydantic_data_converter.payload_converter
    for i, event in enumerate(events):
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
            attrs = event.workflow_execution_signaled_event_attributes
            if attrs.signal_name == "confirm":
                [request] = converter.from_payloads(attrs.input.payloads, [ConfirmRequest])
                yield i, request


async def histories_not_replaying(
    conversations: Sequence[Sequence[WorkflowHistory]], keep_dir: Path,
) -> int:
    """The number of conversations with a run (a list of runs each) that their own code cannot
    replay, or replays with its timers numbered otherwise (`tests.timer_ids`: the server would
    refuse its next task). Each such run is written to `keep_dir` as `<workflow id>.run<n>.json`
    (as `temporal workflow show -o json`, with its workflow id; `kept_history` reads it) beside
    its error."""
    failing = 0
    for runs in conversations:
        failed_here = False
        for n, history in enumerate(runs, 1):
            with timers_started(history.workflow_id) as timers:
                result = await REPLAYER.replay_workflow(history, raise_on_replay_failure=False)
            failure = result.replay_failure and \
                f"{type(result.replay_failure).__name__}: {result.replay_failure}"
            if failure is None and timers != (recorded := recorded_timers(history)):
                failure = f"timers numbered {timers}, the history {recorded}"
            if failure is None:
                continue
            failed_here = True
            keep_dir.mkdir(parents=True, exist_ok=True)
            stem = f"{history.workflow_id}.run{n}"
            keep_history(history, keep_dir / f"{stem}.json")
            (keep_dir / f"{stem}.error.txt").write_text(
                f"workflow {history.workflow_id} run {history.run_id}\n{failure}\n")
        failing += failed_here
    return failing


async def run_chaos(
    conversations: int, kill_every: tuple[float, float] = (2.0, 5.0), timeout_s: float = 600,
    seed: int | None = None, think_s: float = 1.5, cpu_load: int = 0,
    keep_failed: Path | None = None, owner_turns: int | None = None,
) -> ChaosReport:
    rng = random.Random(seed)
    work = Path(tempfile.mkdtemp(prefix="chaos-"))
    keep_failed = keep_failed or work / "not-replaying"
    port = free_port()
    address = f"127.0.0.1:{port}"
    server = Process(dev_server_command(work / "chaos.db", port), dict(os.environ),
                     work / "server.log")
    model = ScriptedModelServer().start()
    queue = "chaos"
    limits = {}
    if owner_turns is not None:  # every conversation's owner (anonymous) runs so many at once
        (work / "owner-limits.json").write_text(json.dumps(
            {"default": {"running_turns": owner_turns}}))
        limits = {"AGENT_OWNER_LIMITS": str(work / "owner-limits.json")}
    worker = Process([sys.executable, "-m", "durable_react_agent.worker"],
                     worker_env(address, queue, model.base_url, work / "data", **limits),
                     work / "worker.log")
    _count_inserts(work / "data")
    kills = restarts = 0
    load = CpuLoad(cpu_load)
    started = time.monotonic()
    try:
        load.start()
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
        # A worker is killed 2–5 s (`kill_every`) after it started serving, not after its
        # process began: where a start takes as long as that (seconds, on a loaded machine),
        # most workers died before they served a task, and a run measured the start.
        next_kill: float | None = None
        starts: list[float] = []
        restart_at = started + 6
        while (len(done | approver.given_up()) < conversations
               and time.monotonic() - started < timeout_s):
            now = time.monotonic()
            if restart_at and now >= restart_at:
                server.kill(signal.SIGTERM)
                server.start()
                client = await wait_for_server(address)
                handles = [client.get_workflow_handle(
                    h.id, first_execution_run_id=h.first_execution_run_id) for h in handles]
                restarts, restart_at = restarts + 1, 0
            if next_kill is None and worker.said("worker started"):
                starts.append(now - worker.began)
                next_kill = now + rng.uniform(*kill_every)
            if next_kill is not None and now >= next_kill:
                worker.kill()
                worker.start()
                kills, next_kill = kills + 1, None
            open_handles = [h for h in handles if h.id not in done]
            looks = await asyncio.gather(*(approver.tend(h) for h in open_handles))
            done.update(h.id for h, finished in zip(open_handles, looks) if finished)
            await asyncio.sleep(0.2)
        worker.kill()
        worker.start()  # queries below need a worker
        failed = approver.failed
        unapproved = sum([await unapproved_executions(h, failed) for h in handles])
        lost = sum([await _lost_signals(h, approver.sent.get(h.id, []), failed) for h in handles])
        not_replaying = await _replay_all(client, handles, failed, keep_failed)
        answered = sum(is_expected_answer(approver.answers.get(h.id), t)
                       for t, h in zip(titles, handles))
        leaked = None if owner_turns is None else await _leaked_leases(client, failed)
        return ChaosReport(
            conversations=conversations, completed=answered,
            duplicate_notes=_duplicate_notes(work / "data"),
            unapproved_executions=unapproved, lost_signals=lost,
            histories_not_replaying=not_replaying, unanswered_checks=failed.unanswered,
            failed_queries=sum(failed.by_type.values()), worker_kills=kills,
            server_restarts=restarts, seconds=time.monotonic() - started, cpu_load=cpu_load,
            worker_start_s=round(statistics.median(starts), 2) if starts else None,
            query_errors=dict(failed.by_type),
            kept_failed=str(keep_failed) if not_replaying else None, leaked_leases=leaked,
        )
    finally:
        load.stop()
        worker.kill(signal.SIGTERM)
        server.kill(signal.SIGTERM)
        model.stop()


async def _leaked_leases(client: Client, failed: FailedQueries) -> int:
    """What the owner's ledger still holds once every conversation ended: slots and asks of
    turns that are over (none, if no crash lost or doubled a give-back)."""
    view = await failed.ask(lambda: client.get_workflow_handle(ledger_id(ANONYMOUS)).query(
        LEDGER_QUERY, result_type=LedgerView, rpc_timeout=_RPC_TIMEOUT))
    return -1 if view is UNANSWERED else len(view.running) + len(view.waiting)


async def _lost_signals(handle: WorkflowHandle, request_ids: list[str],
                        failed: FailedQueries) -> int:
    """Signals the server accepted that the workflow has no outcome for."""
    lost = 0
    for request_id in request_ids:
        outcome = await failed.ask(lambda: handle.query(
            ConversationWorkflow.signal_outcome, request_id, rpc_timeout=_RPC_TIMEOUT))
        lost += outcome is None
    return lost


async def _replay_all(client: Client, handles: list[WorkflowHandle], failed: FailedQueries,
                      keep_dir: Path) -> int:
    """`histories_not_replaying` over every run of every conversation whose history it can
    fetch."""
    fetched = [await failed.ask(lambda: run_histories(client, h)) for h in handles]
    return await histories_not_replaying([r for r in fetched if r is not UNANSWERED], keep_dir)


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
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--conversations", "-n", type=int, default=100)
    parser.add_argument("--timeout", type=float, default=900, help="seconds, at most")
    parser.add_argument("--seed", type=int)
    parser.add_argument("--think", type=float, default=1.5,
                        help="seconds of model latency per step (default 1.5)")
    parser.add_argument("--kill-every", type=float, nargs=2, default=(2.0, 5.0),
                        metavar=("MIN", "MAX"),
                        help="seconds a worker serves before it is killed (default 2 5)")
    parser.add_argument("--cpu-load", type=int, default=0, metavar="N",
                        help="busy-loop processes to run beside it, for a loaded machine")
    parser.add_argument("--owner-turns", type=int, metavar="N",
                        help="AGENT_OWNER_LIMITS on the worker: the conversations' owner runs "
                             "N turns at once; the run checks its ledger leaks nothing")
    parser.add_argument("--keep-failed", type=Path, metavar="DIR",
                        help="where to keep the histories that do not replay (default: a temp dir)")
    args = parser.parse_args()
    report = asyncio.run(run_chaos(
        args.conversations, kill_every=tuple(args.kill_every), timeout_s=args.timeout,
        seed=args.seed, think_s=args.think, cpu_load=args.cpu_load, keep_failed=args.keep_failed,
        owner_turns=args.owner_turns))
    print(report.markdown())
    print(json.dumps(asdict(report)))
    if report.kept_failed:
        print(f"histories that do not replay, with their errors: {report.kept_failed}",
              file=sys.stderr)
    sys.exit(0 if report.ok() else 1)


if __name__ == "__main__":
    main()
