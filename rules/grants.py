"""Pure rules of grants: a person's approval remembered for later calls of the conversation.

A grant lets a call run without asking only where a person's single approval would do: never
a call the policy denies (those never wait), never one under four eyes (the owner's grant is
no second person's), and not a destructive call unless a policy rule says it may be granted.
It expires on workflow time and after its uses, and each use is named in the audit."""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Iterable
from datetime import datetime, timedelta

from ..contract.policy import REMEMBER_SCOPES, Grant

MAX_GRANTS = 50  # live grants a conversation holds
MAX_GRANT_S = 30 * 24 * 3600.0  # the longest `for`: 30 days
MAX_GRANT_USES = 10_000
GRANTABLE_RISKS = frozenset({"safe", "sensitive"})  # destructive: only where a rule says so


def remember_refusal(remember: str | None, for_s: float | None, uses: int | None) -> str | None:
    """Why a decision's `remember`, `for_s` and `uses` cannot be taken, or None."""
    if remember is not None and remember not in REMEMBER_SCOPES:
        return f"remember must be one of {', '.join(REMEMBER_SCOPES)}, not {remember!r}"
    if (for_s is not None or uses is not None) and remember in (None, "call"):
        return "for and uses apply to a remembered approval: say what to remember (args or " \
               "conversation)"
    if for_s is not None and not 0 < for_s <= MAX_GRANT_S:
        return f"for must be more than 0 s and at most {MAX_GRANT_S / 86400:.0f} days"
    if uses is not None and not 0 < uses <= MAX_GRANT_USES:
        return f"uses must be between 1 and {MAX_GRANT_USES:,}"
    return None


def ungrantable(tool: str, risk: str, grantable: bool | None, four_eyes: Collection[str],
                owned: bool, quorum: int = 1) -> str | None:
    """Why an approval of this call may not be remembered, or None: a rule's `grantable` says
    so, else the risk decides (destructive: never); a call under four eyes, or whose rule asks
    several people, never."""
    if owned and risk in four_eyes:
        return (f"{tool} is {risk}, which four eyes covers (AGENT_FOUR_EYES): each call needs "
                "a second person, and a grant is not one")
    if quorum > 1:
        return (f"a policy rule asks {quorum} different people to approve each call of {tool}, "
                "and a grant is one person's")
    if grantable is False or (grantable is None and risk not in GRANTABLE_RISKS):
        why = "a policy rule says so" if grantable is False else f"it is {risk}"
        return f"an approval of {tool} may not be remembered: {why}"
    return None


def live(grants: Iterable[Grant], now: datetime) -> list[Grant]:
    """The grants still in force: not expired, not used up."""
    return [g for g in grants
            if (g.expires_at is None or now < g.expires_at)
            and (g.uses_left is None or g.uses_left > 0)]


def covering(grants: Iterable[Grant], tool: str, args_hash: str, now: datetime) -> Grant | None:
    """The grant that lets this call run, the narrowest first (its arguments, then its tool)."""
    fitting = [g for g in live(grants, now) if g.tool == tool
               and (g.scope == "conversation" or g.args_hash == args_hash)]
    fitting.sort(key=lambda g: (g.scope != "args", g.at))
    return fitting[0] if fitting else None


def new_grant(number: int, tool: str, scope: str, args_hash: str, by: str, now: datetime,
              for_s: float | None, uses: int | None, roles: Collection[str] = (),
              conversation_id: str = "") -> Grant:
    """A grant; an owner grant's id is drawn from its conversation's (`owner_grant_id`)."""
    grant_id = owner_grant_id(conversation_id, number) if scope == "owner" else f"g{number}"
    return Grant(id=grant_id, tool=tool, scope=scope,  # type: ignore[arg-type]
                 args_hash=args_hash if scope == "args" else None, by=by, at=now,
                 expires_at=None if for_s is None else now + timedelta(seconds=for_s),
                 uses_left=uses, roles=sorted(roles))


OWNER_GRANT_PREFIX = "o-"


def owner_grant_id(conversation_id: str, number: int) -> str:
    """An owner grant's id: the same however often the conversation's worker stores it."""
    return OWNER_GRANT_PREFIX + hashlib.sha256(f"{conversation_id}\x00{number}".encode()).hexdigest()[:12]


def use_key(conversation_id: str, turn: int, step: int, call_id: str) -> str:
    """The key a call uses an owner grant under (the same on every attempt)."""
    return f"{conversation_id}:{turn}:{step}:{call_id}"


def used(grant: Grant) -> Grant:
    return grant.model_copy(update={
        "used": grant.used + 1,
        "uses_left": None if grant.uses_left is None else grant.uses_left - 1})


def _reach(grant: Grant) -> str:
    return {"args": "with these arguments", "conversation": "in this conversation",
            "owner": "in every conversation of its owner"}[grant.scope]


def grant_note(grant: Grant) -> str:
    """How the audit names a grant's use."""
    return f"allowed by {grant.by}'s grant {grant.id} of {grant.at:%Y-%m-%d %H:%M} UTC for " \
           f"{grant.tool} {_reach(grant)}"


def describe(grant: Grant) -> str:
    """A grant as the audit trail and `grants` show it."""
    bounds = [f"until {grant.expires_at:%Y-%m-%d %H:%M:%S} UTC" if grant.expires_at else "",
              f"{grant.uses_left} use(s) left" if grant.uses_left is not None else ""]
    said = ", ".join(b for b in bounds if b)
    return f"{grant.id}: {grant.tool} {_reach(grant)}" + (f" ({said})" if said else "")
