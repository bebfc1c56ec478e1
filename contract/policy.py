"""Approval policies and grants as the conversation and the worker exchange them.

The worker holds the policy (`AGENT_POLICY`, `activities.policy`) and judges a round's calls by
it (the `judge_calls` activity, `JUDGE_CALLS_ACTIVITY`: `PolicyRequest` in, `PolicyVerdicts` out), so each verdict, its
rule and the policy's revision are in the history. A grant is a person's approval remembered by
the conversation (`rules.grants`): it lives in the conversation's state, so it crosses worker
kills and continue-as-new, and expires on workflow time."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel

from .models import Risk, Usage

Effect = Literal["allow", "ask", "deny", "review"]
# What a person's approval is remembered for: this call only (no grant), the same tool with the
# same arguments in this conversation, the tool for the rest of this conversation, or the tool
# in every conversation of the owner (a grant the workers share: `activities.grants`).
Remember = Literal["call", "args", "conversation", "owner"]
REMEMBER_SCOPES: tuple[str, ...] = ("call", "args", "conversation", "owner")
# The roles a token may carry (DESIGN "Who may do what"); an admin may decide whatever a rule's
# `approvers` name.
ROLES: tuple[str, ...] = ("viewer", "user", "approver", "admin")
MAX_QUORUM = 9


class Grant(BaseModel):
    """A person's approval, remembered: it lets a call of `tool` (with these arguments, for
    scope `args`) run without asking, until it expires, is used up or revoked."""

    id: str
    tool: str
    scope: Literal["args", "conversation", "owner"]
    args_hash: str | None = None
    by: str
    at: datetime
    expires_at: datetime | None = None
    uses_left: int | None = None
    used: int = 0
    roles: list[str] = []  # the granter's roles then: a rule's `approvers` reads them


class PolicyCall(BaseModel):
    call_id: str
    tool: str
    risk: Risk
    args: dict[str, Any]
    # a person would decide it unless the policy says otherwise (its risk and the conversation's
    # approval settings), and no grant of the conversation covers it: an owner grant may
    # (`activities.memory.grants`), used under this key (a retry uses it once)
    needs_person: bool = False
    use_key: str | None = None


class PolicyFacts(BaseModel):
    """What a rule's `when` may read of the conversation, besides the call."""

    owner: str | None = None
    cost_usd: float = 0.0
    tokens: int = 0
    calls_of_tool: dict[str, int] = {}  # this turn's calls of each tool that ran so far
    turn: int = 0
    at: datetime  # workflow time: a rule that reads `now` reads this


class PolicyRequest(BaseModel):
    calls: list[PolicyCall]
    facts: PolicyFacts


class Verdict(BaseModel):
    """What the policy says of one call: `effect` None when no rule matches (its risk decides)."""

    call_id: str
    effect: Effect | None = None
    rule: str | None = None
    # an `ask`: the roles that may decide (empty: any approver) and how many distinct people
    approvers: list[str] = []
    quorum: int = 1
    grantable: bool | None = None  # the rule says whether an approval may be remembered
    note: str | None = None  # why an `allow` was not taken (the worker's floor), say
    grant: Grant | None = None  # the owner's grant that lets it run, one use counted


class PolicyVerdicts(BaseModel):
    revision: str | None  # None: the worker has no policy now
    verdicts: list[Verdict] = []


class PolicyChanged(BaseModel):
    """A worker's policy, as it starts: a conversation waiting for a person judges its waiting
    calls again under this revision (`policy_changed`)."""

    revision: str


class RevokeRequest(BaseModel):
    """Revoke a grant of the conversation (`revoke`, the Update `revoke_grant`)."""

    grant_id: str
    by: str = "unknown"


class KeepGrants(BaseModel):
    """Owner grants a conversation made, for the workers' shared store (`keep_grants`): each
    with the uses its conversation made of it before it was kept, by their keys."""

    owner: str
    conversation_id: str
    grants: list[Grant]
    uses: list[tuple[str, str]] = []  # (grant id, use key)


class ReviewRequest(BaseModel):
    """A call a `review` rule hands to the reviewer model (`AGENT_REVIEWER`): the call, the
    rule, and the conversation's latest request from its person (clipped)."""

    call: PolicyCall
    rule: str
    asked: str


class ReviewReply(BaseModel):
    """The reviewer's verdict: allow the call, or pass it to a person with its reason."""

    allow: bool
    reason: str
    usage: Usage = Usage()
