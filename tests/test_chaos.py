"""The small CI version of `python -m tests.chaos`: 10 conversations under worker kills and a
server restart."""

from __future__ import annotations

from tests.chaos import run_chaos


async def test_chaos_small():
    report = await run_chaos(conversations=10, seed=7, timeout_s=300)
    assert report.worker_kills >= 1 and report.server_restarts == 1
    assert report.ok(), report.markdown()
