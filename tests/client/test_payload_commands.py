"""The CLI over sealed payloads: `history` prints the command that reads a cut result whole, and
it runs as printed; `result --out` writes every byte; `payloads prune` says what it would remove;
a CLI without the key says which key it lacks, and nothing else."""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path

from durable_react_agent.testing import ScriptedModelServer, ScriptedReply
from tests.cli_support import run_cli
from tests.fake_tools import report_text
from tests.helpers import TEST_PAYLOAD_KEYS_ENV, script, settled, start, tool_call, unique
from tests.payload_support import Sealed


def sealed_env(temporal_address: str, sealed: Sealed, **extra: str) -> dict[str, str]:
    return {**os.environ, "TEMPORAL_ADDRESS": temporal_address, "AGENT_TASK_QUEUE": sealed.queue,
            "AGENT_PAYLOAD_STORE": sealed.store.as_uri(), "AGENT_PAYLOAD_KEYS": TEST_PAYLOAD_KEYS_ENV, **extra}


async def test_the_printed_result_command_reads_the_whole_result(
        temporal_address: str, sealed: Sealed, model: ScriptedModelServer, tmp_path: Path):
    trigger = script(model, unique("cli-result"),
                     ScriptedReply(tool_calls=[tool_call("big_report", {"size": 700_000})]),
                     ScriptedReply(content="done"))
    handle = await start(sealed.client, sealed.queue, trigger, one_shot=True)
    await settled(handle, timeout_s=60)
    env = sealed_env(temporal_address, sealed)
    history = await run_cli(["history", handle.id], env)
    assert history.returncode == 0, history.stderr
    [line] = [x for x in history.stdout.splitlines() if x.strip().startswith("whole:")]
    words = shlex.split(line.split("whole:", 1)[1])
    assert words[:3] == ["agent", "result", handle.id]
    whole = report_text(700_000)
    printed = await run_cli(words[1:], env)
    assert printed.returncode == 0, printed.stderr
    assert printed.stdout == whole + ("" if whole.endswith("\n") else "\n")
    out = tmp_path / "result.txt"
    written = await run_cli([*words[1:], "--out", str(out)], env)
    assert written.returncode == 0 and out.read_text() == whole
    assert "whole" in written.stdout
    missing = await run_cli(["result", handle.id, "call_nope"], env)
    assert missing.returncode == 1 and "call_nope" in missing.stderr

    pruned = await run_cli(["payloads", "prune", "--dry-run", "--json", "--grace-h", "0"], env)
    assert pruned.returncode == 0, pruned.stderr
    report = json.loads(pruned.stdout)
    assert report["dry_run"] and report["store"].startswith(f"file://{sealed.store}")
    assert handle.id not in report["conversations"]  # Temporal holds it: kept

    keyless = await run_cli(["history", handle.id], {**env, "AGENT_PAYLOAD_KEYS": ""})
    assert keyless.returncode == 1 and "AGENT_PAYLOAD_KEYS is not set here" in keyless.stderr
    assert "Traceback" not in keyless.stderr
    bad = await run_cli(["status", handle.id], {**env, "AGENT_PAYLOAD_KEYS": "{"})
    assert bad.returncode == 1 and "AGENT_PAYLOAD_KEYS is not JSON" in bad.stderr
