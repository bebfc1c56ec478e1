"""Run the agent worker until SIGINT or SIGTERM: `agent-worker [--processes N] [--role R]
[--deployment NAME --build-id ID]`."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import subprocess
import sys
import time
from contextlib import AsyncExitStack

import httpx
import structlog
from temporalio.client import Client
from temporalio.runtime import Runtime

from ..activities.mcp import McpConfigError
from ..activities.models import WORKER_ROLES
from ..activities.settings import ActivitySettings
from ..activities.tools import ToolSpec
from ..activities.tools.loader import ToolLoadError
from ..client.connection import TemporalSettings, connect
from ..client.payload_store import close_store
from ..contract.names import version_label
from .app import (
    ensure_search_attributes,
    mcp_toolbox,
    role_workers,
    tool_registry,
    workflow_sandbox,
)
from .deployment import (
    DeploymentRefused,
    deployment_config,
    registered,
    version_from,
)
from .epochs import earlier_epoch
from .logging import configure_logging
from .policy import announce_policy
from .telemetry import Tracing, metrics_runtime

log = structlog.get_logger()


CONNECT_PATIENCE_S = 120.0


async def connect_patiently(temporal: TemporalSettings, runtime: Runtime | None = None
                            ) -> Client:
    """A worker may start before its server (docker compose, systemd): wait for it."""
    deadline = asyncio.get_running_loop().time() + CONNECT_PATIENCE_S
    while True:
        try:
            return await connect(temporal, runtime)
        except RuntimeError as err:
            if asyncio.get_running_loop().time() > deadline:
                raise
            log.warning("waiting for Temporal", address=temporal.address, error=str(err))
            await asyncio.sleep(2)


async def remote_tools(settings: ActivitySettings) -> list[ToolSpec]:
    """The tools of `AGENT_A2A_AGENTS`' agents (a2a-sdk's client, imported only then)."""
    if settings.remote_agents is None:
        return []
    from ..activities.a2a_calls import remote_agent_tools  # noqa: PLC0415

    return await remote_agent_tools(settings.remote_agents)


async def main(role: str = "all", deployment: str | None = None,
               build_id: str | None = None) -> None:
    configure_logging()
    try:
        version = version_from(deployment, build_id, os.environ)
    except DeploymentRefused as err:
        log.error("cannot start: bad deployment", error=str(err))
        raise SystemExit(2) from None
    try:
        temporal = TemporalSettings.from_env()
        settings = ActivitySettings.from_env()
        sandboxed = workflow_sandbox(os.environ.get("AGENT_WORKFLOW_SANDBOX", ""))
        tracing = Tracing.from_env()
        runtime = metrics_runtime()
    except ValueError as err:
        log.error("cannot start: bad environment", error=str(err))
        raise SystemExit(2) from None
    try:
        registry = tool_registry(settings, await remote_tools(settings))
    except ToolLoadError as err:
        log.error("cannot start: cannot load tools", source=err.source, error=err.reason)
        raise SystemExit(2) from None
    if tracing is not None:
        tracing.install()
    client = await connect_patiently(temporal, runtime)
    await ensure_search_attributes(client, temporal.namespace)
    if role in ("all", "workflows"):  # the code that replays histories
        refusal = await earlier_epoch(client, temporal.task_queue, version is not None,
                                      temporal.address, temporal.namespace)
        if refusal is not None:
            log.error("cannot start: conversations of 0.x on this task queue", error=refusal)
            raise SystemExit(2)
    stop = asyncio.Event()
    refused = False  # the server never registered the deployment version
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        mcp = mcp_toolbox(settings)
    except McpConfigError as err:
        log.error("cannot start: bad MCP config", error=str(err))
        raise SystemExit(2) from None
    async with httpx.AsyncClient(timeout=httpx.Timeout(15.0)) as http, AsyncExitStack() as stack:
        workers = role_workers(client, temporal.task_queue, role, settings, http, registry,
                               mcp=mcp, sandboxed=sandboxed, tracing=tracing,
                               deployment=deployment_config(version))
        for worker in workers:
            await stack.enter_async_context(worker)
        if version is not None:
            try:
                await registered(client, temporal.namespace, version)
            except DeploymentRefused as err:
                log.error("cannot start: bad deployment", error=str(err))
                refused = True
        if not refused:
            log.info(
                "worker started",
                address=temporal.address,
                namespace=temporal.namespace,
                task_queue=temporal.task_queue,
                role=role,
                queues=[w.task_queue for w in workers],
                model=settings.openai_model,
                base_url=settings.openai_base_url or "default",
                workflow_sandbox="on" if sandboxed else "off",
                tools=registry.names(),
                tracing="on" if tracing is not None else "off",
                metrics=os.environ.get("AGENT_METRICS_ADDRESS") or "off",
                model_entries=list(settings.model_entries().entries),
                version=version_label(version) or "unversioned",
                policy=settings.policy.revision[:12] if settings.policy else "none",
                payloads=temporal.payloads.describe(),
                sealed=bool(temporal.payloads.keys),
            )
            if settings.policy is not None and role in ("all", "workflows"):
                await announce_policy(client, temporal.task_queue, settings.policy.revision)
            await stop.wait()
            log.info("worker stopping")
    if mcp is not None:
        await mcp.aclose()
    await close_store(client.data_converter)
    if tracing is not None:
        tracing.shutdown()  # what is still queued goes out
    log.info("worker stopped")
    if refused:
        raise SystemExit(2)


RESTART_DELAY_S = 1.0


def supervise(processes: int, role: str = "all", deployment: str | None = None,
              build_id: str | None = None) -> int:
    """Run `processes` workers on the same task queue, each its own process (Python runs one
    worker's workflow code on one core), restarting one that dies; stop them all on SIGINT or
    SIGTERM. Conversations move between them freely: any worker can continue any conversation."""
    configure_logging()
    stopping = False

    def stop(*_: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    command = [sys.executable, "-m", "durable_react_agent.worker", "--role", role,
               *(["--deployment", deployment] if deployment is not None else []),
               *(["--build-id", build_id] if build_id is not None else [])]
    children = [subprocess.Popen(command) for _ in range(processes)]
    log.info("workers started", processes=processes, pids=[c.pid for c in children])
    while not stopping:
        time.sleep(0.2)
        for i, child in enumerate(children):
            code = child.poll()
            if code is not None and not stopping:
                if code == 2:  # a configuration error: restarting would fail the same way
                    log.error("a worker cannot start; stopping", exit_code=code)
                    stopping = True
                    break
                log.warning("a worker died; starting another", pid=child.pid, exit_code=code)
                time.sleep(RESTART_DELAY_S)
                children[i] = subprocess.Popen(command)
    for child in children:
        if child.poll() is None:
            child.terminate()
    codes = [child.wait() for child in children]
    log.info("workers stopped", exit_codes=codes)
    return 2 if 2 in codes else 0


def cli() -> None:
    parser = argparse.ArgumentParser(prog="agent-worker", description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=1, metavar="N",
                        help="worker processes on the task queue (default 1; use one per core)")
    parser.add_argument("--role", choices=WORKER_ROLES, default="all",
                        help="what this process serves: all (default), workflows (workflow tasks "
                             "only; model calls and tool runs go to the models and tools queues), "
                             "models (model calls), tools (tool runs)")
    parser.add_argument("--deployment", metavar="NAME",
                        help="run as a Temporal Worker Deployment Version with --build-id "
                             "(default: AGENT_DEPLOYMENT; neither: unversioned)")
    parser.add_argument("--build-id", metavar="ID",
                        help="this build's id in the deployment (default: AGENT_BUILD_ID)")
    args = parser.parse_args()
    if args.processes < 1:
        parser.error("--processes must be at least 1")
    if args.processes > 1:
        raise SystemExit(supervise(args.processes, args.role, args.deployment, args.build_id))
    try:
        asyncio.run(main(args.role, args.deployment, args.build_id))
    except SystemExit as refused:  # "cannot start: ...", logged; maybe after connecting
        exit_now(refused.code if isinstance(refused.code, int) else 1)
    exit_now()


def exit_now(code: int = 0) -> None:
    """Leave once the worker has stopped, without the interpreter's finalization: Temporal's
    core threads can still be winding down then, and one that takes the GIL while Python
    finalizes aborts the process (seen under load: "Fatal Python error: PyGILState_Release:
    thread state ... must be current when releasing", exit -6, after "worker stopped").
    Everything worth keeping is done by then: the workers drained, traces flushed, logs written."""
    sys.stdout.flush()
    sys.stderr.flush()
    logging.shutdown()
    os._exit(code)


if __name__ == "__main__":
    cli()
