"""Typed models that cross the workflow boundary: input, messages, activity payloads, status.

Everything here is plain data, safe to import inside the workflow sandbox. Messages are kept in
OpenAI chat format so they can be sent to any OpenAI-compatible endpoint unchanged.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, Field

from workflows.rules.bounds import (
    DEFAULT_MESSAGE_BYTES,
    HANDOVER_EVENTS,
    valid_json,
    valid_text,
)

# The activity types, declared once: the workers register them by these names, and the
# conversation calls them by these names (recorded in every history: they never change).
LLM_CALL_ACTIVITY = "llm_call"  # the whole prompt, every call (runs begun before the delta context)
LLM_STEP_ACTIVITY = "llm_step"  # the prompt as a delta of the previous one (`rules.delta`)
SUMMARIZE_ACTIVITY = "summarize"
LIST_TOOLS_ACTIVITY = "list_tools"
NOTIFY_ACTIVITY = "notify"
RUNTIME_ACTIVITIES = frozenset({LLM_CALL_ACTIVITY, LLM_STEP_ACTIVITY, SUMMARIZE_ACTIVITY,
                                LIST_TOOLS_ACTIVITY})  # the model's and the handshake's

# Text and JSON that came from outside (a model, a tool, an MCP server), made valid Unicode as a
# model is built from it: a lone surrogate would make it impossible to serialize, hash or size.
Text = Annotated[str, AfterValidator(valid_text)]
JsonObject = Annotated[dict[str, Any], AfterValidator(valid_json)]

Risk = Literal["safe", "sensitive", "destructive"]
Status = Literal[
    "running", "waiting_for_confirmation", "waiting_for_input", "idle", "completed", "failed"
]
QuestionKind = Literal["input", "choice", "multi_choice", "confirm"]
StopReason = Literal[
    "answered",
    "max_steps",
    "loop_detected",
    "budget_exceeded",
    "llm_error",
    "ended",
    "idle_timeout",
    "cancelled",
    "invalid_output",
]

# Statuses in which a turn is no longer making progress on its own.
SETTLED_STATUSES: frozenset[str] = frozenset(
    {"waiting_for_confirmation", "waiting_for_input", "idle", "completed", "failed"}
)
# Waiting for a human, a confirmation first; and closed for good.
WAITING_STATUSES: tuple[Status, ...] = ("waiting_for_confirmation", "waiting_for_input")
CLOSED_STATUSES: frozenset[str] = frozenset({"completed", "failed"})


class FunctionCall(BaseModel):
    name: Text
    arguments: Text = ""


class ToolCall(BaseModel):
    id: Text
    type: Literal["function"] = "function"
    function: FunctionCall


class ChatMessage(BaseModel):
    role: Literal["system", "user", "assistant", "tool"]
    content: Text | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None

    def to_openai(self) -> dict[str, Any]:
        """The dict the chat completions API expects for this message."""
        out: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.tool_calls:
            out["tool_calls"] = [c.model_dump() for c in self.tool_calls]
        elif self.role == "assistant" and self.content is None:
            out["content"] = ""
        if self.tool_call_id is not None:
            out["tool_call_id"] = self.tool_call_id
        return out


class Usage(BaseModel):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    cached_tokens: int = 0  # of the prompt tokens, those the endpoint served from its cache
    # In dollars (genai-prices, or AGENT_PRICES); None once any call's price is unknown.
    cost_usd: float | None = 0.0
    cost_note: str | None = None  # why the cost is unknown
    # What is known when `cost_usd` is None: the priced calls' dollars, and how many calls
    # have no price (an unknown model) or no usage at all (an endpoint that reports none).
    known_cost_usd: float = 0.0
    unpriced_calls: int = 0
    unmetered_calls: int = 0
    # Model calls that failed: the endpoint reported no tokens for them. Not counted against a
    # budget (a refused request costs nothing), but shown: a failed turn's "0 tokens" is not all.
    failed_calls: int = 0

    @property
    def known_cost(self) -> float:
        return self.cost_usd if self.cost_usd is not None else self.known_cost_usd

    @property
    def unpriced(self) -> int:
        """Calls of unknown cost (at least one when the cost is unknown: a state carried from
        a version that did not count them)."""
        return max(self.unpriced_calls, int(self.cost_usd is None))

    def __add__(self, other: Usage) -> Usage:
        cost = (None if self.cost_usd is None or other.cost_usd is None
                else round(self.cost_usd + other.cost_usd, 10))
        return Usage(
            prompt_tokens=self.prompt_tokens + other.prompt_tokens,
            completion_tokens=self.completion_tokens + other.completion_tokens,
            total_tokens=self.total_tokens + other.total_tokens,
            cached_tokens=self.cached_tokens + other.cached_tokens,
            cost_usd=cost,
            cost_note=self.cost_note or other.cost_note,
            known_cost_usd=round(self.known_cost + other.known_cost, 10),
            unpriced_calls=self.unpriced + other.unpriced,
            unmetered_calls=self.unmetered_calls + other.unmetered_calls,
            failed_calls=self.failed_calls + other.failed_calls,
        )


class AgentSpec(BaseModel):
    """What a parent needs to start a subagent: the profile's name and its limits. Its system
    prompt and tools come from the worker, by name, when the child lists its tools."""

    profile: str
    model: str | None = None
    max_steps: int = Field(default=6, ge=1)
    max_cost_usd: float | None = Field(default=None, gt=0)
    max_total_tokens: int | None = Field(default=None, gt=0)
    output_schema: dict[str, Any] | None = None  # the child answers with JSON that fits it


class ToolDefinition(BaseModel):
    """What the workflow knows of a tool: enough to describe, validate, gate and schedule it."""

    name: Text
    description: Text
    parameters: JsonObject
    risk: Risk = "safe"
    idempotent: bool = True
    keyed: bool = False  # writes under the call's idempotency key: a retry finds what it wrote
    timeout_s: float = 30.0
    max_attempts: int = 3
    # Set for the ask_* tools, whose execution is a question to the human, not an activity.
    asks: QuestionKind | None = None
    # Set for a subagent (`agent__<profile>`): a call runs a child conversation.
    agent: AgentSpec | None = None

    @property
    def retry_safe(self) -> bool:
        """Whether running it again after a failure can do no harm."""
        return self.idempotent or self.keyed

    def openai_schema(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }


class EntryLimits(BaseModel):
    """What a conversation keeps of a model entry's own limits (`AGENT_MODELS`, or what its
    server says): its window, what a reply may take of it, a call's deadline and heartbeat.
    None: the conversation's own."""

    context_tokens: int | None = None
    max_output_tokens: int | None = None
    timeout_s: float | None = None
    heartbeat_s: float | None = None


