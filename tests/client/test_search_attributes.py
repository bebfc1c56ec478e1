"""A start sent before any worker prepared the namespace: the CLI and the API register the search
attributes as a worker does and start; where Temporal refuses them that, they say how."""

from __future__ import annotations

import asyncio
import shlex
import subprocess
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import pytest
from google.protobuf.duration_pb2 import Duration
from temporalio.api.workflowservice.v1 import RegisterNamespaceRequest
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from durable_react_agent.activities.settings import ActivitySettings
from durable_react_agent.api.app import create_app
from durable_react_agent.api.settings import ApiSettings
from durable_react_agent.client.checks import NoWorker
from durable_react_agent.client.connection import TemporalSettings
from durable_react_agent.client.session import Session
from durable_react_agent.contract import ConversationInput
from durable_react_agent.rules.search_attributes import AGENT_OWNER, AGENT_STATUS
from durable_react_agent.worker.app import build_worker
from tests.devserver import temporal_cli
from tests.fake_tools import registry_with_test_tools


async def unprepared_namespace(client: Client) -> Client:
    """A client of a new namespace, which knows none of the conversation's search attributes
    (the tests' dev server registers them only in `default`)."""
    namespace = f"fresh-{uuid.uuid4().hex[:8]}"
    for attempt in range(5):  # a loaded dev server may cancel the registration; it is idempotent
        try:
            await client.workflow_service.register_namespace(RegisterNamespaceRequest(
                namespace=namespace, workflow_execution_retention_period=Duration(seconds=86400)))
            break
        except RPCError as err:
            if err.status == RPCStatusCode.ALREADY_EXISTS:  # an attempt that was taken after all
                break
            if err.status not in (RPCStatusCode.CANCELLED, RPCStatusCode.DEADLINE_EXCEEDED) \
                    or attempt == 4:
                raise
            await asyncio.sleep(1)
    return await Client.connect(client.service_client.config.target_host, namespace=namespace,
                                data_converter=client.data_converter)


@asynccontextmanager
async def a_worker(client: Client, settings: ActivitySettings) -> AsyncIterator[str]:
    """A worker on a queue of its own, as the tests' workers are built: it registers nothing
    (`agent-worker` does, at its start), so the namespace stays unprepared."""
    queue = f"fresh-{uuid.uuid4().hex[:6]}"
    async with httpx.AsyncClient(timeout=10) as http, \
            build_worker(client, queue, settings, http, registry_with_test_tools()):
        yield queue


async def test_a_cli_start_before_any_worker_prepared_the_namespace_registers_the_attributes_and_starts(
        client: Client, cli, activity_settings: ActivitySettings):
    fresh = await unprepared_namespace(client)
    async with a_worker(fresh, activity_settings) as queue:
        started = await cli("start", "--id", "first", "hello", extra_env={
            "TEMPORAL_NAMESPACE": fresh.namespace, "AGENT_TASK_QUEUE": queue})
    assert started.returncode == 0, started.stderr
    assert started.stdout.strip() == "first"
    description = await fresh.get_workflow_handle("first").describe()
    assert description.typed_search_attributes.get(AGENT_STATUS) in ("running", "idle")


async def test_an_api_start_before_any_worker_prepared_the_namespace_registers_the_attributes_and_starts(
        client: Client, activity_settings: ActivitySettings):
    fresh = await unprepared_namespace(client)
    async with a_worker(fresh, activity_settings) as queue:
        app = create_app(ApiSettings.from_env({}), TemporalSettings(namespace=fresh.namespace,
                                                                    task_queue=queue))
        app.state.client = fresh  # the lifespan, which would connect, does not run in-process
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as api:
            answer = await api.post("/conversations", json={"id": "first", "prompt": "hello"})
    assert answer.status_code == 201, answer.text
    description = await fresh.get_workflow_handle("first").describe()
    assert description.typed_search_attributes.get(AGENT_OWNER) is not None


async def test_where_temporal_refuses_the_registration_the_commands_it_prints_do_it(
        client: Client, activity_settings: ActivitySettings, monkeypatch: pytest.MonkeyPatch):
    fresh = await unprepared_namespace(client)

    async def refused(*_, **__):
        raise RPCError("Request unauthorized.", RPCStatusCode.PERMISSION_DENIED, b"")

    monkeypatch.setattr(fresh.operator_service, "add_search_attributes", refused)
    async with a_worker(fresh, activity_settings) as queue:
        session = Session(fresh, TemporalSettings(namespace=fresh.namespace, task_queue=queue),
                          timeout_s=10)
        with pytest.raises(NoWorker) as told:
            await session.start(ConversationInput(prompt="hello"), "first")
        message = str(told.value)
        commands = [line.strip() for line in message.splitlines()
                    if line.startswith("  temporal ")]
        assert "PERMISSION_DENIED" in message and "Start a worker once" in message
        assert len(commands) == 2
        for command in commands:
            argv = shlex.split(command)
            done = await asyncio.to_thread(subprocess.run, [temporal_cli(), *argv[1:]],
                                           capture_output=True, text=True, timeout=30)
            assert done.returncode == 0, done.stderr
        assert await session.start(ConversationInput(prompt="hello"), "first")  # registered
