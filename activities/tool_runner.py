"""Tool activities: the catalog, and one dynamic activity so each tool shows under its own name."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import TYPE_CHECKING

import httpx
import structlog
from pydantic import ValidationError
from temporalio import activity
from temporalio.common import RawValue
from temporalio.exceptions import ApplicationError

from ..contract import (
    JUDGE_CALLS_ACTIVITY,
    KEEP_GRANTS_ACTIVITY,
    LIST_TOOLS_ACTIVITY,
    MCP_LISTING_ACTIVITY,
    McpListing,
    Risk,
    ToolInvocation,
    ToolListRequest,
    ToolOutcome,
    WorkerHandshake,
)
from ..contract.bounds import MAX_FULL_RESULT_BYTES, truncate_observation, valid_text
from ..contract.memory import (
    MAX_RECALLED_BYTES,
    RECALL_ACTIVITY,
    RECALL_TOOL,
    Recalled,
    RecallRequest,
)
from ..contract.policy import (
    KeepGrants,
    PolicyCall,
    PolicyFacts,
    PolicyRequest,
    PolicyVerdicts,
    Verdict,
)
from ..rules.gate import POLICY, execution_refusal, may_decide, policy_reason
from ..rules.grants import ungrantable
from ..rules.memory import within_bytes
from . import telemetry
from .endpoints import Endpoints
from .heartbeat import heartbeating
from .memory import MemoryUnavailable, open_store
from .memory.search import search
from .models import model_routes
from .settings import ActivitySettings
from .tools import NeedsInput, ToolContext, ToolError, ToolRegistry
from .tools.memory import recall
from .tools.reporter import CallReporter
from .windows import Windows

if TYPE_CHECKING:
    from .mcp import McpToolbox

log = structlog.get_logger()


class ToolActivities:
    """Native tools from the registry, and MCP servers' tools when the worker has a toolbox."""

    def __init__(
        self, registry: ToolRegistry, settings: ActivitySettings, http: httpx.AsyncClient,
        mcp: McpToolbox | None = None,
        activity_queues: dict[str, str] | None = None,
    ):
        self._registry = registry
        self._settings = settings
        self._http = http
        self._mcp = mcp
        self._windows = Windows(http)  # the model windows the endpoints say, asked once
        # Set on a worker that runs workflow tasks only (`--role workflows`): conversations send
        # their model calls and tool runs to these queues, which other workers serve.
        self._activity_queues = activity_queues or {}
        # Quick safe reads run in the worker of the workflow task, unless this worker sends tool
        # runs elsewhere or is told not to (AGENT_LOCAL_TOOLS=off).
        self._local = settings.local_tools and not self._activity_queues
        # Memory is on where the worker has it and its registry has the built-in memory tools
        self._memory = settings.memory and registry.get(RECALL_TOOL) is recall
        self._endpoints: Endpoints | None = None  # the model entries, once a server samples

    @activity.defn(name=RECALL_ACTIVITY)
    async def recall_memories(self, request: RecallRequest) -> Recalled:
        """Before a turn: the owner's memories most relevant to its first message, within the
        worker's count (AGENT_MEMORY_RECALL) and the recalled block's byte bound."""
        if not self._memory or self._settings.memory_recall == 0:
            return Recalled()
        with telemetry.span("recall memories", {
                "gen_ai.operation.name": "recall_memories",
                "gen_ai.conversation.id": activity.info().workflow_id,
                "agent.owner": request.owner}) as span:
            found = await search(self._settings, request.owner, request.query,
                                 self._settings.memory_recall)
            kept = within_bytes(found, MAX_RECALLED_BYTES)
            telemetry.set_attributes(span, {"agent.memory.recalled": len(kept)})
        telemetry.count_memories("recalled", len(kept))
        log.info("memories recalled", recalled=[m.id for m in kept],
                 left_out=len(found) - len(kept))
        return Recalled(memories=kept)

    @activity.defn(name=LIST_TOOLS_ACTIVITY)
    async def list_tools(self, request: ToolListRequest | None = None) -> WorkerHandshake:
        """Every tool (native, MCP, and a tool per agent profile); for a subagent, those its
        profile allows, with the profile's system prompt."""
        allowed, models = self._settings.auto_approvable, self._settings.model_entries()
        floor = None if allowed is None else sorted(allowed)
        rules = {"auto_approvable": floor, "four_eyes": list(self._settings.four_eyes),
                 "memory": self._memory,
                 "policy_revision": self._settings.policy.revision if self._settings.policy
                 else None,
                 "owner_grants": self._settings.memory,
                 "owner_limits": self._settings.owner_limits is not None,
                 "activity_queues": self._activity_queues,
                 "webhooks": self._settings.webhooks.refs() if self._settings.webhooks else [],
                 "webhook_retry_s": self._settings.webhook_retry_s,
                 **model_routes(models, activity.info().task_queue,
                                await self._windows.of(models))}
        profiles = self._settings.profiles
        if request is not None and request.profile not in profiles.agents:
            return WorkerHandshake(tools=[], **rules,
                               errors=[f"no agent profile {request.profile!r} on this worker"])
        tools, errors = self._registry.definitions(local=self._local), []
        if self._mcp is not None:
            discovery = await heartbeating(self._mcp.discover())
            for error in discovery.errors:
                log.warning("tool source unavailable", error=error)
            tools, errors = tools + discovery.tools, discovery.errors
            rules["mcp_listing"] = discovery.listing
        tools = tools + profiles.tools()
        if request is None:
            return WorkerHandshake(tools=tools, errors=errors, **rules)
        return WorkerHandshake(tools=profiles.allowed(request.profile, tools), errors=errors, **rules,
                           system_prompt=profiles.agents[request.profile].system_prompt)

    @activity.defn(name=JUDGE_CALLS_ACTIVITY)
    async def judge_calls(self, request: PolicyRequest) -> PolicyVerdicts:
        """A round's calls under the worker's policy (`AGENT_POLICY`), as it is now; and for
        each that a person would decide, the owner's grant that lets it run instead, if one
        does (its use counted once under the call's key)."""
        policy, settings = self._settings.policy, self._settings
        judged = policy.judge(request, settings.policy_floor) if policy is not None else \
            PolicyVerdicts(revision=None,
                           verdicts=[Verdict(call_id=c.call_id) for c in request.calls])
        owner = request.facts.owner
        if settings.memory and owner:
            store = open_store(settings.memory_store_url)
            for call, verdict in zip(request.calls, judged.verdicts, strict=True):
                if call.use_key is None or verdict.effect not in ("ask", None) or \
                        (verdict.effect is None and not call.needs_person) or \
                        ungrantable(call.tool, call.risk, verdict.grantable, settings.four_eyes,
                                    True, verdict.quorum) is not None:
                    continue
                try:
                    verdict.grant = await asyncio.to_thread(
                        store.use_owner_grant, owner, call.tool, request.facts.at, call.use_key,
                        lambda g, v=verdict: may_decide(v.approvers, g.roles))
                except MemoryUnavailable as err:  # a person decides, as with no grant
                    log.warning("owner grants unavailable", error=str(err))
                    break
        log.info("calls judged", revision=(judged.revision or "none")[:12],
                 verdicts={v.call_id: v.effect for v in judged.verdicts if v.effect},
                 granted={v.call_id: v.grant.id for v in judged.verdicts if v.grant})
        return judged

    @activity.defn(name=KEEP_GRANTS_ACTIVITY)
    async def keep_grants(self, request: KeepGrants) -> None:
        """Owner grants a conversation made, into the store the workers share (keyed: a retry
        stores nothing twice)."""
        store = open_store(self._settings.memory_store_url)
        await asyncio.to_thread(store.keep_grants, request.owner, request.grants, request.uses,
                                request.conversation_id,
                                datetime.now(timezone.utc).isoformat())
        log.info("owner grants kept", grants=[g.id for g in request.grants])

    @activity.defn(name=MCP_LISTING_ACTIVITY)
    async def mcp_listing(self) -> McpListing:
        """Before a turn of a conversation with MCP servers: each server that lists its tools,
        and their digest, listed again where a server said its tools changed."""
        if self._mcp is None:
            return McpListing()
        return McpListing(servers=await heartbeating(self._mcp.listing()))

    @activity.defn(dynamic=True)
    async def run_tool(self, args: Sequence[RawValue]) -> ToolOutcome:
        name = activity.info().activity_type
        invocation = activity.payload_converter().from_payload(args[0].payload, ToolInvocation)
        with telemetry.span(f"execute_tool {name}", {
                "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name,
                "gen_ai.tool.call.id": invocation.call_id,
                "gen_ai.conversation.id": activity.info().workflow_id,
                "agent.tool.risk": invocation.risk, "agent.turn": invocation.turn,
                "agent.step": invocation.step, "agent.attempt": activity.info().attempt,
                "agent.approver": invocation.approval.approver if invocation.approval else None,
        }, content={"gen_ai.tool.call.arguments": invocation.arguments}) as span:
            outcome = await self._run(name, invocation)
            telemetry.set_attributes(span, {"agent.tool.status": outcome.status},
                                     content={"gen_ai.tool.call.result": outcome.observation})
            if outcome.status not in ("ok", "needs_input"):
                telemetry.set_error(span, outcome.observation[:200])
        return outcome

    async def _run(self, name: str, invocation: ToolInvocation) -> ToolOutcome:
        spec = self._registry.get(name)
        if spec is None and self._mcp is None:
            raise ApplicationError(
                f"this worker has no tool named {name!r}", type="UnknownTool", non_retryable=True
            )
        # (an MCP tool this process has not listed yet is listed first, heartbeating: a worker
        # started after a crash lists its servers here, which took longer than the heartbeat
        # timeout on a loaded machine, and a call that may not run twice was lost)
        known = spec.risk if spec is not None else await heartbeating(self._mcp.current_risk(name))
        # No server lists it right now (one may be flapping): it could be anything, so the worst.
        risk: Risk = known or "destructive"
        denied = self._denied(name, risk, invocation)
        if denied is not None:
            log.warning("tool refused at execution by the policy", reason=denied)
            return ToolOutcome(status="error", observation=f"Error: not run: {denied}")
        refusal = execution_refusal(name, risk, invocation, self._floor(name, risk, invocation))
        if refusal is not None:  # the gate, checked again where the call would run
            if known is None:
                refusal = f"no server lists {name} now, so it counts as destructive: {refusal}"
            log.warning("tool refused at execution", reason=refusal, risk=risk)
            return ToolOutcome(status="needs_approval", observation=f"Error: not run: {refusal}",
                               risk=risk)
        reporter = CallReporter(name, invocation.call_id, invocation.turn, invocation.step)
        if spec is None and self._mcp is not None:
            return await self._run_mcp(name, invocation, reporter)
        try:
            parsed = spec.args_model.model_validate(invocation.arguments)
        except ValidationError as exc:
            return ToolOutcome(status="error", observation=f"Error: invalid arguments for {name}: {exc}")
        ctx = ToolContext(
            settings=self._settings,
            http=self._http,
            call_id=invocation.call_id,
            idempotency_key=invocation.idempotency_key,
            owner=invocation.owner,
            conversation_id=activity.info().workflow_id,
            answer=invocation.answer,
            resume=invocation.resume,
            heartbeat_details=next(iter(activity.info().heartbeat_details), None),
            reporter=reporter,
        )
        try:
            observation = await heartbeating(spec.handler(parsed, ctx), beat=reporter.beat)
        except NeedsInput as exc:
            log.info("tool needs input", kind=exc.question.kind)
            return ToolOutcome(status="needs_input", question=exc.question, resume=exc.resume)
        except ToolError as exc:
            log.info("tool refused", error=str(exc))
            return bounded(ToolOutcome(status="error", observation=f"Error: {exc}"),
                           invocation.max_observation_bytes)
        finally:
            await reporter.aclose()
        observation = valid_text(observation)  # a tool's text, as it enters
        log.info("tool done", observation_bytes=len(observation.encode()))
        return bounded(ToolOutcome(status="ok", observation=observation),
                       invocation.max_observation_bytes, whole_key(invocation))

    def _facts(self, invocation: ToolInvocation) -> PolicyFacts:
        return PolicyFacts(owner=invocation.owner, turn=invocation.turn,
                           at=datetime.now(timezone.utc))

    def _denied(self, name: str, risk: Risk, invocation: ToolInvocation) -> str | None:
        """Why the worker's policy refuses this call, as it is now (a deny no approval lifts:
        arguments a person edited, a conversation judged before the rule came)."""
        policy = self._settings.policy
        if policy is None:
            return None
        verdict = policy.refusal(name, risk, invocation.arguments, self._facts(invocation))
        return None if verdict is None else policy_reason(False, verdict.rule, verdict.note)

    def _floor(self, name: str, risk: Risk, invocation: ToolInvocation
               ) -> frozenset[str] | None:
        """What a policy's approval may let run here: a rule's `allow` counts if the worker's
        policy allows the call still (within `policy_floor`); the conversation's own policy,
        the tools of AGENT_AUTO_APPROVE."""
        approval, policy = invocation.approval, self._settings.policy
        if approval is None or approval.approver != POLICY or approval.rule is None:
            return self._settings.auto_approvable
        if policy is None:
            return frozenset()
        request = PolicyRequest(calls=[PolicyCall(call_id=invocation.call_id, tool=name,
                                                  risk=risk, args=invocation.arguments)],
                                facts=self._facts(invocation))
        verdict = policy.judge(request, self._settings.policy_floor).verdicts[0]
        return None if verdict.effect in ("allow", "review") else frozenset()

    async def _run_mcp(self, name: str, invocation: ToolInvocation, reporter: CallReporter
                       ) -> ToolOutcome:
        """An MCP server's tool: its progress notifications reach the live stream, as a tool's
        do, and its sampling requests, with a grant, the conversation's model."""
        assert self._mcp is not None
        sampler = None
        if invocation.sampling is not None:
            # (here, as the toolbox is: the MCP SDK takes seconds to import on a busy machine,
            # which every worker without MCP servers, restarted after a crash, would wait for)
            from .mcp.sampling import CallSampler  # noqa: PLC0415
            if self._endpoints is None:
                self._endpoints = Endpoints(self._settings)
            sampler = CallSampler(self._endpoints, invocation.sampling,
                                  self._mcp.server_of(name) or name)
        try:
            outcome = await heartbeating(
                self._mcp.call(name, invocation.arguments, on_progress=reporter.progress,
                               elicited=invocation.elicited,
                               sampler=sampler.sample if sampler is not None else None),
                beat=reporter.beat)
        finally:
            await reporter.aclose()
        if sampler is not None and sampler.sampled:
            outcome = outcome.model_copy(update={"sampled": sampler.sampled})
        log.info("mcp tool done", status=outcome.status, sampled=len(outcome.sampled),
                 observation_bytes=len(outcome.observation.encode()))
        return bounded(outcome, invocation.max_observation_bytes, whole_key(invocation))


def whole_key(invocation: ToolInvocation) -> str | None:
    """The call id a cut result's whole is kept under, where this worker keeps it."""
    return invocation.call_id if keeps_full_results() else None


def bounded(outcome: ToolOutcome, max_bytes: int, call_id: str | None = None) -> ToolOutcome:
    """Cut an observation to `max_bytes` (of JSON) with a clear marker, recording the full size;
    with `call_id`, the whole result beside it (up to `MAX_FULL_RESULT_BYTES`), to be kept by
    reference."""
    observation, full = truncate_observation(outcome.observation, max_bytes)
    if full is None:
        return outcome
    update: dict[str, object] = {"observation": observation, "full_bytes": full}
    if call_id is not None:
        update.update(full=truncate_observation(outcome.observation, MAX_FULL_RESULT_BYTES)[0],
                      call_id=call_id)
    return outcome.model_copy(update=update)


def keeps_full_results() -> bool:
    """Whether this worker keeps large payloads by reference (its client's External Storage):
    without it, a whole result over Temporal's 2 MiB would fail the activity's completion."""
    try:
        return activity.client().data_converter.external_storage is not None
    except RuntimeError:  # no client (an activity run by hand, in a test)
        return False
