"""Connecting to Temporal, shared by the worker and the CLI."""

from __future__ import annotations

import os
from dataclasses import dataclass

from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.envconfig import ClientConfig
from temporalio.runtime import Runtime


@dataclass(frozen=True)
class TemporalSettings:
    address: str = "127.0.0.1:7233"
    namespace: str = "default"
    task_queue: str = "react-agent"

    @classmethod
    def from_env(cls) -> TemporalSettings:
        env = os.environ
        return cls(
            address=env.get("TEMPORAL_ADDRESS") or cls.address,
            namespace=env.get("TEMPORAL_NAMESPACE") or cls.namespace,
            task_queue=env.get("AGENT_TASK_QUEUE") or cls.task_queue,
        )


async def connect(settings: TemporalSettings, runtime: Runtime | None = None) -> Client:
    """Connect with Temporal's env config (TEMPORAL_* variables or a TOML profile: TLS, API keys
    for Temporal Cloud), on top of the local dev server defaults; `runtime` serves the worker's
    metrics (`worker.telemetry.metrics_runtime`)."""
    config = ClientConfig.load_client_connect_config()
    config.setdefault("target_host", settings.address)
    config.setdefault("namespace", settings.namespace)
    return await Client.connect(**config, data_converter=pydantic_data_converter,
                                runtime=runtime)
