"""The conversation's state: one typed model, held by the workflow and carried whole by
continue-as-new. A new turn starts from a fresh `TurnState`; every list here has a bound
(`contract.bounds`)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field

from .bounds import MAX_ERROR_BYTES, MAX_NOTICES, clip, keep_last
from .inputs import SignalOutcome
from .models import (
    ChatMessage,
    Decision,
    EntryLimits,
    NotifyRequest,
    Risk,
    StopReason,
    ToolDefinition,
    Usage,
    WebhookRef,
)
from .owner import Lease, TurnShare
from .policy import Grant
from .status import AuditRecord, ChildReport, TurnSummary


@dataclass(frozen=True)
class CallRecord:
    """A tool call as loop detection sees it (`rules.stopping`): the tool, and digests of its
    normalised args and of its result (small, whatever the sizes)."""

    tool: str
    args_key: str
    result_key: str


class RanCall(BaseModel):
    """A call that ran (or was decided) this turn, as a restated call is told from it
    (`rules.repeats`): the tool, a digest of the tool and its arguments, and its id."""

    tool: str
    key: str
    call_id: str


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def call_record_of_key(tool: str, args_json: str, result_key: str) -> CallRecord:
    """The record of normalised args (as JSON) and a result digest, as earlier versions kept them."""
    return CallRecord(tool=tool, args_key=digest(args_json), result_key=result_key)


class StreamItem(BaseModel):
    topic: str
    data: str  # base64 of the serialized Payload
    offset: int = 0


class StreamPublisher(BaseModel):
    sequence: int
    last_seen: datetime


class StreamSnapshot(BaseModel):
    """The live stream's state as continue-as-new carries it: Temporal's `WorkflowStreamState`,
    field for field (the same JSON), without importing Temporal's workflow API here
    (`workflows.reporting` turns one into the other)."""

    log: list[StreamItem] = []
    base_offset: int = 0
    publishers: dict[str, StreamPublisher] = {}

DEFAULT_ENTRY = "default"  # the one entry OPENAI_* describe, without AGENT_MODELS


class TurnState(BaseModel):
    """What one turn keeps; the next turn starts from `TurnState(number=n + 1, in_progress=True)`."""

    number: int = 0
    in_progress: bool = False  # a run that starts with this set resumes the turn mid-way
    steps: int = 0
    llm_calls: int = 0
    usage: Usage = Field(default_factory=Usage)
    tools_used: list[str] = []
    stop_reason: StopReason | None = None
    final_answer: str | None = None
    final_output: Any = None  # the final answer's JSON, with an output schema
    corrections: int = 0  # answers sent back for missing the output schema
    reminders: int = 0  # replies sent back for a call written in a shape that was not read
    error: str | None = None
    forced_reason: StopReason | None = None  # a stopping rule fired: the next call is the last
    fallbacks: int = 0  # model calls a fallback entry answered
    call_records: list[CallRecord] = []  # the latest two, for loop detection
    ran: list[RanCall] = []  # the latest calls that ran this turn (`rules.repeats`)
    questions_in_a_row: int = 0  # questions asked this turn since a tool last ran
    decisions: list[Decision] = []
    children: list[ChildReport] = []  # subagents started this turn, and what they wait for
    share: TurnShare | None = None  # its lease of the owner's share (AGENT_OWNER_LIMITS)
    # the turn's span (W3C traceparent: `workflows.telemetry`) and when the turn began
    trace: str | None = None
    started_at: datetime | None = None


class ModelRoutes(BaseModel):
    """Where model calls go (`AGENT_MODELS`, as the worker told it when the conversation
    began): an entry's fallbacks, and the task queue of each rate-limited entry."""

    entries: list[str] = []
    default: str | None = None
    fallbacks: dict[str, list[str]] = {}
    queues: dict[str, str] = {}
    shared: str | None = None  # every other model call's queue, when workers split the roles
    limits: dict[str, EntryLimits] = {}  # by entry (`AGENT_MODELS`, or what its server says)

    def chain(self, model: str | None) -> list[str | None]:
        """The entries a call for `model` tries in turn: [None] (the one `model` names, as
        before entries) unless `model` resolves to an entry with fallbacks."""
        entry = model if model in self.entries else self.default
        if entry is None or not self.fallbacks.get(entry):
            return [None]
        return [None, *self.fallbacks[entry]]

    def limits_of(self, model: str | None, entry: str | None = None) -> EntryLimits:
        """The limits of the entry a call goes to (`entry`, else the one `model` names, else
        the default): none set, the conversation's own."""
        name = entry or (model if model in self.entries else self.default) or DEFAULT_ENTRY
        return self.limits.get(name) or EntryLimits()

    def queue(self, model: str | None, entry: str | None) -> str | None:
        """The task queue of the entry a call goes to (None: the conversation's own)."""
        name = entry or (model if model in self.entries else self.default)
        return (self.queues.get(name) if name else None) or self.shared


