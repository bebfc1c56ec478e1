"""The handshake with the worker: once per conversation, the `list_tools` activity (the tools,
and the worker's configuration: `WorkerHandshake`), then what the conversation keeps of it. The catalog lives in the state (so replays never list again), with the ask_* tools
first; what was left out, and why, goes to the status."""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy

from ..contract import (
    LIST_TOOLS_ACTIVITY,
    MCP_LISTING_ACTIVITY,
    ApprovalPolicy,
    McpListing,
    ToolListRequest,
    WorkerHandshake,
)
from ..contract.bounds import MAX_SYSTEM_PROMPT_BYTES, Limits, clip_bytes
from ..contract.memory import RECALL_TOOL
from ..contract.state import ConversationState, ModelRoutes
from ..rules.gate import policy_refusal
from ..rules.listing import changed_servers
from ..rules.questions import ASK_TOOLS
from ..rules.start_input import admitted_tools
from .failures import ACTIVITY_FAILURES, failure_reason, raise_if_cancelled


async def shake_hands(state: ConversationState, limits: Limits,
                      policy: ApprovalPolicy, profile: str | None = None) -> str | None:
    """Fill the state's catalog (a subagent's: its profile's tools, and its system prompt).
    Returns why the conversation must be refused, if its approval policy asks for more than the
    worker allows (the worker holds that floor); a discovery that fails leaves the ask_* tools
    and a notice, and the conversation goes on. The worker of this workflow task answers, as a
    local activity (every worker of the task queue lists the tools)."""
    state.catalog = {t.name: t.model_copy() for t in ASK_TOOLS}  # this conversation's own
    args = [] if profile is None else [ToolListRequest(profile=profile)]  # the same command as ever
    options = dict(
        args=args,
        result_type=WorkerHandshake,
        start_to_close_timeout=timedelta(seconds=60),
        retry_policy=RetryPolicy(maximum_attempts=5, maximum_interval=timedelta(seconds=10)),
        summary="list tools" if profile is None else f"list tools of agent {profile}",
    )
    try:
        catalog = await workflow.execute_local_activity(LIST_TOOLS_ACTIVITY, **options)
    except ACTIVITY_FAILURES as err:
        raise_if_cancelled(err)
        state.notice(f"tools unavailable: {failure_reason(err)}")
        workflow.logger.warning("tool discovery failed: %s", state.notices[-1])
        return None
    kept, notices = admitted_tools([t for t in catalog.tools if t.name not in state.catalog], limits)
    for notice in [*catalog.errors, *notices]:
        workflow.logger.warning("tool source unavailable: %s", notice)
        state.notice(notice)
    state.catalog.update({t.name: t for t in kept})
    state.four_eyes = list(catalog.four_eyes)
    state.models = ModelRoutes(entries=catalog.model_entries, default=catalog.default_model_entry,
                               fallbacks=catalog.model_fallbacks, queues=catalog.model_queues,
                               shared=catalog.activity_queues.get("models"),
                               limits=catalog.model_limits)
    state.tool_queue = catalog.activity_queues.get("tools")
    state.mcp_listing = catalog.mcp_listing
    state.memory = catalog.memory and RECALL_TOOL in state.catalog
    state.policy_revision = catalog.policy_revision
    state.owner_grants = catalog.owner_grants
    state.owner_limits = catalog.owner_limits
    state.webhooks, state.webhook_retry_s = list(catalog.webhooks), catalog.webhook_retry_s
    if catalog.system_prompt is not None:
        state.context.system_prompt = clip_bytes(catalog.system_prompt, MAX_SYSTEM_PROMPT_BYTES,
                                                 "system prompt")
    return policy_refusal(policy, state.catalog.values(), catalog.auto_approvable)


async def tools_changed(state: ConversationState) -> list[str]:
    """Before a turn of a conversation with MCP servers: the servers whose tools changed since
    its handshake (one said so, and the worker lists them otherwise now). A look that fails
    changes nothing: the conversation keeps the tools it has."""
    if state.mcp_listing is None:
        return []
    options = dict(result_type=McpListing, start_to_close_timeout=timedelta(seconds=60),
                   retry_policy=RetryPolicy(maximum_attempts=3), summary="MCP tools changed?")
    try:
        now = await workflow.execute_local_activity(MCP_LISTING_ACTIVITY, **options)
    except ACTIVITY_FAILURES as err:
        raise_if_cancelled(err)
        workflow.logger.warning("could not tell whether MCP tools changed: %s",
                                failure_reason(err))
        return []
    changed = changed_servers(state.mcp_listing, now.servers)
    if changed:
        workflow.logger.info("the tools of %s changed: listing them again", ", ".join(changed))
    return changed

