"""Shared fixtures: a real Temporal dev server, the scripted model, in-process workers (the
session's, and the ones under four eyes or with agent profiles), the API on a thread, the CLI in
this process or as one, a browser and a page of the console, and the MCP test servers over HTTP."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
import pytest_asyncio
from playwright.async_api import Browser, async_playwright
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

from durable_react_agent.activities.profiles import Profiles
from durable_react_agent.activities.settings import ActivitySettings
from durable_react_agent.client.payloads import PayloadSettings
from durable_react_agent.rules.search_attributes import AGENT_OWNER, AGENT_STATUS
from durable_react_agent.testing import ScriptedModelServer
from durable_react_agent.worker.app import build_worker
from tests.api_support import ROOT, ApiServer
from tests.browser_support import CHROMIUM_ARGS, installed_chromium
from tests.cli_support import run_cli
from tests.console_support import VIEWPORT, Console
from tests.devserver import TUNING_ARGS, free_port, temporal_cli
from tests.fake_tools import ODD_TOOLS, registry_with_test_tools
from tests.helpers import LONG, TEST_PAYLOAD_KEYS, unique
from tests.mcp_support import PYTHON, SERVERS, TOKEN
from tests.payload_support import READER, Sealed, sealed_worker
from tests.postgres_support import running_postgres
from tests.subagent_support import PROFILES
from tests.webhook_support import Receiver

SECRET_KEY = "sk-test-secret-that-must-never-reach-history"
FOUR_EYES = "destructive"


@pytest_asyncio.fixture(scope="session")
async def temporal_env() -> AsyncIterator[WorkflowEnvironment]:
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=temporal_cli(),
        data_converter=pydantic_data_converter,
        search_attributes=[AGENT_STATUS, AGENT_OWNER],
        dev_server_extra_args=TUNING_ARGS,
    )
    try:
        yield env
    finally:
        await env.shutdown()


@pytest.fixture(scope="session")
def client(temporal_env: WorkflowEnvironment) -> Client:
    return temporal_env.client


@pytest.fixture(scope="session")
def temporal_address(temporal_env: WorkflowEnvironment) -> str:
    return temporal_env.client.service_client.config.target_host


@pytest.fixture(scope="session")
def model_server() -> Iterator[ScriptedModelServer]:
    """The scripted OpenAI-compatible server, which also fakes Open-Meteo."""
    server = ScriptedModelServer().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def model(model_server: ScriptedModelServer) -> Iterator[ScriptedModelServer]:
    """The scripted server, with its script and holds reset after each test."""
    yield model_server
    model_server.release()
    model_server.rearm()


@pytest.fixture(scope="session")
def activity_settings(model_server: ScriptedModelServer, tmp_path_factory) -> ActivitySettings:
    return ActivitySettings(
        openai_api_key=SECRET_KEY,
        openai_base_url=model_server.base_url,
        openai_model="scripted",
        geocoding_url=model_server.geocoding_url,
        forecast_url=model_server.forecast_url,
        data_dir=tmp_path_factory.mktemp("agent-data"),
        auto_approvable=None,  # tests pick their policies; the floor has tests of its own
    )


@pytest_asyncio.fixture(scope="session")
async def task_queue(client: Client, activity_settings: ActivitySettings) -> AsyncIterator[str]:
    """A task queue served by an in-process worker for the whole session."""
    queue = f"tests-{uuid.uuid4().hex[:8]}"
    async with httpx.AsyncClient(timeout=10) as http:
        async with build_worker(client, queue, activity_settings, http, registry_with_test_tools()):
            yield queue


@pytest_asyncio.fixture(scope="session")
async def odd_tools_queue(client: Client, activity_settings: ActivitySettings) -> AsyncIterator[str]:
    """A task queue whose worker also has the odd tools (`tests.fake_tools.ODD_TOOLS`)."""
    queue = f"tests-odd-{uuid.uuid4().hex[:8]}"
    async with httpx.AsyncClient(timeout=10) as http:
        async with build_worker(client, queue, activity_settings, http,
                                registry_with_test_tools(*ODD_TOOLS)):
            yield queue


@pytest_asyncio.fixture(scope="module")
async def roles_queue(client: Client, activity_settings: ActivitySettings) -> AsyncIterator[str]:
    """A worker whose conversations hold destructive calls to four eyes."""
    queue = f"roles-{uuid.uuid4().hex[:8]}"
    settings = dataclasses.replace(activity_settings, four_eyes=(FOUR_EYES,))
    async with httpx.AsyncClient(timeout=10) as http:
        async with build_worker(client, queue, settings, http, registry_with_test_tools()):
            yield queue


@pytest_asyncio.fixture(scope="module")
async def sealed(temporal_address: str, activity_settings: ActivitySettings, tmp_path_factory
                 ) -> AsyncIterator[Sealed]:
    """A worker whose payloads are sealed with the tests' key and, over 256 KiB, kept in a file
    store of its own (`tests.payload_support`), with a client and a session that read them."""
    payloads = PayloadSettings(path=tmp_path_factory.mktemp("payloads"), keys=TEST_PAYLOAD_KEYS)
    settings = dataclasses.replace(activity_settings, profiles=Profiles(READER))
    async with sealed_worker(temporal_address, payloads, settings, "sealed") as sealed:
        yield sealed


@pytest_asyncio.fixture(scope="module")
async def agents_queue(client: Client, activity_settings) -> str:
    """A worker whose AGENT_PROFILES are `tests.subagent_support.PROFILES`."""
    queue = unique("agents")
    settings = dataclasses.replace(activity_settings, profiles=Profiles(PROFILES))
    async with httpx.AsyncClient(timeout=10) as http:
        async with build_worker(client, queue, settings, http, registry_with_test_tools()):
            yield queue


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A real PostgreSQL of the test process's own (Debian's: `make system-deps`)."""
    with running_postgres() as url:
        yield url