class ToolCatalog(BaseModel):
    """What `list_tools` found: the tools, and the sources (MCP servers) that failed to load."""

    tools: list[ToolDefinition]
    errors: list[str] = []
    # The non-safe tools this worker lets a conversation's policy approve; None: any.
    auto_approvable: list[str] | None = None
    # AGENT_FOUR_EYES: the risks whose calls someone other than the conversation's owner decides
    four_eyes: list[Risk] = []
    # AGENT_MODELS: the model entries, the default one, each one's fallbacks, and the task queue
    # of each entry whose requests per second hold across workers
    model_entries: list[str] = []
    default_model_entry: str | None = None
    model_fallbacks: dict[str, list[str]] = {}
    model_queues: dict[str, str] = {}
    model_limits: dict[str, EntryLimits] = {}  # by entry: its window, deadline, heartbeat
    # where model calls ("models") and tool runs ("tools") go, when workers split the roles
    activity_queues: dict[str, str] = {}
    webhooks: list[WebhookRef] = []  # AGENT_WEBHOOKS
    webhook_retry_s: float = 3600.0  # how long a delivery is retried before it is given up
    system_prompt: str | None = None  # a subagent's, from its profile


class WebhookRef(BaseModel):
    """A webhook as a conversation knows it (`AGENT_WEBHOOKS`): which, where, for what. Its URL's
    path and its secret stay in the worker."""

    index: int
    host: str
    events: list[str]


