"""A conversation's input: what it is started with, and what continue-as-new carries."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from .bounds import DEFAULT_MESSAGE_BYTES, HANDOVER_EVENTS
from .models import ChatMessage, Risk
from .state import CarriedState, ConversationState


class LLMOptions(BaseModel):
    """Timeouts and retries of the model call; the defaults suit a hosted model."""

    timeout_s: float = 120.0
    heartbeat_timeout_s: float = 5.0  # a worker lost mid-call is noticed this soon
    max_attempts: int = 6
    max_retry_interval_s: float = 30.0


class ApprovalPolicy(BaseModel):
    """Which tool calls wait for a human. The default: every non-safe tool."""

    require_approval_for: list[Risk] = ["sensitive", "destructive"]
    auto_approve: list[str] = []  # tool names that never wait


class ForkPoint(BaseModel):
    """Where a fork starts (`agent fork`): the messages the original's model was shown
    before the step, which the fork's first model call is shown (its own system prompt first)."""

    conversation_id: str  # the original
    at_step: int = Field(ge=1)  # as the original's case numbers steps (`contract.case`)
    turn: int = Field(default=1, ge=1)  # the original's turn of that step: the fork goes on with it
    messages: list[ChatMessage] = []


class ConversationInput(BaseModel):
    """What a conversation is started with: the workflow's input. Only `prompt` is required."""

    prompt: str
    system_prompt: str | None = None
    model: str | None = None  # None: the worker's OPENAI_MODEL
    max_steps: int = Field(default=10, ge=1)
    # a step's tool activities running at once (the rest wait their turn), and the calls a step
    # may make at all (the rest are not run: the model reads why); a reply holds at most 64
    max_parallel_tools: int = Field(default=8, ge=1, le=64)
    max_calls_per_step: int | None = Field(default=None, ge=1, le=64)
    max_parallel_subagents: int = Field(default=4, ge=1, le=64)  # of those, subagents
    one_shot: bool = False
    idle_timeout_s: float = Field(default=3600.0, gt=0)
    decision_timeout_s: float = Field(default=86400.0, gt=0)
    approval: ApprovalPolicy = Field(default_factory=ApprovalPolicy)
    llm: LLMOptions = Field(default_factory=LLMOptions)
    max_total_tokens: int | None = Field(default=None, gt=0)  # per conversation
    max_cost_usd: float | None = Field(default=None, gt=0)  # per conversation, children included
    context_budget_tokens: int | None = Field(default=24_000, gt=0)  # prompt size before compaction
    max_observation_bytes: int = Field(default=16_384, ge=256)  # capped at MAX_OBSERVATION_BYTES
    continue_as_new_after_turns: int = Field(default=50, ge=1)
    # history events before a fresh run, mid-turn too (at most 40,000; runs without the delta
    # context follow the server's suggestion instead)
    continue_as_new_after_events: int = Field(default=HANDOVER_EVENTS, ge=1)
    # on a versioned worker, how often an idle conversation looks for a new current version of its
    # deployment to move to (`workflows.conversation`); a message arriving looks at once
    version_check_s: float = Field(default=300.0, gt=0)
    max_message_bytes: int = DEFAULT_MESSAGE_BYTES  # a user message's limit, within [1, the default]
    profile: str | None = None  # set for a subagent: the profile it runs as
    # a JSON Schema the final answer must fit (`rules.output`); status.final_output
    output_schema: dict[str, Any] | None = None
    depth: int = Field(default=0, ge=0)  # 0 for a top-level conversation, 1 for its children...
    max_depth: int = Field(default=2, ge=0)  # delegation deeper than this is refused
    # the first message's request id, recorded as taken (turn 1): a client that retries the
    # start finds the message already taken, as it would a `say`
    request_id: str | None = None
    # who started it (the API's principal, or the CLI's OS user or --as); a subagent's is its
    # parent's. None for a conversation started before owners were recorded
    owner: str | None = None
    # the span the first turn's trace continues (W3C traceparent): a parent conversation's call
    # of this subagent, or the API request that started it
    trace_parent: str | None = None
    fork: ForkPoint | None = None  # a fork: it begins mid-turn, from the original's messages
    state: ConversationState | None = None  # set by continue-as-new only
    carry: CarriedState | None = None  # what continue-as-new carried before `state`; still read