@pytest.fixture(scope="session")
def api(temporal_address: str, task_queue: str) -> Iterator[ApiServer]:
    """`agent-api` without tokens (loopback), on the session's dev server and queue."""
    server = ApiServer(temporal_address, task_queue).start()
    try:
        yield server
    finally:
        server.stop()


# The console script `agent`, installed beside the interpreter that runs the tests.
AGENT = str(Path(sys.executable).parent / "agent")


@pytest.fixture
def agent_env(temporal_address: str, task_queue: str) -> dict[str, str]:
    """What a shell gives `agent` here: the session's dev server and queue."""
    return {**os.environ, "TEMPORAL_ADDRESS": temporal_address, "AGENT_TASK_QUEUE": task_queue}


@pytest.fixture
def cli(agent_env: dict[str, str]):
    """`agent`, its entry called in this process (`tests.cli_support`), on the session's dev
    server and queue: `await cli(*args)` is its exit code and output."""

    async def run(*args: str, timeout: float = 60, extra_env: dict[str, str] | None = None
                  ) -> subprocess.CompletedProcess:
        return await run_cli(list(args), {**agent_env, **(extra_env or {})}, timeout)

    return run


@pytest.fixture
def cli_process(agent_env: dict[str, str]):
    """`agent` as a process, as a shell runs it: for what only a process shows."""

    async def run(*args: str, timeout: float = 60, extra_env: dict[str, str] | None = None,
                  input: str | None = None) -> subprocess.CompletedProcess:
        return await asyncio.to_thread(
            subprocess.run, [AGENT, *args], cwd=ROOT, env={**agent_env, **(extra_env or {})},
            input=input, capture_output=True, text=True, timeout=timeout,
        )

    return run


@pytest.fixture(scope="session")
def chromium() -> Path:
    """Debian's chromium (`make system-deps`)."""
    return installed_chromium()


@pytest_asyncio.fixture(scope="module")
async def browser(chromium: Path) -> AsyncIterator[Browser]:
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=str(chromium), headless=True,
                                                   args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            await browser.close()


@pytest_asyncio.fixture
async def console(browser: Browser) -> AsyncIterator[Console]:
    context = await browser.new_context(viewport=VIEWPORT)
    try:
        yield Console(await context.new_page())
    finally:
        await context.close()


@pytest.fixture(scope="module")
def http_ports() -> Iterator[dict[str, int]]:
    """One HTTP server per transport, each on its own port."""
    ports = {kind: free_port() for kind in ("streamable", "sse")}
    processes = [
        subprocess.Popen(
            [PYTHON, str(SERVERS / "http_server.py"), str(port), kind],
            env={**os.environ, "EXPECTED_TOKEN": TOKEN},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for kind, port in ports.items()
    ]
    try:
        deadline = time.monotonic() + 15
        for port in ports.values():
            while True:
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                    break
                except OSError:
                    assert time.monotonic() < deadline, f"no HTTP server on port {port}"
                    time.sleep(0.05)
        yield ports
    finally:
        for process in processes:
            process.terminate()
            process.wait(timeout=10)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Stress-scale runs (marked `long`) wait for `make test-long`, which keeps `make test` in
    its minutes."""
    if LONG:
        return
    skip = pytest.mark.skip(reason="a stress-scale run: make test-long (AGENT_TEST_LONG=1)")
    for item in items:
        if item.get_closest_marker("long") is not None:
            item.add_marker(skip)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    """A webhook receiver on a port of its own (`tests.webhook_support`)."""
    r = Receiver()
    yield r
    r.close()