class NotifyRequest(BaseModel):
    """One event for one webhook (the `notify` activity). `key` is the same on every attempt
    and after a handover, so a receiver can drop a repeat."""

    webhook: int
    host: str
    event: str
    key: str
    payload: dict[str, Any]
    args_hash: str | None = None  # of the call's args: what its one-time links may approve
    ticket: str | None = None  # the call's ticket (`workflows.rules.links`): its links name it


class ToolListRequest(BaseModel):
    """`list_tools` for a subagent: the tools of its profile (a top-level conversation sends
    nothing, and gets every tool and every profile)."""

    profile: str


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


class ConversationInput(BaseModel):
    prompt: str
    system_prompt: str | None = None
    model: str | None = None  # None: the worker's OPENAI_MODEL
    max_steps: int = Field(default=10, ge=1)
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
    max_message_bytes: int = DEFAULT_MESSAGE_BYTES  # a user message's limit, within [1, the default]
    profile: str | None = None  # set for a subagent: the profile it runs as
    # a JSON Schema the final answer must fit (`workflows.rules.output`); status.final_output
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
    state: ConversationState | None = None  # set by continue-as-new only
    carry: CarriedState | None = None  # what continue-as-new carried before `state`; still read


class LLMRequest(BaseModel):
    model: str | None
    entry: str | None = None  # the model entry to ask (a fallback); None: the one `model` names
    messages: list[ChatMessage]
    tools: list[dict[str, Any]] = []
    tool_choice: Literal["auto", "none"] = "auto"
    turn: int = 0
    step: int = 0
    response_format: dict[str, Any] | None = None  # structured output, when a schema is asked


class PromptPart(BaseModel):
    """Either a range [start, end) of the conversation's previous prompt, kept, or one message."""

    keep: tuple[int, int] | None = None
    message: ChatMessage | None = None


class LLMStepRequest(BaseModel):
    """A model call as a delta (`workflows.rules.delta`): the prompt as parts of the previous one
    (`base`, by digest; None: every part is a message) and new messages, and the tool list by its
    digest. The worker rebuilds the prompt and checks it against `digest`."""

    model: str | None
    entry: str | None = None  # as in `LLMRequest`
    parts: list[PromptPart]
    base: str | None = None
    digest: str
    tools_digest: str | None = None  # None: no tools offered
    tools: list[dict[str, Any]] | None = None  # inline, with a full prompt (`base` None)
    tool_choice: Literal["auto", "none"] = "auto"
    turn: int = 0
    step: int = 0
    response_format: dict[str, Any] | None = None


PENDING_PROMPT_QUERY = "pending_prompt"


class PendingPrompt(BaseModel):
    """The prompt and tools of the model call a conversation waits on (its `pending_prompt`
    query), for a worker that does not hold them."""

    messages: list[ChatMessage]
    tools: list[dict[str, Any]] = []


class SummaryRequest(BaseModel):
    """Fold turns into the running summary: the previous summary and the turns' messages."""

    model: str | None
    entry: str | None = None  # as in `LLMRequest`
    previous: str | None
    messages: list[ChatMessage]
    first_turn: int
    last_turn: int
    max_tokens: int


class SummaryReply(BaseModel):
    text: Text
    usage: Usage = Field(default_factory=Usage)


class LLMReply(BaseModel):
    message: ChatMessage
    usage: Usage = Field(default_factory=Usage)
    finish_reason: Text | None = None
    model: Text = ""
    entry: str | None = None  # the model entry that answered


class ToolInvocation(BaseModel):
    """The input of a tool activity. The activity type is the tool's name."""

    call_id: str
    arguments: dict[str, Any]
    idempotency_key: str
    answer: str | None = None  # the human's answer, when the tool asked for input on a prior run
    max_observation_bytes: int = 16_384
    turn: int = 0
    step: int = 0
    # The gate's verdict on these exact arguments (a human's, or the policy's), and the risk the
    # conversation knew the tool by: the activity runs a non-safe tool only with both in order.
    approval: Decision | None = None
    risk: Risk = "safe"


class Question(BaseModel):
    kind: QuestionKind
    message: Text
    options: list[Text] = []


ObservationStatus = Literal["ok", "error", "rejected", "timed_out"]


