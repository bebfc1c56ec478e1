"""Building the worker: one place that knows every workflow and activity of the agent."""

from __future__ import annotations

import os
from collections.abc import Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import httpx
import structlog
from temporalio.client import Client
from temporalio.worker import (
    Interceptor,
    UnsandboxedWorkflowRunner,
    Worker,
    WorkerDeploymentConfig,
    WorkflowRunner,
)
from temporalio.worker.workflow_sandbox import (
    SandboxedWorkflowRunner,
    SandboxRestrictions,
)

from .. import contract, rules
from ..activities.llm import LLMActivities
from ..activities.mcp import load_mcp_config
from ..activities.models import WORKER_ROLES, model_queue, role_queues
from ..activities.owner_limits import OwnerLimitActivities
from ..activities.settings import ActivitySettings
from ..activities.tool_runner import ToolActivities
from ..activities.tools import BUILTIN_TOOLS, ToolRegistry, ToolSpec, default_registry
from ..activities.tools.loader import load_tools
from ..activities.tools.memory import MEMORY_TOOLS
from ..activities.webhooks import WebhookActivities
from ..client.connection import CONVERSATION_ATTRIBUTES, register_search_attributes
from ..workflows.conversation import ConversationWorkflow
from ..workflows.owner_ledger import OwnerLedgerWorkflow
from ..workflows.signal_guard import SignalGuard
from .logging import LoggingInterceptor
from .telemetry import TelemetryInterceptor, Tracing

if TYPE_CHECKING:
    from ..activities.mcp import McpToolbox

log = structlog.get_logger()
# Libraries the workflow's code uses, imported once and shared by every workflow in the sandbox.
# The workflow's own modules (`workflows`) are not among them: the sandbox imports them afresh
# for each workflow, so what they do (the clock, randomness, I/O) is checked too.
SANDBOX_LIBRARIES = ("pydantic", "pydantic_core", "annotated_types", "typing_extensions",
                     "typing_inspection", "jsonschema", "jsonschema_specifications",
                     "referencing", "rpds", "attrs", "attr", "re2")
# Our pure layers, imported once too: the contract is data, and the rules are held pure by
# static checks (no clock, randomness, I/O or module state: tests/workflows/
# test_determinism_boundary.py). Importing them afresh for each workflow was two thirds of what a
# sandboxed worker spent on a short conversation; `check_rules` still does, for the replays that
# check them at run time as well. By their own names: the code runs under whatever root it is
# installed as.
PURE_LAYERS = (contract.__name__, rules.__name__)
# A workflow task waits this long for the worker that holds the conversation in its cache
# (10 s by default) before any worker may take it: after a SIGKILL, the recovery waits for it.
STICKY_TIMEOUT = timedelta(seconds=2)
WORKFLOWS = [ConversationWorkflow, OwnerLedgerWorkflow]  # a conversation, an owner's ledger
GRACEFUL_SHUTDOWN = timedelta(seconds=10)  # what activities in flight get when a worker stops
# An activity's heartbeats reach the server at most this far apart (by default 0.8 of its
# heartbeat timeout: 4 s of a tool's 5, which a loaded machine's late send overran, and a
# call that may not run twice was lost as "timed out (heartbeat)").
HEARTBEAT_THROTTLE = timedelta(seconds=1)
# Every worker's, whatever it serves.
WORKER_OPTIONS: dict[str, Any] = {"graceful_shutdown_timeout": GRACEFUL_SHUTDOWN,
                                  "max_heartbeat_throttle_interval": HEARTBEAT_THROTTLE}


async def ensure_search_attributes(client: Client, namespace: str) -> None:
    """Register the search attributes a conversation upserts before any is served (the CLI and
    the API do the same for a start that comes first)."""
    await register_search_attributes(client, namespace)
    log.info("search attributes ready", names=[key.name for key in CONVERSATION_ATTRIBUTES],
             namespace=namespace)


