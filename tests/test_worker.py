"""The worker process: search attribute registration and graceful shutdown."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

from temporalio.api.operatorservice.v1 import ListSearchAttributesRequest
from temporalio.api.workflowservice.v1 import RegisterNamespaceRequest
from temporalio.client import Client
from google.protobuf.duration_pb2 import Duration

from worker.app import ensure_search_attributes

ROOT = Path(__file__).resolve().parent.parent


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
        proc = subprocess.Popen([sys.executable, "-m", "worker"], cwd=ROOT, env=env,
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
