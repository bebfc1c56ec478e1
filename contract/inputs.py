"""A person's input to a conversation, as its signals and Updates carry it, and what became of
it."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel


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
    # (an MCP elicitation) the human cancelled it rather than declined it; `declined` is set too
    cancelled: bool = False
    sender: str | None = None  # who answered, for the audit trail


class SignalOutcome(BaseModel):
    """What became of a signal, so a client can tell taken from refused."""

    request_id: str
    accepted: bool
    reason: str | None = None
    turn: int | None = None  # for `say`: the turn that will answer this message
