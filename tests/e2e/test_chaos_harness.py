"""The chaos harness's own bookkeeping, without a server: a history that does not replay fails the
run and is kept, and a failing query is counted instead of ending the run."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import asdict
from pathlib import Path

from temporalio.client import WorkflowHistory, WorkflowQueryFailedError
from temporalio.service import RPCError, RPCStatusCode

from tests.chaos import (
    UNANSWERED,
    Approver,
    ChaosReport,
    CpuLoad,
    FailedQueries,
    histories_not_replaying,
)
from tests.helpers import HISTORIES, kept_history

# A recorded history of today's code: it replays, or the suite fails elsewhere.
RECORDED = HISTORIES / "weather_invalid_call_two_turns.json"


def report(**changes) -> ChaosReport:
    clean = ChaosReport(
        conversations=10, completed=10, duplicate_notes=0, unapproved_executions=0,
        lost_signals=0, histories_not_replaying=0, unanswered_checks=0, failed_queries=7,
        worker_kills=4, server_restarts=1, seconds=61.0, cpu_load=2,
        query_errors={"RPCError": 7},
    )
    return dataclasses.replace(clean, **changes)


def test_a_history_that_does_not_replay_fails_the_run():
    assert report().ok()
    assert not report(histories_not_replaying=1).ok()
    assert not report(unanswered_checks=1).ok()
    assert report(failed_queries=500).ok()  # under kills most queries fail for want of a worker


def test_the_report_shows_replays_and_failed_queries():
    failing = report(histories_not_replaying=2, failed_queries=9, kept_failed="/tmp/kept",
                     worker_start_s=4.1)
    header, _, row = failing.markdown().splitlines()
    cells = dict(zip(header.strip("|").split("|"), row.strip("|").split("|")))
    cells = {name.strip(): value.strip() for name, value in cells.items()}
    assert cells["histories not replaying"] == "2" and cells["failed queries"] == "9"
    assert cells["cpu load"] == "2" and cells["worker start (s)"] == "4.1"
    line = json.loads(json.dumps(asdict(failing)))
    assert line["histories_not_replaying"] == 2 and line["failed_queries"] == 9
    assert line["cpu_load"] == 2 and line["kept_failed"] == "/tmp/kept"


def broken(path: Path, workflow_id: str) -> WorkflowHistory:
    """The recorded history with its first activity renamed: the code schedules another one."""
    data = json.loads(path.read_text())
    data.pop("workflowId", None)
    scheduled = next(e["activityTaskScheduledEventAttributes"] for e in data["events"]
                     if "activityTaskScheduledEventAttributes" in e)
    scheduled["activityType"]["name"] = "not_what_the_code_schedules"
    return WorkflowHistory.from_json(workflow_id, data)


async def test_a_conversation_with_a_run_that_does_not_replay_is_counted_and_kept(tmp_path):
    good = kept_history(RECORDED)
    conversations = [
        [dataclasses.replace(good, workflow_id="chaos-good")],
        [dataclasses.replace(good, workflow_id="chaos-bad"), broken(RECORDED, "chaos-bad"),
         broken(RECORDED, "chaos-bad")],
    ]
    assert await histories_not_replaying(conversations, tmp_path) == 1  # one conversation
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "chaos-bad.run2.error.txt", "chaos-bad.run2.json",
        "chaos-bad.run3.error.txt", "chaos-bad.run3.json",
    ]
    kept = kept_history(tmp_path / "chaos-bad.run2.json")
    assert kept.workflow_id == "chaos-bad" and kept.events == conversations[1][1].events
    assert "Nondeterminism" in (tmp_path / "chaos-bad.run2.error.txt").read_text()


async def test_histories_that_replay_leave_nothing_behind(tmp_path):
    assert await histories_not_replaying([[kept_history(RECORDED)]], tmp_path / "kept") == 0
    assert not (tmp_path / "kept").exists()


class RefusingHandle:
    """A conversation whose queries raise, as a worker hitting a nondeterminism error makes them."""

    id = "chaos-stuck"

    def __init__(self, error: Exception):
        self.error = error

    async def query(self, *args, **kwargs):
        raise self.error


async def test_a_failed_query_is_counted_and_the_conversation_is_not_done():
    approver = Approver()
    nondeterministic = RefusingHandle(WorkflowQueryFailedError("[TMPRL1100] Nondeterminism error"))
    assert await approver.tend(nondeterministic) is False
    assert await approver.tend(nondeterministic) is False
    no_worker = RefusingHandle(RPCError("Timeout expired", RPCStatusCode.DEADLINE_EXCEEDED, b""))
    no_worker.id = "chaos-waiting"
    assert await approver.tend(no_worker) is False
    assert approver.failed.by_type == {"WorkflowQueryFailedError": 2, "RPCError": 1}
    # Only a failing workflow task is given up on, and only after a while.
    assert approver.given_up() == set()
    assert approver.given_up(after_s=-1) == {"chaos-stuck"}


async def test_a_final_query_that_fails_is_unanswered_not_raised():
    failed = FailedQueries()
    nondeterministic = RefusingHandle(WorkflowQueryFailedError("nondeterminism"))
    assert await failed.ask(nondeterministic.query) is UNANSWERED  # at once: no retry helps
    no_worker = RefusingHandle(RPCError("Timeout expired", RPCStatusCode.DEADLINE_EXCEEDED, b""))
    assert await failed.ask(no_worker.query, attempts=1) is UNANSWERED
    assert failed.unanswered == 2 and sum(failed.by_type.values()) == 2


def test_the_cpu_load_stops():
    load = CpuLoad(2)
    try:
        load.start()
        assert [proc.poll() for proc in load.procs] == [None, None]
    finally:
        load.stop()
    assert all(proc.returncode is not None for proc in load.procs)