def build_worker(
    client: Client,
    task_queue: str,
    settings: ActivitySettings,
    http: httpx.AsyncClient,
    registry: ToolRegistry | None = None,
    mcp: McpToolbox | None = None,
    llm: LLMActivities | None = None,
    sandboxed: bool = True,
    workflows: bool = True,
    activities: bool = True,
    tracing: Tracing | None = None,
    tools: ToolActivities | None = None,
    **options: Any,
) -> Worker:
    """The agent's worker; `options` go to Temporal's `Worker` as they are.

    `sandboxed` runs workflow code in Temporal's sandbox, which refuses what workflow code must
    not do (I/O, the clock, randomness) at its first run instead of at a replay. The tests run it
    so; `agent-worker` runs without it unless `AGENT_WORKFLOW_SANDBOX=on`: it costs a
    production worker 30% of its CPU per step (importing a workflow's modules for every workflow
    it starts or replays, and entering the sandbox for every payload), and in production a
    refusal fails the workflow task just as a non-determinism error does. `workflows` and
    `activities` say which of the two it serves (both by default; a worker of workflows alone
    runs their local activities, and no other); `tracing`, when on, traces them
    (`worker.telemetry`); `tools`: its tool activities (an eval's answer from cases)."""
    llm = llm or LLMActivities(settings, temporal=client)
    tools = tools or ToolActivities(registry or default_registry(), settings, http, mcp)
    hooks = webhook_activities(settings, http)
    owners = OwnerLimitActivities(settings, client)
    if activities:
        served = [*model_activities(llm), *local_activities(tools, owners), hooks.notify]
    else:
        served = local_activities(tools, owners) if workflows else []
        options = {"no_remote_activities": True, **options}
    return Worker(
        client,
        task_queue=task_queue,
        workflows=WORKFLOWS if workflows else [],
        workflow_runner=workflow_runner(sandboxed),
        activities=served,
        interceptors=interceptors(tracing),
        **{**WORKER_OPTIONS, "sticky_queue_schedule_to_start_timeout": STICKY_TIMEOUT, **options},
    )


def local_activities(tools: ToolActivities, owners: OwnerLimitActivities) -> list[Any]:
    """What a workflow task may run itself, as local activities: a conversation's handshake,
    the quick safe reads its handshake marked local, a turn's recall of memories, its look
    at whether an MCP server's tools changed, a round's calls judged by the policy, the
    owner grants it keeps, a turn's ask for its owner's share; and an owner's ledger's look
    at whether its leases' holders have closed."""
    return [tools.list_tools, tools.run_tool, tools.recall_memories, tools.mcp_listing,
            tools.judge_calls, tools.keep_grants, owners.lease_owner_share,
            owners.closed_conversations]


def interceptors(tracing: Tracing | None) -> list[Interceptor]:
    """Every worker's: one log context per task, signals with one request, traces when on."""
    return [LoggingInterceptor(), SignalGuard(),
            *([TelemetryInterceptor(tracing)] if tracing is not None else [])]


def model_activities(llm: LLMActivities) -> list[Any]:
    """The activities that call a model endpoint."""
    return [llm.llm_step, llm.summarize, llm.review_call]


def role_workers(client: Client, task_queue: str, role: str, settings: ActivitySettings,
                 http: httpx.AsyncClient, registry: ToolRegistry, mcp: McpToolbox | None = None,
                 llm: LLMActivities | None = None, sandboxed: bool = True,
                 tracing: Tracing | None = None,
                 deployment: WorkerDeploymentConfig | None = None) -> list[Worker]:
    """The workers of one process, by its role (`agent-worker --role`):
    - `all`: workflow tasks, model calls and tool runs, on the task queue, as before;
    - `workflows`: workflow tasks only (and listing tools); its conversations send model calls
      and tool runs to the queues of `role_queues`, which `models` and `tools` workers serve;
    - `models`: model calls; `tools`: tool runs.
    Each also serves its rate-limited model entries' queues when it makes model calls. With a
    `deployment` (`worker.deployment`), every one of them is that Worker Deployment Version, so
    a pinned conversation's model calls and tool runs go to workers of its own version."""
    llm = llm or LLMActivities(settings, temporal=client)
    common: dict[str, Any] = {**WORKER_OPTIONS, "interceptors": interceptors(tracing),
                              "deployment_config": deployment}
    queues = role_queues(task_queue)
    if role == "all":
        workers = [build_worker(client, task_queue, settings, http, registry, mcp=mcp, llm=llm,
                                sandboxed=sandboxed, tracing=tracing,
                                deployment_config=deployment)]
    elif role == "workflows":
        lister = ToolActivities(registry, settings, http, mcp, activity_queues=queues)
        hooks = webhook_activities(settings, http)
        # The workflow tasks with their local activities (this worker's handshake marks no tool
        # local, but a conversation begun on a worker of all roles may have); and, as
        # activities on the task queue, deliveries and the handshakes of conversations begun
        # before handshakes ran locally. No other activity may reach this process.
        workers = [Worker(client, task_queue=task_queue, workflows=WORKFLOWS,
                          workflow_runner=workflow_runner(sandboxed),
                          activities=local_activities(lister, OwnerLimitActivities(
                              settings, client)), no_remote_activities=True,
                          sticky_queue_schedule_to_start_timeout=STICKY_TIMEOUT, **common),
                   Worker(client, task_queue=task_queue,
                          activities=[lister.list_tools, lister.mcp_listing, hooks.notify],
                          **common)]
    elif role == "models":
        workers = [Worker(client, task_queue=queues["models"], activities=model_activities(llm),
                          **common)]
    elif role == "tools":
        tools = ToolActivities(registry, settings, http, mcp)
        workers = [Worker(client, task_queue=queues["tools"], activities=[tools.run_tool],
                          **common)]
    else:
        raise ValueError(f"--role must be one of {', '.join(WORKER_ROLES)}, not {role!r}")
    if role in ("all", "models"):
        workers += model_workers(client, task_queue, settings, llm, tracing, deployment)
    return workers


