"""A worker whose payloads go as the product's do: sealed with the tests' key, and over the
threshold kept by reference in a store of its own (`sealed_worker`; the module's one is the
`sealed` fixture, in conftest.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
from temporalio.client import Client

from durable_react_agent.activities.profiles import AgentProfile
from durable_react_agent.activities.settings import ActivitySettings
from durable_react_agent.client.connection import TemporalSettings
from durable_react_agent.client.payloads import PayloadSettings, data_converter
from durable_react_agent.client.session import Session
from durable_react_agent.worker.app import build_worker
from tests.fake_tools import BIG_REPORT, registry_with_test_tools
from tests.helpers import unique

# the subagent of the fan-out tests: it reads a report
READER = {"reader": AgentProfile(description="Reads reports", system_prompt="You read.",
                                 tools=["big_report"], max_steps=3)}


@dataclass
class Sealed:
    client: Client  # the product's converter: what the worker, the CLI and the API use
    queue: str
    store: Path  # the file store's directory (unused by an S3 store)
    session: Session
    settings: ActivitySettings  # the worker's


@asynccontextmanager
async def sealed_worker(address: str, payloads: PayloadSettings, settings: ActivitySettings,
                        name: str) -> AsyncIterator[Sealed]:
    """A worker on a queue of its own (named after `name`), with the test tools and
    `big_report`, whose client (and a session over it) converts payloads by `payloads`."""
    client = await Client.connect(address, data_converter=data_converter(payloads))
    queue = unique(name)
    session = Session(client, TemporalSettings(task_queue=queue, payloads=payloads), 30)
    async with httpx.AsyncClient(timeout=10) as http, \
            build_worker(client, queue, settings, http, registry_with_test_tools(BIG_REPORT)):
        yield Sealed(client, queue, payloads.path, session, settings)
