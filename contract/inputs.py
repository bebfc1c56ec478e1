"""A person's input to a conversation, as its signals and Updates carry it, and what became of
it."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel


class SayRequest(BaseModel):
    """The next user message (`say`, or the Update `send_message`)."""

    text: str
    request_id: str | None = None
    sender: str | None = None  # who sent it, for the audit trail
    # mid-turn: the turn's model gets it at its next step (after the tool round in flight), not
    # the next turn; a turn that ends first answers it next
    steer: bool = False


class EndRequest(BaseModel):
    """End the conversation (`end`)."""

    request_id: str | None = None
    sender: str | None = None  # who ended it, for the audit trail


class StopRequest(BaseModel):
    """Stop the turn in flight (`stop`): its model call and tools are cancelled, what waits for
    a person closes, and the conversation takes the next message."""

    request_id: str | None = None
    sender: str | None = None  # who stopped it, for the audit trail


class ConfirmRequest(BaseModel):
    """Approve pending calls, by call id or `all` (`confirm`, or the Update `decide_confirm`)."""

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
    # Remember the approval (`contract.policy.REMEMBER_SCOPES`): for the same tool with these
    # arguments ("args") or for the tool ("conversation"), for `for_s` seconds and `uses` uses
    # ("owner": for the tool in every conversation of this conversation's owner)
    remember: str | None = None
    for_s: float | None = None
    uses: int | None = None
    # the roles of who decides (the API's token's; the CLI, run with Temporal's own access,
    # says admin): a policy rule's `approvers` names the roles that may decide its calls
    roles: list[str] = []


class RejectRequest(BaseModel):
    """Reject pending calls; the model reads `rejected by user: <reason>` (`reject`, or the
    Update `decide_reject`)."""

    request_id: str | None = None
    call_ids: list[str] = []
    all: bool = False
    reason: str = ""
    approver: str = "unknown"
    seen: dict[str, str] = {}  # as in `ConfirmRequest`
    tickets: dict[str, str] = {}  # as in `ConfirmRequest`
    trace_parent: str | None = None  # as in `ConfirmRequest`


class AnswerRequest(BaseModel):
    """Answer the open question (`answer`, or the Update `give_answer`)."""

    request_id: str | None = None
    values: list[str]
    call_id: str | None = None  # the question the human answered; another one open is refused
    declined: bool = False  # the human withdrew the question instead of answering (`values` unused)
    # (an MCP elicitation) the human cancelled it rather than declined it; `declined` is set too
    cancelled: bool = False
    sender: str | None = None  # who answered, for the audit trail


class SignalOutcome(BaseModel):
    """What became of a signal, so a client can tell taken from refused."""

    request_id: str
    accepted: bool
    reason: str | None = None
    turn: int | None = None  # for `say`: the turn that will answer this message


HumanRequest = ConfirmRequest | RejectRequest | AnswerRequest


class DecideRequest(BaseModel):
    """Several decisions and answers taken as one (an AG-UI resume that answers every open
    interrupt): all are taken, or, if one would be refused, none is. The outcome is recorded
    under `request_id`; each part keeps its own too."""

    request_id: str | None = None
    confirm: list[ConfirmRequest] = []
    reject: list[RejectRequest] = []
    answer: list[AnswerRequest] = []

    def parts(self) -> list[HumanRequest]:
        return [*self.confirm, *self.reject, *self.answer]


class RoutedDecision(BaseModel):
    """A part of a decision, sent by an ancestor conversation to the subagent that owns its
    calls or question (exactly one of the three is set); the subagent takes it as its own and
    sends what became of it back to `reply_to`, when that is one of its ancestors."""

    reply_to: str
    confirm: ConfirmRequest | None = None
    reject: RejectRequest | None = None
    answer: AnswerRequest | None = None

    @classmethod
    def of(cls, reply_to: str, part: HumanRequest) -> RoutedDecision:
        kind = ("confirm" if isinstance(part, ConfirmRequest)
                else "reject" if isinstance(part, RejectRequest) else "answer")
        return cls(reply_to=reply_to, **{kind: part})

    def part(self) -> HumanRequest | None:
        """The part it carries; None unless exactly one is set."""
        parts = [p for p in (self.confirm, self.reject, self.answer) if p is not None]
        return parts[0] if len(parts) == 1 else None
