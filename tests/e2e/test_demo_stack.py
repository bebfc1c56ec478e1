"""`make demo` (scripts/demo.sh over scripts/stack.sh) says which model answers, reads the
weather with a real model too, and joins nothing on its ports that this checkout did not start:
no other process on the API's or the scripted model's port, no other checkout's worker on its
Temporal task queue. Each test runs the scripts in a checkout of its own (links to this one's
code), on free ports, with a `make` that installs nothing."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
from temporalio.api.enums.v1 import TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from durable_react_agent.activities.settings import ActivitySettings
from durable_react_agent.testing import ScriptedModelServer
from durable_react_agent.worker.app import build_worker
from tests.devserver import free_port
from tests.fake_tools import registry_with_test_tools

ROOT = Path(__file__).resolve().parents[2]
VENV = Path(sys.executable).parent.parent
# What the scripts read that the tests' own environment may hold
SCRUBBED = ("OPENAI_", "AGENT_", "OPEN_METEO_", "TEMPORAL_", "SCRIPTED_PORT", "UI_PORT")


class Checkout:
    """A checkout of its own for the demo's scripts: its `.run/` and data are its own. Its `make`
    logs that it ran and, unless `installs`, fails: it never installs (the tests' venv is)."""

    def __init__(self, root: Path, installs: bool):
        self.root = root
        for entry in ROOT.iterdir():
            if not entry.name.startswith("."):
                (root / entry.name).symlink_to(entry)
        shims = root / ".shims"
        shims.mkdir()
        (shims / "make").write_text(
            f'#!/bin/sh\necho "make $*" >> "{root}/make.log"\nexit {0 if installs else 1}\n')
        (shims / "make").chmod(0o755)
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(SCRUBBED)}
        self.env.update(PATH=f"{shims}:{os.environ['PATH']}", VENV=str(VENV),
                        TEMPORAL_PORT=str(free_port()), UI_PORT=str(free_port()),
                        SCRIPTED_PORT=str(free_port()),
                        AGENT_API_ADDRESS=f"127.0.0.1:{free_port()}")

    def run(self, *command: str, timeout: float = 60, **env: str) -> subprocess.CompletedProcess:
        return subprocess.run(list(command), cwd=self.root, env={**self.env, **env},
                              capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)

    def started(self, name: str) -> bool:
        return (self.root / ".run" / f"{name}.pid").exists()

    @property
    def ran_make(self) -> bool:
        return (self.root / "make.log").exists()


def a_checkout(tmp_path: Path, installs: bool) -> Iterator[Checkout]:
    (tmp_path / "checkout").mkdir()
    checkout = Checkout(tmp_path / "checkout", installs)
    try:
        yield checkout
    finally:
        checkout.run("scripts/stack.sh", "stop")  # whatever a failing version started


@pytest.fixture
def checkout(tmp_path: Path) -> Iterator[Checkout]:
    """For dry runs and single steps: a `make` that fails, as nothing may install."""
    yield from a_checkout(tmp_path, installs=False)


@pytest.fixture
def installed_checkout(tmp_path: Path) -> Iterator[Checkout]:
    """For a whole demo: `make install` finds the venv installed."""
    yield from a_checkout(tmp_path, installs=True)


