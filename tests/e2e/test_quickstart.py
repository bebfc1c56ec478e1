"""The quickstart (docs/quickstart.md) as a reader meets it: the page shows
`examples/client_script.py` whole, and its command runs as printed beside a worker: the script
starts a conversation with Temporal's own client, approves the write it asks for with the
`confirm` signal, and prints the answer from the `status` query. The note is written once."""

from __future__ import annotations

import asyncio
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

from durable_react_agent.activities.settings import ActivitySettings
from durable_react_agent.testing import ScriptedModelServer, ScriptedReply
from tests.helpers import note_rows, script, tool_call, unique
from tests.processes import ROOT

PAGE = ROOT / "docs" / "quickstart.md"
SCRIPT = ROOT / "examples" / "client_script.py"


def test_the_page_shows_the_script_it_runs():
    page = PAGE.read_text()
    assert '--8<-- "examples/client_script.py"' in page  # the site inlines the file whole
    assert len(SCRIPT.read_text().splitlines()) <= 45  # a quickstart, not a program


async def test_the_quickstart_script_runs_as_the_page_prints_it(
        task_queue: str, temporal_address: str, model: ScriptedModelServer,
        activity_settings: ActivitySettings, tmp_path: Path):
    title = unique("quickstart")
    trigger = script(model, unique("quickstart"),
                     ScriptedReply(tool_calls=[tool_call("create_note",
                                                         {"title": title, "body": "b"})]),
                     ScriptedReply(content="Saved: {last_tool}"))
    [printed] = re.findall(r"^python examples/client_script\.py .*$", PAGE.read_text(), re.M)
    python, path, prompt = shlex.split(printed)  # the prompt carries the model's script here
    env = {**os.environ, "TEMPORAL_ADDRESS": temporal_address, "AGENT_TASK_QUEUE": task_queue}
    done = await asyncio.to_thread(
        subprocess.run, [sys.executable, path, f"{trigger} {prompt}"], cwd=ROOT, env=env,
        capture_output=True, text=True, timeout=90)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert lines[0].startswith("approving create_note {"), done.stdout
    assert lines[-1].startswith("Saved: Created note #"), done.stdout
    assert len(note_rows(activity_settings.data_dir, title)) == 1
