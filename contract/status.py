"""What a conversation says of itself: its status (the status JSON of the contract), its audit
records and its stream events."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel

from .models import (
    Decision,
    JsonObject,
    ObservationStatus,
    Question,
    QuestionKind,
    Risk,
    Status,
    StopReason,
    Text,
    Usage,
)
from .owner import HeldTurn


class PendingConfirmation(BaseModel):
    """A call waiting for a person's decision."""

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
    ticket: str | None = None  # no other call has it (`rules.links.call_ticket`)
    # the policy's rule that asks a person, the roles it lets decide (empty: any approver),
    # how many distinct people must approve, and who has so far
    rule: str | None = None
    approvers: list[str] = []
    quorum: int = 1
    approved_by: list[str] = []
    grantable: bool = True  # a person's approval of it may be remembered (`confirm --remember`)
    # why the policy asks a person, where it says: the reviewer model's reason (AGENT_REVIEWER),
    # a condition it could not read
    note: str | None = None


class PendingQuestion(BaseModel):
    """The question waiting for a person's answer (an `ask_*` call, a tool's `NeedsInput`, an
    MCP server's elicitation)."""

    call_id: str
    kind: QuestionKind
    message: str
    options: list[str] = []
    # kind `elicitation`: an MCP server's request, the schema its answer must fit
    answer_schema: dict[str, Any] | None = None
    server: str | None = None
    tool: str | None = None
    request: str | None = None
    conversation_id: str | None = None  # a subagent's question: the child that asks it
    ref: str | None = None  # as in `PendingConfirmation`

    def question(self) -> Question:
        """The question as it was asked, which an answer is checked against."""
        return Question(**self.model_dump(include=set(Question.model_fields)))


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
    """One tool call of a step, as the audit trail keeps it."""

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
    message or the answer), at the turn that answers it (or takes the answer). A `recall`
    record is what the turn recalled of its owner's memories (`text`: their ids), before its
    first step. A `sampling` record is the conversation's model answering an MCP server's
    sampling request during the step's tool call (`by`: the server, `text`: what it asked)."""

    at: datetime
    turn: int
    step: int
    thought: str | None
    actions: list[AuditAction] = []
    tokens: Usage
    stop_reason: StopReason | None = None  # on the step that ended the turn
    kind: Literal["step", "summary", "start", "message", "answer", "end", "notify",
                  "recall", "sampling", "grant", "revoke", "review", "stop"] = "step"
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
        "steer_queued", "steered",  # a message steered into the turn: taken, then shown its model
        "turn_held", "turn_resumed",  # the turn waits for its owner's share; then it goes on
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
    forked_from: str | None = None  # a fork's original conversation
    at_step: int | None = None  # the original's step the fork began at
    # the Worker Deployment Version this run is pinned to (`NAME:ID`); None on unversioned workers
    version: str | None = None
    # the running turn waits for its owner's share (AGENT_OWNER_LIMITS): which limit, and why
    held: HeldTurn | None = None


# The conversation's own state builds on the models above.
