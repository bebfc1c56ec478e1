"""The worker process: search attribute registration, graceful shutdown, several processes."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

from google.protobuf.duration_pb2 import Duration
from temporalio.api.operatorservice.v1 import ListSearchAttributesRequest
from temporalio.api.workflowservice.v1 import RegisterNamespaceRequest
from temporalio.client import Client

from durable_react_agent.testing import ScriptedModelServer, ScriptedReply
from durable_react_agent.worker.app import ensure_search_attributes
from tests.devserver import worker_env
from tests.helpers import script, start, tool_call, unique

ROOT = Path(__file__).resolve().parents[2]


async def test_agent_status_is_registered_on_a_namespace_that_lacks_it(client: Client):
    namespace = f"sa-{uuid.uuid4().hex[:8]}"
    await client.workflow_service.register_namespace(
        RegisterNamespaceRequest(
            namespace=namespace, workflow_execution_retention_period=Duration(seconds=86400)
        )
    )
    await ensure_search_attributes(client, namespace)
    await ensure_search_attributes(client, namespace)  # idempotent
    listed = await client.operator_service.list_search_attributes(
        ListSearchAttributesRequest(namespace=namespace)
    )
    assert "AgentStatus" in listed.custom_attributes


async def test_worker_stops_gracefully_on_sigterm(temporal_address: str, tmp_path: Path):
    env = {**os.environ, "TEMPORAL_ADDRESS": temporal_address,
           "AGENT_TASK_QUEUE": f"sigterm-{uuid.uuid4().hex[:6]}"}
    log = tmp_path / "worker.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "durable_react_agent.worker"], cwd=ROOT, env=env,
                                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while "worker started" not in log.read_text():
        assert proc.poll() is None, log.read_text()
        assert time.monotonic() < deadline, "the worker did not start"
        await asyncio.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    code = await asyncio.to_thread(proc.wait, 30)
    assert code == 0, log.read_text()
    assert '"event": "worker stopped"' in log.read_text()


async def test_worker_processes_share_the_queue_and_a_dead_one_is_replaced(
    client: Client, temporal_address: str, model: ScriptedModelServer, tmp_path: Path
):
    """`--processes 2`: two workers serve one queue, conversations move between them, a worker
    SIGKILLed is started again, and SIGTERM stops them all."""
    queue = f"procs-{uuid.uuid4().hex[:6]}"
    log = tmp_path / "workers.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "durable_react_agent.worker", "--processes", "2"], cwd=ROOT,
            env=worker_env(temporal_address, queue, model.base_url, tmp_path / "data"),
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def started() -> list[int]:
        return [json.loads(line)["pid"] for line in log.read_text().splitlines()
                if '"event": "worker started"' in line]

    async def until(predicate, what: str) -> None:
        deadline = time.monotonic() + 60
        while not predicate():
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, f"{what}: {log.read_text()}"
            await asyncio.sleep(0.1)

    try:
        await until(lambda: len(started()) == 2, "two workers did not start")
        steps = [ScriptedReply(tool_calls=[tool_call("get_weather", {"location": c})])
                 for c in ["Paris", "Tokyo"] * 3]
        trigger = script(model, unique("procs"), *steps, ScriptedReply(content="toured"))
        handles = [await start(client, queue, trigger, one_shot=True) for _ in range(6)]
        results = await asyncio.gather(*(asyncio.wait_for(h.result(), 90) for h in handles))
        assert [r.final_answer for r in results] == ["toured"] * 6
        served = {json.loads(line)["pid"] for line in log.read_text().splitlines()
                  if '"event": "llm reply"' in line}
        assert served == set(started()), "both workers should have taken model calls"

        os.kill(started()[0], signal.SIGKILL)
        await until(lambda: len(started()) == 3, "the dead worker was not replaced")
    finally:
        proc.send_signal(signal.SIGTERM)
        code = await asyncio.to_thread(proc.wait, 30)
    assert code == 0, log.read_text()
    assert log.read_text().count('"event": "worker stopped"') == 2


def test_bad_worker_settings_stop_it_with_a_clear_error(temporal_address: str, tmp_path: Path):
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps({"rules": [{"name": "drafts are free", "tools": ["create_note"],
                                             "when": "args.title.startsWith(", "effect": "allow"}]}))
    for name, value, message in (
        ("AGENT_WORKFLOW_SANDBOX", "maybe", "AGENT_WORKFLOW_SANDBOX must be on or off, not 'maybe'"),
        ("AGENT_CONTEXT_CACHE_MB", "lots", "AGENT_CONTEXT_CACHE_MB must be a number of MiB, not 'lots'"),
        ("AGENT_POLICY", str(policy), "AGENT_POLICY: rule 1 ('drafts are free'): \\\"when\\\" is not CEL"),
    ):
        env = {**os.environ, "TEMPORAL_ADDRESS": temporal_address, name: value}
        done = subprocess.run([sys.executable, "-m", "durable_react_agent.worker"], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 2, done.stderr
        assert message in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_a_worker_without_mcp_servers_never_imports_the_mcp_sdk():
    """The MCP SDK takes a second to import here, and several on a busy machine: a worker
    without MCP servers, started again after a crash, must not wait for it (the chaos run's
    workers, killed every few seconds, spent half their lives importing it)."""
    probe = ("import sys, durable_react_agent.worker.__main__, durable_react_agent.worker.app, durable_react_agent.activities.tool_runner\n"
             "print(sorted(m for m in sys.modules if m == 'mcp' or m.startswith('mcp.')))")
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]", done.stdout
