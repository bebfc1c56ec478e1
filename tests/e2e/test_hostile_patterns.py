"""Outside text that would freeze a process, run where a frozen process can be killed: no pattern of
the product backtracks over outside text, a fenced reply is read in linear time, and a catastrophic
pattern in a tool's schema is an observation while the worker goes on."""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from temporalio.client import Client

from durable_react_agent.testing import ScriptedModelServer, ScriptedReply
from tests.api_support import ROOT
from tests.devserver import worker_env
from tests.helpers import script, settled, start, tool_call, tool_messages, unique
from tests.hostile_input import EVIL, POISON_ANSWER, POISON_REPLY

SERVERS = Path(__file__).parents[1] / "mcp_servers"


CHECK_FENCES = """
import time
from durable_react_agent.contract import ChatMessage
from durable_react_agent.rules.output import check_output
from durable_react_agent.rules.repair import recover_tool_calls
for text in (%r, %r, "```" + " " * 100_000 + "```", "```json" + "\\n" * 100_000):
    started = time.monotonic()
    recover_tool_calls(ChatMessage(role="assistant", content=text), {"get_weather"})
    check_output(text, {"type": "object"})
    print(round(time.monotonic() - started, 3), flush=True)
""" % (POISON_REPLY, POISON_ANSWER)


PROBE = """
import json, re, sys, time
from re import _parser
from tests.product_patterns import BOUNDED_USE, patterns

FILLERS = [" ", "\\n", "a", "0", "`", "{", "-"]


def fragments(pattern):
    # the pattern's literal runs, which steer a matcher into its slow paths
    runs, run = [], []
    def walk(items):
        for op, arg in items:
            if op is _parser.LITERAL:
                run.append(chr(arg))
                continue
            if run:
                runs.append("".join(run)); run.clear()
            for sub in (arg if isinstance(arg, (list, tuple)) else [arg]):
                if isinstance(sub, _parser.SubPattern):
                    walk(sub)
                elif isinstance(sub, (list, tuple)):
                    for x in sub:
                        if isinstance(x, _parser.SubPattern):
                            walk(x)
    walk(_parser.parse(pattern.pattern, pattern.flags))
    if run:
        runs.append("".join(run))
    return sorted(set(runs), key=len, reverse=True)[:4] + [""]


for name, pattern in sorted(patterns().items()):
    size = BOUNDED_USE.get(name, 50_000)
    for fragment in fragments(pattern):
        for filler in FILLERS:
            unit = fragment + filler
            for text in (fragment + filler * size + "!", filler * size + fragment,
                         unit * max(1, size // len(unit))):
                for how in (pattern.search, pattern.match):
                    print(json.dumps([name, fragment, filler]), flush=True)
                    started = time.process_time()  # its own CPU: a busy machine's load is not counted
                    how(text)
                    took = time.process_time() - started
                    if took > 1.0:
                        print(json.dumps(["SLOW", name, fragment, filler, round(took, 2)]))
print("DONE", flush=True)
"""


@pytest.fixture
def worker_apart(temporal_address: str, model: ScriptedModelServer,
                 tmp_path: Path) -> Iterator[tuple[str, subprocess.Popen]]:
    """`agent-worker` with the odd server, in a process of its own: a worker that froze
    would freeze that process, not the tests."""
    config = tmp_path / "mcp.json"
    config.write_text(json.dumps({"mcpServers": {"odd": {
        "command": sys.executable, "args": [str(SERVERS / "odd_schemas.py")]}}}))
    queue = unique("odd-apart")
    env = worker_env(temporal_address, queue, model.base_url, tmp_path / "data",
                     AGENT_MCP_CONFIG=str(config), AGENT_AUTO_APPROVE="*")
    with open(tmp_path / "worker.log", "wb") as log:
        worker = subprocess.Popen([sys.executable, "-m", "durable_react_agent.worker"], cwd=ROOT, env=env, stdout=log,
                                  stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        yield queue, worker
    finally:
        worker.terminate()
        try:
            worker.wait(timeout=15)
        except subprocess.TimeoutExpired:  # frozen in a match: only SIGKILL ends it
            worker.kill()
            worker.wait()


def test_no_pattern_of_the_product_backtracks_over_outside_text():
    """Each pattern, against texts of 50,000 characters built from its own literals and the
    characters that make matchers backtrack, answers within a second of CPU: linear, or used only
    on text cut to a bound first (`BOUNDED_USE`). Run apart: a match holds the GIL, and only
    killing the process stops it. The probe names each match before it starts, so a match
    that does not end is named, and killed, after ten seconds (its import may take a minute on
    a loaded machine)."""
    probe = subprocess.Popen([sys.executable, "-c", PROBE], cwd=ROOT, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    lines: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:
        for line in probe.stdout or ():
            lines.put(line)
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    slow, last, wait_s = [], "(nothing yet)", 60.0
    try:
        while (line := lines.get(timeout=wait_s)) is not None:
            wait_s = 10.0
            if line.startswith('["SLOW"'):
                slow.append(json.loads(line))
            last = line.strip()
            if last == "DONE":  # every match ended; the interpreter's exit is not timed
                break
    except queue.Empty:
        pytest.fail(f"a pattern is still matching after {wait_s:g} s: {last}")
    finally:
        probe.kill()
        probe.wait()
    assert last == "DONE", probe.stderr.read()[-3000:] if probe.stderr else last
    assert not slow, f"patterns that backtrack: {slow}"


def test_a_fenced_reply_is_read_in_linear_time():
    done = subprocess.run([sys.executable, "-c", CHECK_FENCES], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert all(float(t) < 0.5 for t in done.stdout.split()), done.stdout


async def test_a_catastrophic_pattern_is_an_observation_and_the_worker_goes_on(
    client: Client, model: ScriptedModelServer, worker_apart: tuple[str, subprocess.Popen]
):
    queue, worker = worker_apart
    evil = {"text": EVIL}
    trigger = script(
        model, unique("odd-patterns"),
        ScriptedReply(tool_calls=[tool_call("odd__catastrophic", evil),
                                  tool_call("odd__lookahead", evil),
                                  tool_call("odd__catastrophic", {"text": "aaa"})]),
        ScriptedReply(content="done"),
    )
    handle = await start(client, queue, trigger,
                         approval={"auto_approve": ["odd__catastrophic", "odd__lookahead"]})
    status = await settled(handle, timeout_s=60)
    assert status.final_answer == "done"
    in_workflow, in_worker, fine = [m.content for m in await tool_messages(handle)]
    assert in_workflow.startswith(
        f"Error: invalid arguments for odd__catastrophic: text: {EVIL!r} does not match '^(a+)+$'. ")
    assert in_worker == ("Error: invalid arguments for odd__lookahead: the arguments cannot be "
                         "checked: matching the pattern '^(?=a)(a|a)+$' took over 0.5 s")
    assert fine == "aaa"
    assert worker.poll() is None, "the worker died"
