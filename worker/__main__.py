"""Run the agent worker until SIGINT or SIGTERM."""

from __future__ import annotations

import asyncio
import signal

import httpx
import structlog
from temporalio.client import Client

from activities.mcp import McpConfigError
from activities.settings import ActivitySettings
from client.connection import TemporalSettings, connect
from worker.app import build_worker, ensure_search_attributes, mcp_toolbox
from worker.logging import configure_logging

log = structlog.get_logger()


CONNECT_PATIENCE_S = 120.0


async def connect_patiently(temporal: TemporalSettings) -> Client:
    """A worker may start before its server (docker compose, systemd): wait for it."""
    deadline = asyncio.get_running_loop().time() + CONNECT_PATIENCE_S
    while True:
        try:
            return await connect(temporal)
        except RuntimeError as err:
            if asyncio.get_running_loop().time() > deadline:
                raise
            log.warning("waiting for Temporal", address=temporal.address, error=str(err))
            await asyncio.sleep(2)


async def main() -> None:
    configure_logging()
    temporal = TemporalSettings.from_env()
    try:
        settings = ActivitySettings.from_env()
    except ValueError as err:
        log.error("cannot start: bad environment", error=str(err))
        raise SystemExit(2) from None
    client = await connect_patiently(temporal)
    await ensure_search_attributes(client, temporal.namespace)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        mcp = mcp_toolbox(settings)
    except McpConfigError as err:
        log.error("cannot start: bad MCP config", error=str(err))
        raise SystemExit(2) from None
    async with httpx.AsyncClient(timeout=httpx.Timeout(15.0)) as http:
        worker = build_worker(client, temporal.task_queue, settings, http, mcp=mcp)
        async with worker:
            log.info(
                "worker started",
                address=temporal.address,
                namespace=temporal.namespace,
                task_queue=temporal.task_queue,
                model=settings.openai_model,
                base_url=settings.openai_base_url or "default",
            )
            await stop.wait()
            log.info("worker stopping")
    if mcp is not None:
        await mcp.aclose()
    log.info("worker stopped")


if __name__ == "__main__":
    asyncio.run(main())
