"""The small version of `python -m tests.chaos`: six conversations under worker kills and a
server restart, each of whose histories must replay with today's code (`make test-long`)."""

from __future__ import annotations

import pytest

from tests.chaos import is_expected_answer, run_chaos


@pytest.mark.long
async def test_chaos_small():
    # A shorter model latency than the full run's, so that steps fit between kills on a busy CI
    # machine (the suite runs in two processes), and six conversations, in the time `make test`
    # has: kills and the restart still land mid-call and mid-approval (the runs of 60 and 100
    # are in docs/robustness.md).
    report = await run_chaos(conversations=6, seed=7, timeout_s=300, think_s=0.8)
    assert report.worker_kills >= 1 and report.server_restarts == 1
    details = (f"{report.markdown()}\nfailed queries by error: {report.query_errors}"
               f"\nhistories that do not replay, with their errors: {report.kept_failed}")
    assert report.histories_not_replaying == 0, details
    assert report.ok(), details


def test_only_the_expected_answer_counts_as_completed():
    title = "chaos-1-abc"
    assert is_expected_answer(f"done: Deleted note #7 {title!r}.", title)
    assert not is_expected_answer("done: Error: no note is titled 'chaos-1-abc'", title)
    assert not is_expected_answer(None, title) and not is_expected_answer("", title)