@pytest.fixture
def foreign_listener() -> Iterator[int]:
    """An HTTP server of another process's making (this one's: not the checkout's) on a port."""

    class Hello(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.end_headers()

        def log_message(self, *_: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Hello)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def test_the_first_line_names_the_default_entry_of_agent_models_and_no_key(
        checkout: Checkout, tmp_path: Path):
    models = tmp_path / "models.json"
    models.write_text(json.dumps({"models": {
        "backup": {"model": "qwen2.5:7b", "base_url": "http://127.0.0.1:11434/v1"},
        "local": {"model": "qwen2.5-0.5b-instruct", "base_url": "http://127.0.0.1:8080/v1",
                  "api_key_env": "LOCAL_KEY"}}, "default": "local"}))
    done = checkout.run("scripts/demo.sh", "--dry-run", AGENT_MODELS=str(models),
                        LOCAL_KEY="sk-local-secret")
    first = done.stdout.splitlines()[0]
    assert "'local'" in first and "qwen2.5-0.5b-instruct" in first, first
    assert "http://127.0.0.1:8080/v1" in first and "offline" not in first, first
    assert "sk-local-secret" not in done.stdout + done.stderr
    assert done.returncode == 0, done.stderr
    assert not checkout.ran_make  # a dry run installs nothing, and starts nothing
    assert not any(checkout.started(name) for name in ("server", "worker", "api", "scripted"))


def test_the_first_line_names_the_endpoint_of_openai_base_url_without_its_secrets(
        checkout: Checkout):
    done = checkout.run("scripts/demo.sh", "--dry-run",
                        OPENAI_BASE_URL="https://me:pw-secret@llm.example:8443/v1?key=q-secret",
                        OPENAI_MODEL="qwen-plus", OPENAI_API_KEY="sk-secret")
    first = done.stdout.splitlines()[0]
    assert "qwen-plus" in first and "https://llm.example:8443/v1" in first, first
    assert "secret" not in done.stdout + done.stderr
    assert done.returncode == 0, done.stderr


async def test_with_a_real_model_the_demo_reads_the_weather_from_its_own_fake_open_meteo(
        installed_checkout: Checkout, temporal_address: str):
    """The scripted model stands in for a real endpoint here: the worker must not look for
    Open-Meteo on the internet (there is none here), whatever model answers."""
    with ScriptedModelServer() as endpoint:
        done = await asyncio.to_thread(
            installed_checkout.run, "scripts/demo.sh", timeout=180,
            OPENAI_BASE_URL=endpoint.base_url, OPENAI_MODEL="scripted", OPENAI_API_KEY="k",
            TEMPORAL_PORT=temporal_address.rpartition(":")[2],  # the tests' server, joined
            TEMPORAL_ADDRESS=temporal_address,
            AGENT_TASK_QUEUE=f"demo-{uuid.uuid4().hex[:8]}")
        geocoded_at_the_endpoint = endpoint.geocoding_calls
    assert "create_note" in done.stdout and "Paris, France: " in done.stdout, (
        done.stdout + done.stderr)
    assert geocoded_at_the_endpoint == 0  # the demo's own scripted server answered
    # it approves by id the calls it printed, never a round it did not show
    approving = [n for n, line in enumerate(done.stdout.splitlines())
                 if line.startswith("Approving what is shown above: ")]
    assert approving, done.stdout
    for n in approving:
        shown, line = "\n".join(done.stdout.splitlines()[:n]), done.stdout.splitlines()[n]
        calls = line.split(" --as demo")[0].split()[-1:]
        assert calls and all(f"call {c}" in shown for c in calls), (line, shown)
    assert "Created note #" in done.stdout
    lines = done.stdout.splitlines()
    assert lines[0].startswith("Using the model scripted at http://127.0.0.1:"), done.stdout
    assert "Weather: the fake Open-Meteo" in lines[1]
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("service, variable, value", [
    ("api", "AGENT_API_ADDRESS", "127.0.0.1:{port}"),
    ("scripted", "SCRIPTED_PORT", "{port}"),
])
def test_a_port_held_by_another_process_is_refused_with_what_holds_it(
        checkout: Checkout, foreign_listener: int, service: str, variable: str, value: str):
    done = checkout.run("scripts/stack.sh", service,
                        **{variable: value.format(port=foreign_listener)})
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"Port {foreign_listener} is taken by something this checkout did not start " \
           f"(pid {os.getpid()}: " in done.stderr
    assert f"{variable}={value.format(port=foreign_listener + 1)} make demo" in done.stderr
    assert not checkout.started(service)


def test_the_dry_run_refuses_a_foreign_scripted_model_port(checkout: Checkout,
                                                          foreign_listener: int):
    done = checkout.run("scripts/demo.sh", "--dry-run", SCRIPTED_PORT=str(foreign_listener))
    assert done.returncode == 1
    assert f"Port {foreign_listener} is taken" in done.stderr


async def test_another_checkouts_worker_on_the_task_queue_is_refused(
        checkout: Checkout, client: Client, temporal_address: str,
        activity_settings: ActivitySettings):
    queue = f"shared-{uuid.uuid4().hex[:8]}"
    async with httpx.AsyncClient(timeout=10) as http, \
            build_worker(client, queue, activity_settings, http, registry_with_test_tools()):
        await polled(client, queue)
        done = await asyncio.to_thread(
            checkout.run, "scripts/stack.sh", "worker",
            TEMPORAL_PORT=temporal_address.rpartition(":")[2], AGENT_TASK_QUEUE=queue)
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"Another worker serves task queue {queue} on {temporal_address}: {os.getpid()}@" \
           in done.stderr
    assert f"pid {os.getpid()}: " in done.stderr and "AGENT_TASK_QUEUE=" in done.stderr
    assert not checkout.started("worker")


async def polled(client: Client, queue: str, timeout_s: float = 10) -> None:
    """Until the server lists a worker polling `queue`."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            described = await client.workflow_service.describe_task_queue(
                DescribeTaskQueueRequest(namespace=client.namespace, task_queue=TaskQueue(name=queue),
                                         task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW))
        except RPCError as err:  # a call cut short on a loaded machine: ask again
            if err.status not in (RPCStatusCode.CANCELLED, RPCStatusCode.UNAVAILABLE):
                raise
        else:
            if described.pollers:
                return
        assert time.monotonic() < deadline, "the worker never polled"
        await asyncio.sleep(0.1)