class ToolOutcome(BaseModel):
    # Activities answer ok, error, needs_input or needs_approval (not run: the call's approval
    # does not cover the tool's risk now); the workflow adds rejected and timed_out.
    status: Literal["ok", "error", "needs_input", "needs_approval", "rejected", "timed_out"] = "ok"
    observation: Text = ""
    question: Question | None = None  # set with status "needs_input"
    risk: Risk | None = None  # set with status "needs_approval": the tool's risk as the worker sees it
    full_bytes: int | None = None  # the observation's size before truncation, when truncated
    ms: int | None = None  # execution time, measured by the workflow


class SayRequest(BaseModel):
    text: str
    request_id: str | None = None
    sender: str | None = None  # who sent it, for the audit trail


class EndRequest(BaseModel):
    request_id: str | None = None
    sender: str | None = None  # who ended it, for the audit trail


class ConfirmRequest(BaseModel):
    request_id: str | None = None
    call_ids: list[str] = []
    all: bool = False
    args: dict[str, Any] | None = None  # edited arguments, for a single call
    approver: str = "unknown"
    # call id -> the `args_hash` of the arguments the human saw: a call whose arguments are not
    # those is refused, and with `all`, so is a pending call the human did not see
    seen: dict[str, str] = {}
    # call id -> the ticket of the call the decision was made for (a one-time link): a call that
    # has the id but another ticket (the id used again) is refused
    tickets: dict[str, str] = {}
    trace_parent: str | None = None  # the span of the request that carried it (W3C traceparent)


class RejectRequest(BaseModel):
    request_id: str | None = None
    call_ids: list[str] = []
    all: bool = False
    reason: str = ""
    approver: str = "unknown"
    seen: dict[str, str] = {}  # as in `ConfirmRequest`
    tickets: dict[str, str] = {}  # as in `ConfirmRequest`
    trace_parent: str | None = None  # as in `ConfirmRequest`


class AnswerRequest(BaseModel):
    request_id: str | None = None
    values: list[str]
    call_id: str | None = None  # the question the human answered; another one open is refused
    declined: bool = False  # the human withdrew the question instead of answering (`values` unused)
    sender: str | None = None  # who answered, for the audit trail


class Decision(BaseModel):
    """A human's (or the timeout's) verdict on one call, kept for the audit trail."""

    call_id: str
    tool: str
    approved: bool
    approver: str
    at: datetime
    args_hash: str  # sha256 of the canonical JSON of the arguments that run
    reason: str | None = None


class SignalOutcome(BaseModel):
    """What became of a signal, so a client can tell taken from refused."""

    request_id: str
    accepted: bool
    reason: str | None = None
    turn: int | None = None  # for `say`: the turn that will answer this message


class PendingConfirmation(BaseModel):
    call_id: str
    tool: str
    args: dict[str, Any]
    risk: Risk
    conversation_id: str | None = None  # a subagent's call: the child conversation that owns it
    # What names it without ambiguity from this conversation: the call id for its own calls;
    # for a subagent's, the path of call ids from here (`call_0/call_0`, a child's own `call_0`)
    ref: str | None = None
    args_hash: str | None = None  # of `args`: what a decision may bind to (`ConfirmRequest.seen`)
    # under four eyes (AGENT_FOUR_EYES): someone other than the conversation's owner decides it
    four_eyes: bool = False
    ticket: str | None = None  # no other call has it (`workflows.rules.links.call_ticket`)


class PendingQuestion(BaseModel):
    call_id: str
    kind: QuestionKind
    message: str
    options: list[str] = []
    conversation_id: str | None = None  # a subagent's question: the child that asks it
    ref: str | None = None  # as in `PendingConfirmation`


class ChildRef(BaseModel):
    """A subagent of this conversation, as `status` lists it."""

    workflow_id: str
    profile: str
    status: str


class ChildReport(ChildRef):
    """What a subagent tells its parent when its status or what it waits for changes."""

    pending_confirmations: list[PendingConfirmation] = []
    pending_question: PendingQuestion | None = None
    # the report's place among its subagent's reports: signals may arrive out of order, and a
    # later one must not be undone by an earlier (None: from a version that did not number them)
    seq: int | None = None