class ContextState(BaseModel):
    """What the model is shown: the system prompt, a running summary of the turns folded away, and
    the latest turns verbatim (the current turn last, its older tool rounds compacted)."""

    system_prompt: str
    summary: str | None = None
    folded_turns: int = 0  # turns no longer in `messages`: summarized, or dropped
    folded_steps: int = 0  # model steps those turns took
    dropped_turns: int = 0  # of the folded turns, those dropped because summarizing failed
    drop_reason: str | None = None
    messages: list[ChatMessage] = []
    token_ratio: float = 1.0  # tokens the endpoint counts per estimated token, from its usage
    prompt_tokens: int = 0  # what the endpoint counted for the latest prompt
    window_tokens: int | None = None  # the model's window, as an endpoint's refusal said it
    # user messages' tokens as the model's server counted them, by `rules.context.text_digest`
    # of their text (the latest few)
    counted: dict[str, int] = {}


class ConversationState(BaseModel):
    context: ContextState
    current: TurnState = Field(default_factory=TurnState)
    inbox: list[str] = []  # accepted messages waiting for their turn
    steering: list[str] = []  # messages steered into the turn in flight, for its next step
    catalog: dict[str, ToolDefinition] = {}
    four_eyes: list[Risk] = []  # risks decided by someone other than the owner (the worker's)
    tool_queue: str | None = None  # where tool runs go, when workers split the roles
    memory: bool = False  # each turn recalls the owner's memories (the worker has memory on)
    webhooks: list[WebhookRef] = []  # whom events are delivered to (the worker's AGENT_WEBHOOKS)
    pushes: list[WebhookRef] = []  # and A2A clients' push notification configs (`PushTargets`)
    webhook_retry_s: float = 3600.0
    outbox: list[NotifyRequest] = []  # deliveries not yet done (a handover re-sends them)
    notified: int = 0  # deliveries made so far: part of each one's key
    reported: int = 0  # reports a subagent sent its parent so far: each one's `seq`
    models: ModelRoutes = Field(default_factory=lambda: ModelRoutes())  # the worker's entries
    # the Worker Deployment Version (`NAME:ID`) whose handshake filled the catalog, entries and
    # rules above: a run that starts on another version at a turn boundary shakes hands again
    handshake_version: str | None = None
    # each MCP server's digest of its tools, as the handshake listed them (None: no MCP servers)
    mcp_listing: dict[str, str] | None = None
    notices: list[str] = []  # what went wrong outside any turn: tool sources, a refused first message
    llm_calls: int = 0
    usage: Usage = Field(default_factory=Usage)
    turns: list[TurnSummary] = []  # the latest finished turns
    seen_call_ids: list[str] = []
    past_calls: list[tuple[str, str]] = []  # call id → why a decision about it is stale
    # the worker's approval policy as the latest round was judged by (None: none)
    policy_revision: str | None = None
    grants: list[Grant] = []  # people's approvals, remembered (`rules.grants`)
    grants_made: int = 0  # each grant's number
    owner_grants: bool = False  # the worker keeps owner grants (the handshake said so)
    owner_limits: bool = False  # the worker holds owners to AGENT_OWNER_LIMITS (`OwnerShare`)
    # the ledger's grants of asks this conversation's turn has not taken yet: one may come
    # before the ask's answer, even before a retried first workflow task has begun the turn
    early_grants: list[Lease] = []
    # owner grants made here and not yet kept in the workers' store, and their uses so far
    grants_to_keep: list[Grant] = []
    kept_uses: list[tuple[str, str]] = []
    outcomes: list[SignalOutcome] = []  # the latest signals' outcomes, for clients to read
    end_requested: bool = False
    runs: int = 1
    audit: list[AuditRecord] = []
    audit_dropped: int = 0
    stream: StreamSnapshot | None = None

    def notice(self, text: str) -> None:
        """Keep a notice for the status (the latest few, each clipped)."""
        self.notices = keep_last([*self.notices, clip(text, MAX_ERROR_BYTES) or ""], MAX_NOTICES)

    def count_model_call(self, usage: Usage, failed: bool = False) -> None:
        """One more model call of the current turn, and what it used; a failed one reported no
        tokens (counted apart, `Usage.failed_calls`), and is no call in `llm_calls`."""
        turn = self.current
        if failed:
            usage = Usage(failed_calls=1)
        else:
            self.llm_calls += 1
            turn.llm_calls += 1
        self.usage = self.usage + usage
        turn.usage = turn.usage + usage
        if turn.share is not None:  # what it spent of its owner's share
            turn.share.used_tokens += usage.total_tokens
            turn.share.used_usd += usage.known_cost


