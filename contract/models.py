"""The data of a model call and of a tool: chat messages in OpenAI's format (sent to any
OpenAI-compatible endpoint unchanged), usage, tool definitions, the worker's handshake, and the
activities' inputs and outputs, with the activity types' names. Plain data, safe in the workflow
sandbox."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, Field

from .bounds import (
    MAX_RESUME_BYTES,
    valid_json,
    valid_text,
)
from .memory import RECALL_ACTIVITY
from .owner import CLOSED_ACTIVITY, LEASE_ACTIVITY

# The activity types, declared once: the workers register them by these names, and the
# conversation calls them by these names (recorded in every history: they never change).
# The whole prompt, every call: a 0.x conversation's model calls (read by `export`; no 1.0
# worker serves it, and the name stays reserved).
LLM_CALL_ACTIVITY = "llm_call"
LLM_STEP_ACTIVITY = "llm_step"  # the prompt as a delta of the previous one (`rules.delta`)
SUMMARIZE_ACTIVITY = "summarize"
LIST_TOOLS_ACTIVITY = "list_tools"
MCP_LISTING_ACTIVITY = "mcp_listing"  # before a turn: whether an MCP server's tools changed
NOTIFY_ACTIVITY = "notify"
JUDGE_CALLS_ACTIVITY = "judge_calls"  # a round's calls under the worker's policy (AGENT_POLICY)
KEEP_GRANTS_ACTIVITY = "keep_grants"  # owner grants, into the store the workers share
REVIEW_CALL_ACTIVITY = "review_call"  # a `review` rule's call, before the reviewer model
RUNTIME_ACTIVITIES = frozenset({  # the runtime's own
    LLM_CALL_ACTIVITY, LLM_STEP_ACTIVITY, SUMMARIZE_ACTIVITY, LIST_TOOLS_ACTIVITY, RECALL_ACTIVITY,
    MCP_LISTING_ACTIVITY, JUDGE_CALLS_ACTIVITY, KEEP_GRANTS_ACTIVITY, REVIEW_CALL_ACTIVITY,
    LEASE_ACTIVITY, CLOSED_ACTIVITY})

# Text and JSON that came from outside (a model, a tool, an MCP server), made valid Unicode as a
# model is built from it: a lone surrogate would make it impossible to serialize, hash or size.
Text = Annotated[str, AfterValidator(valid_text)]
JsonObject = Annotated[dict[str, Any], AfterValidator(valid_json)]


def _resume(value: str) -> str:
    if len(value.encode()) > MAX_RESUME_BYTES:
        raise ValueError(f"a tool's resume is {len(value.encode()):,} bytes, over "
                         f"{MAX_RESUME_BYTES:,}: keep where the work is, not the work")
    return value


Resume = Annotated[str, AfterValidator(valid_text), AfterValidator(_resume)]

Risk = Literal["safe", "sensitive", "destructive"]
Status = Literal[
    "running", "waiting_for_confirmation", "waiting_for_input", "idle", "completed", "failed"
]
# `elicitation`: an MCP server asks for structured input during a call (`Question.answer_schema`)
QuestionKind = Literal["input", "choice", "multi_choice", "confirm", "elicitation"]
ElicitAction = Literal["accept", "decline", "cancel"]
StopReason = Literal[
    "answered",
    "stopped",  # a person stopped the turn (`stop`): the conversation goes on
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
    """Tokens and dollars, of a call, a turn or a conversation."""

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
    # A quick safe read that runs in the worker of the conversation's workflow task, as a local
    # activity: one server round trip less per step (`activities.tools.registry.ToolSpec.local`).
    local: bool = False
    # Set for the ask_* tools, whose execution is a question to the human, not an activity.
    asks: QuestionKind | None = None
    # Set for a subagent (`agent__<profile>`): a call runs a child conversation.
    agent: AgentSpec | None = None
    # An MCP tool whose server's entry says `"sampling": true`: its calls carry a grant of the
    # conversation's model (`ToolInvocation.sampling`)
    samples: bool = False

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


class WorkerHandshake(BaseModel):
    """The worker's handshake with a conversation (the `list_tools` activity, once per
    conversation): the tools and the sources (MCP servers) that failed to load, and the worker's
    configuration the conversation keeps to: its approval floor, four eyes, model routes,
    activity queues and webhooks, and a subagent's system prompt."""

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
    # Each MCP server that listed its tools, and a digest of them (None: the worker has no MCP
    # servers): the conversation lists again before a turn once a server's differs (`McpListing`)
    mcp_listing: dict[str, str] | None = None
    # where model calls ("models") and tool runs ("tools") go, when workers split the roles
    activity_queues: dict[str, str] = {}
    webhooks: list[WebhookRef] = []  # AGENT_WEBHOOKS
    webhook_retry_s: float = 3600.0  # how long a delivery is retried before it is given up
    system_prompt: str | None = None  # a subagent's, from its profile
    # Memory across conversations is on (AGENT_MEMORY): each turn recalls the owner's memories
    memory: bool = False
    # AGENT_POLICY: the revision (digest) of the worker's approval policy; None: it has none,
    # and the conversation's rounds are not judged by one
    policy_revision: str | None = None
    # the worker keeps owner grants (its memory store): a round a person would decide asks it
    owner_grants: bool = False
    # AGENT_OWNER_LIMITS: each turn leases its owner's share (`workflows.owner_share`)
    owner_limits: bool = False


