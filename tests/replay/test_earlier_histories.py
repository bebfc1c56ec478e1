"""Every history recorded by earlier code replays on this code, as a deployed worker runs it
(outside the sandbox), with its timers numbered as recorded: a change that breaks one would break
the running conversations it stands for. `tests/histories/` holds them; a test that records one
keeps it with `RECORD_HISTORIES=1` (`tests.helpers.replay`)."""

from __future__ import annotations

from pathlib import Path

import pytest
from temporalio.worker import Replayer

from durable_react_agent.worker.app import WORKFLOWS, workflow_runner
from durable_react_agent.workflows.signal_guard import SignalGuard
from tests.helpers import HISTORIES, SEALED, kept_history
from tests.timer_ids import recorded_timers, timers_started

# This version's; `0.x/` holds the last 0.x version's, which 1.0 does not replay
# (`tests/replay/test_recorded_histories.py`).
RECORDED = sorted(p for p in HISTORIES.rglob("*.json") if "0.x" not in p.relative_to(HISTORIES).parts)
# in a few groups, which the test processes share out
GROUPS = [pytest.param(RECORDED[n::2], id=f"group{n}") for n in range(2)]
# As `agent-worker` runs workflow code: outside the sandbox, which the tests' own workers and
# replays keep (it refuses the clock, randomness and I/O at the first run). Re-importing the
# workflow's modules for each of over a hundred histories took 49 s in the sandbox, 6 s here.
AS_DEPLOYED = Replayer(workflows=WORKFLOWS, data_converter=SEALED,
                       workflow_runner=workflow_runner(sandboxed=False),
                       interceptors=[SignalGuard()])


@pytest.mark.parametrize("files", GROUPS)
async def test_recorded_histories_of_earlier_versions_still_replay(files: list[Path]):
    """Histories recorded by earlier code, replayed by this code as a deployed worker runs it:
    a change that breaks them breaks running conversations."""
    assert RECORDED, "no recorded histories; run the suite once with RECORD_HISTORIES=1"
    for path in files:
        history = kept_history(path)
        with timers_started(history.workflow_id) as timers:
            result = await AS_DEPLOYED.replay_workflow(history, raise_on_replay_failure=False)
        assert result.replay_failure is None, f"{path.relative_to(HISTORIES)}: {result.replay_failure}"
        # Temporal's replay passes timers numbered otherwise; the server refuses them later
        assert timers == recorded_timers(history), f"{path.relative_to(HISTORIES)}: timer ids"