def model_workers(client: Client, task_queue: str, settings: ActivitySettings,
                  llm: LLMActivities, tracing: Tracing | None = None,
                  deployment: WorkerDeploymentConfig | None = None) -> list[Worker]:
    """A worker per rate-limited model entry (`max_requests_per_s` in AGENT_MODELS), polling
    the entry's own task queue for its model calls. Temporal's server dispatches that queue's
    tasks at the entry's rate, so the rate holds across every worker process and host."""
    if settings.models is None:
        return []
    return [Worker(client, task_queue=model_queue(task_queue, name),
                   activities=model_activities(llm), max_task_queue_activities_per_second=rate,
                   interceptors=interceptors(tracing), deployment_config=deployment,
                   **WORKER_OPTIONS)
            for name, rate in settings.models.limited().items()]


def workflow_runner(sandboxed: bool = True, *, check_rules: bool = False) -> WorkflowRunner:
    """Temporal's sandbox, with the libraries and the pure layers passed through and the
    workflow's own modules checked (and the rules too with `check_rules`); or none
    (`agent-worker` unless `AGENT_WORKFLOW_SANDBOX=on`)."""
    if not sandboxed:
        return UnsandboxedWorkflowRunner()
    shared = SANDBOX_LIBRARIES + tuple(layer for layer in PURE_LAYERS
                                       if not (check_rules and layer == rules.__name__))
    return SandboxedWorkflowRunner(
        restrictions=SandboxRestrictions.default.with_passthrough_modules(*shared))


def webhook_activities(settings: ActivitySettings, http: httpx.AsyncClient) -> WebhookActivities:
    """Deliveries to the file's webhooks, and to A2A clients' push configs (kept in the memory
    store, where the API puts them)."""
    return WebhookActivities(settings.webhooks, http,
                             push_store=settings.memory_store_url if settings.memory else None)


def workflow_sandbox(value: str) -> bool:
    """`AGENT_WORKFLOW_SANDBOX`: `on` runs workflow code in Temporal's sandbox; `off` (the
    default) does not."""
    value = value.strip().lower()
    if value not in ("", "on", "off"):
        raise ValueError(f"AGENT_WORKFLOW_SANDBOX must be on or off, not {value!r}")
    return value == "on"


def tool_registry(settings: ActivitySettings, remote: Sequence[ToolSpec] = ()) -> ToolRegistry:
    """The built-in tools (unless `AGENT_BUILTIN_TOOLS=off`), memory's (unless `AGENT_MEMORY=off`),
    the remote agents' (`remote`, of `AGENT_A2A_AGENTS`), and those of the modules in
    `AGENT_TOOLS` and of installed packages (`ToolLoadError` if one cannot be used)."""
    builtin = (*(BUILTIN_TOOLS if settings.builtin_tools else ()),
               *(MEMORY_TOOLS if settings.memory else ()))
    return ToolRegistry(load_tools(settings.tool_modules, builtin,
                                   [("AGENT_A2A_AGENTS", remote)]))


def mcp_toolbox(settings: ActivitySettings) -> McpToolbox | None:
    """The MCP servers of `AGENT_MCP_CONFIG`, resolved here in the worker and nowhere else."""
    if settings.mcp_config is None:
        return None
    config = load_mcp_config(settings.mcp_config, os.environ)
    for error in config.errors:
        log.warning("mcp server left out", error=error)
    log.info("mcp servers configured", servers=[s.name for s in config.servers])
    from ..activities.mcp import McpToolbox  # noqa: PLC0415 (the MCP SDK, only when configured)

    return McpToolbox(config, log_dir=settings.data_dir / "mcp-logs")
