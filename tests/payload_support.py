"""A worker whose payloads go as the product's do: sealed with the tests' key, and over the
threshold kept by reference in a file store of its own (the `sealed` fixture, in conftest.py)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from temporalio.client import Client

from durable_react_agent.activities.profiles import AgentProfile
from durable_react_agent.activities.settings import ActivitySettings
from durable_react_agent.client.session import Session

# the subagent of the fan-out tests: it reads a report
READER = {"reader": AgentProfile(description="Reads reports", system_prompt="You read.",
                                 tools=["big_report"], max_steps=3)}


@dataclass
class Sealed:
    client: Client  # the product's converter: what the worker, the CLI and the API use
    queue: str
    store: Path
    session: Session
    settings: ActivitySettings  # the worker's