class WebhookRef(BaseModel):
    """A webhook as a conversation knows it (`AGENT_WEBHOOKS`): which, where, for what. Its URL's
    path and its secret stay in the worker."""

    index: int
    host: str
    events: list[str]
    # an A2A client's push notification config (`api.a2a`) instead of a file's webhook: its id,
    # by which the `notify` activity reads its URL and credentials in the store the workers share
    push: str | None = None


MAX_PUSH_TARGETS = 8  # A2A push notification configs a conversation delivers to


class PushTargets(BaseModel):
    """The A2A push notification configs a conversation delivers its turns' changes to, whole
    (the API sends the list again at each change): no URL path, no credential."""

    targets: list[WebhookRef] = Field(default=[], max_length=MAX_PUSH_TARGETS)


class NotifyRequest(BaseModel):
    """One event for one webhook (the `notify` activity). `key` is the same on every attempt
    and after a handover, so a receiver can drop a repeat."""

    webhook: int
    host: str
    event: str
    key: str
    payload: dict[str, Any]
    args_hash: str | None = None  # of the call's args: what its one-time links may approve
    ticket: str | None = None  # the call's ticket (`rules.links`): its links name it
    push: str | None = None  # an A2A push config's id (`WebhookRef.push`), not a webhook's


class ToolListRequest(BaseModel):
    """`list_tools` for a subagent: the tools of its profile (a top-level conversation sends
    nothing, and gets every tool and every profile)."""

    profile: str


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
    """A model call as a delta (`rules.delta`): the prompt as parts of the previous one
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
    # Whether its text went to the live stream as it came; if not (it came whole within the first
    # batch), the conversation puts it there with the reply (`activities.llm.TokenRelay`).
    streamed: bool = True


class McpListing(BaseModel):
    """The `mcp_listing` activity's answer: each MCP server that lists its tools now, and a
    digest of them, listed again where a server said its list changed."""

    servers: dict[str, str] = {}


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
    owner: str | None = None  # whom the call acts for: the conversation's owner
    # the answers to what an MCP server asked during earlier runs of this call, in order: the
    # same request asked again on this run gets its answer from here, never from a human again
    elicited: list[ElicitAnswer] = []
    # what the server may ask of the conversation's model during the call (`samples` tools only)
    sampling: SamplingGrant | None = None
    # where the tool said it was when it asked for `answer` (`ToolOutcome.resume`)
    resume: Resume | None = None


class SamplingGrant(BaseModel):
    """What an MCP server's sampling requests during one call may use: the conversation's
    model (the entry it names, then that entry's fallbacks), within the call's share of what
    is left of the conversation's budgets (None: no budget; `rules.sampling.call_grant`)."""

    model: str | None = None
    tokens_left: int | None = None
    usd_left: float | None = None
    spent: str | None = None  # why nothing may be spent: the budgets are used up or uncounted


class Sampled(BaseModel):
    """One sampling request of an MCP server during a call, and what answering it used: a
    model call of the conversation, counted in its usage and budgets."""

    server: Text
    asked: Text  # what it asked, clipped (`activities.mcp.sampling.MAX_ASKED_BYTES`)
    entry: str | None = None  # the model entry that answered
    usage: Usage = Usage()
    error: Text | None = None  # why it went unanswered (the server was told so)


class ElicitAnswer(BaseModel):
    """A person's answer to one MCP elicitation request (`Question.request`)."""

    request: str  # the request's digest: its message and schema
    action: ElicitAction
    content: dict[str, Any] | None = None  # with `accept`: fits the request's schema


class Question(BaseModel):
    """A question to a person, as it was asked."""

    kind: QuestionKind
    message: Text
    options: list[Text] = []
    # An MCP elicitation's: the JSON Schema its answer must fit, the server and tool that ask,
    # and the request's digest (`ElicitAnswer.request`)
    answer_schema: dict[str, Any] | None = None
    server: str | None = None
    tool: str | None = None
    request: str | None = None


ObservationStatus = Literal["ok", "error", "rejected", "timed_out"]


class Decision(BaseModel):
    """A human's (or the timeout's) verdict on one call, kept for the audit trail."""

    call_id: str
    tool: str
    approved: bool
    approver: str
    at: datetime
    args_hash: str  # sha256 of the canonical JSON of the arguments that run
    reason: str | None = None
    # what decided it besides a person: a policy's rule ("rule 'drafts are free' of policy
    # 3f2a…"), or a person's grant used (its id; `approver` is who granted it)
    rule: str | None = None
    grant: str | None = None


class ToolOutcome(BaseModel):
    # Activities answer ok, error, needs_input or needs_approval (not run: the call's approval
    # does not cover the tool's risk now); the workflow adds rejected and timed_out.
    status: Literal["ok", "error", "needs_input", "needs_approval", "rejected", "timed_out"] = "ok"
    observation: Text = ""
    question: Question | None = None  # set with status "needs_input"
    risk: Risk | None = None  # set with status "needs_approval": the tool's risk as the worker sees it
    full_bytes: int | None = None  # the observation's size before truncation, when truncated
    # The whole result when the observation was cut, and the call it answers, where the worker
    # keeps large payloads by reference (External Storage): the history holds a reference, and
    # `agent result`, export and the console's download read it there. The workflow keeps
    # neither: what it carries is the observation.
    full: str | None = None
    call_id: str | None = None
    ms: int | None = None  # execution time, measured by the workflow
    sampled: list[Sampled] = []  # the server's sampling requests during the call (MCP)
    # with "needs_input": what the tool needs to pick up where it asked (a remote agent's task),
    # handed back with the answer on its next run (`ToolInvocation.resume`)
    resume: Resume | None = None