class AuditAction(BaseModel):
    call_id: str
    tool: str
    input: dict[str, Any] | str  # the args that ran (edited ones, if any), or the raw text if invalid
    decision: Decision | None = None
    status: ObservationStatus
    observation_bytes: int
    full_bytes: int | None = None  # before truncation, when the observation was cut
    ms: int | None = None


class AuditRecord(BaseModel):
    """One ReAct step: what the model thought, what it did, who allowed it, what came back.
    A `summary` record is the model folding older turns into the running summary before `step`.
    A `start`, `message`, `answer` or `end` record is a person's input (`by`: who, `text`: the
    message or the answer), at the turn that answers it (or takes the answer)."""

    at: datetime
    turn: int
    step: int
    thought: str | None
    actions: list[AuditAction] = []
    tokens: Usage
    stop_reason: StopReason | None = None  # on the step that ended the turn
    kind: Literal["step", "summary", "start", "message", "answer", "end", "notify"] = "step"
    entry: str | None = None  # the model entry that answered (`AGENT_MODELS`)
    actions_left_out: int = 0  # actions past the record's size bound (they ran all the same)
    by: str | None = None  # who gave the input (start, message, answer, end)
    text: str | None = None  # the message or the answer, clipped


class StreamEvent(BaseModel):
    """One item of the live stream `watch` renders (topics "events" and "tokens")."""

    kind: Literal[
        "turn_started", "llm_started", "token", "reset", "tool_started", "tool_finished",
        "approval_requested", "decision_taken", "decision_refused", "question_asked", "answered",
        "turn_finished", "summary_started", "summary_finished", "child_started",
        "child_waiting",  # a subagent came to wait for a person (its calls, or a question)
        "tool_progress",  # published by a running tool (ctx.progress), on the tokens topic
    ]
    turn: int = 0
    step: int = 0
    text: Text | None = None  # a token's, a tool's observation: outside text
    call_id: str | None = None
    tool: str | None = None
    args: JsonObject | None = None
    risk: Risk | None = None
    status: str | None = None
    observation_bytes: int | None = None
    ms: int | None = None
    attempt: int | None = None
    approver: str | None = None
    options: list[str] = []
    question_kind: QuestionKind | None = None
    stop_reason: StopReason | None = None
    tokens: int | None = None  # turn_finished: the turn's tokens and dollars
    cost_usd: float | None = None
    error: Text | None = None  # turn_finished: why the turn failed


class TurnSummary(BaseModel):
    """What finalize records for a turn."""

    turn: int
    steps_taken: int
    llm_calls: int
    tools_used: list[str]
    stop_reason: StopReason | None
    usage: Usage
    error: str | None = None
    fallbacks: int = 0  # model calls another entry answered, its own having failed


class ContextUse(BaseModel):
    """How full the model's context is: the last prompt, as the endpoint counted it, against the
    budget; and how many turns were folded into the running summary (or dropped)."""

    budget_tokens: int  # the conversation's, or less to fit the model's window
    prompt_tokens: int  # of the latest model call
    folded_turns: int = 0
    dropped_turns: int = 0
    summary_bytes: int = 0
    window_tokens: int | None = None  # the model's, where its entry or its endpoint says


class ConversationStatus(BaseModel):
    """The status JSON of the contract: what `status --json` prints."""

    workflow_id: str
    status: Status
    turn: int
    steps: int
    llm_calls: int
    tools_used: list[str]
    stop_reason: StopReason | None
    final_answer: str | None
    pending_confirmations: list[PendingConfirmation] = []
    final_output: Any = None  # the final answer's JSON, with an `output_schema`
    pending_question: PendingQuestion | None = None
    usage: Usage
    error: str | None
    queued_messages: int = 0
    decisions: list[Decision] = []  # of the current turn
    turns: list[TurnSummary] = []  # the latest finished turns
    runs: int = 1  # workflow runs so far (continue-as-new starts a new one)
    context: ContextUse | None = None
    children: list[ChildRef] = []  # subagents of the current turn
    owner: str | None = None  # who started it (None: started before owners were recorded)
    trace_id: str | None = None  # the current (or last) turn's trace (`workflows.telemetry`)


# The conversation's own state builds on the models above.
from workflows.state import CarriedState, ConversationState

ConversationInput.model_rebuild()
ToolInvocation.model_rebuild()