class CarriedState(BaseModel):
    """What continue-as-new carried before `ConversationState`. Runs started by earlier versions
    begin from it; `from_carried` turns it into the state."""

    messages: list[ChatMessage]
    inbox: list[str]
    catalog: list[ToolDefinition]
    setup_errors: list[str]
    turn: int
    steps: int
    llm_calls: int
    turn_llm_calls: int
    tools_used: list[str]
    stop_reason: StopReason | None
    final_answer: str | None
    error: str | None
    usage: Usage
    turn_usage: Usage
    turns: list[TurnSummary]
    in_turn: bool
    forced_reason: StopReason | None
    call_records: list[tuple[str, str, str]]
    seen_call_ids: list[str]
    outcomes: list[SignalOutcome]
    past_calls: list[tuple[str, str]]
    decisions: list[Decision]
    end_requested: bool
    runs: int
    audit: list[AuditRecord] = []
    audit_dropped: int = 0
    stream: StreamSnapshot | None = None

    def to_state(self, default_system_prompt: str) -> ConversationState:
        system, messages = default_system_prompt, list(self.messages)
        if messages and messages[0].role == "system":
            system, messages = messages[0].content or "", messages[1:]
        return ConversationState(
            context=ContextState(system_prompt=system, messages=messages),
            current=TurnState(
                number=self.turn, in_progress=self.in_turn, steps=self.steps,
                llm_calls=self.turn_llm_calls, usage=self.turn_usage, tools_used=self.tools_used,
                stop_reason=self.stop_reason, final_answer=self.final_answer, error=self.error,
                forced_reason=self.forced_reason, decisions=self.decisions,
                call_records=[call_record_of_key(*r) for r in self.call_records[-2:]],
            ),
            inbox=self.inbox, catalog={t.name: t for t in self.catalog}, notices=self.setup_errors,
            llm_calls=self.llm_calls, usage=self.usage, turns=self.turns,
            seen_call_ids=self.seen_call_ids, past_calls=self.past_calls, outcomes=self.outcomes,
            end_requested=self.end_requested, runs=self.runs, audit=self.audit,
            audit_dropped=self.audit_dropped, stream=self.stream,
        )
