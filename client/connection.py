"""Connecting to Temporal, and preparing its namespace, shared by the worker, the CLI and the
API."""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field

from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import AddSearchAttributesRequest
from temporalio.client import Client
from temporalio.envconfig import ClientConfig
from temporalio.runtime import Runtime
from temporalio.service import RPCError, RPCStatusCode

from ..rules.search_attributes import AGENT_OWNER, AGENT_STATUS
from .checks import NoWorker
from .payloads import PayloadSettings, data_converter

# The search attributes a conversation starts with and upserts: its namespace must know them.
CONVERSATION_ATTRIBUTES = (AGENT_STATUS, AGENT_OWNER)


@dataclass(frozen=True)
class TemporalSettings:
    address: str = "127.0.0.1:7233"
    namespace: str = "default"
    task_queue: str = "react-agent"
    # where large payloads are kept and the keys every payload is sealed with (AGENT_PAYLOAD_*)
    payloads: PayloadSettings = field(default_factory=PayloadSettings)

    @classmethod
    def from_env(cls, env: Mapping[str, str] = os.environ) -> TemporalSettings:
        """The settings of `env`; `PayloadConfigError` (a ValueError) for payload settings that
        cannot be used."""
        return cls(
            address=env.get("TEMPORAL_ADDRESS") or cls.address,
            namespace=env.get("TEMPORAL_NAMESPACE") or cls.namespace,
            task_queue=env.get("AGENT_TASK_QUEUE") or cls.task_queue,
            payloads=PayloadSettings.from_env(env),
        )


async def connect(settings: TemporalSettings, runtime: Runtime | None = None) -> Client:
    """Connect with Temporal's env config (TEMPORAL_* variables or a TOML profile: TLS, API keys
    for Temporal Cloud), on top of the local dev server defaults; `runtime` serves the worker's
    metrics (`worker.telemetry.metrics_runtime`). Payloads go through `client.payloads`."""
    config = ClientConfig.load_client_connect_config()
    config.setdefault("target_host", settings.address)
    config.setdefault("namespace", settings.namespace)
    return await Client.connect(**config, runtime=runtime,
                                data_converter=data_converter(settings.payloads))


async def register_search_attributes(client: Client, namespace: str) -> None:
    """Register `AgentStatus` and `AgentOwner` (idempotent): a workflow upserting an unknown
    attribute would fail every task, and a start naming one is refused. One request each, so an
    older deployment that has the first gains the second."""
    for key in CONVERSATION_ATTRIBUTES:
        request = AddSearchAttributesRequest(
            namespace=namespace,
            search_attributes={key.name: IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD},
        )
        try:
            await client.operator_service.add_search_attributes(request)
        except RPCError as err:
            if err.status != RPCStatusCode.ALREADY_EXISTS:
                raise


async def namespace_prepared(client: Client, refusal: RPCError) -> bool:
    """Whether Temporal refused a start for a search attribute of ours the namespace has no
    mapping for (sent before any worker prepared it), now registered as a worker does; where
    Temporal refuses this client that (Temporal Cloud without an admin's key), `NoWorker`
    saying how to do it."""
    if not (refusal.status == RPCStatusCode.INVALID_ARGUMENT
            and "no mapping defined for search attribute" in refusal.message
            and any(key.name in refusal.message for key in CONVERSATION_ATTRIBUTES)):
        return False
    try:
        await register_search_attributes(client, client.namespace)
    except RPCError as err:
        commands = "\n".join(f"  {shlex.join(create_command(client, key.name))}"
                             for key in CONVERSATION_ATTRIBUTES)
        raise NoWorker(
            f"the namespace {client.namespace} lacks the search attributes a conversation "
            f"needs, and Temporal refused to register them ({err.status.name}: {err.message}). "
            f"Start a worker once (it registers them), or run:\n{commands}") from None
    return True


def create_command(client: Client, name: str) -> list[str]:
    """The temporal CLI's registration of one attribute: one at a time, as given a list whose
    first name exists, the CLI (1.9) adds none of the rest."""
    return ["temporal", "operator", "search-attribute", "create",
            "--address", client.service_client.config.target_host,
            "--namespace", client.namespace, "--name", name, "--type", "Keyword"]
