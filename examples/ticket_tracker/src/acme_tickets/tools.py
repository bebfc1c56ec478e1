"""The ticket tracker's tools: find tickets (safe), open one and change one (sensitive), delete one
(destructive). The worker finds them through this package's entry point.

The writes are not idempotent by nature (opening a ticket twice makes two), so each writes under
the call's `ctx.idempotency_key` (`keyed=True`): the key is the same on every attempt of one call,
and a retry after a crash finds what the first attempt wrote and answers the same.
"""

from __future__ import annotations

import os
import re
import sqlite3
from pathlib import Path
from typing import Annotated

from pydantic import Field

from acme_tickets import store
from acme_tickets.store import Priority, Status, Ticket
from durable_react_agent import NeedsInput, ToolContext, ToolError, tool

MAX_CHOICES = 20  # tickets offered when the user must pick one
CHOICE_ID = re.compile(r"^#(\d+)\b")


def database(ctx: ToolContext) -> Path:
    """`TICKETS_DB`, else `tickets.sqlite3` in the worker's data directory (`AGENT_DATA_DIR`).
    Read at each call, not at import, so it is the worker's setting that counts."""
    return Path(os.environ.get("TICKETS_DB") or ctx.settings.data_dir / "tickets.sqlite3")


@tool(timeout_s=10)
def list_tickets(
    ctx: ToolContext,
    status: Status | None = None,
    assignee: str | None = None,
    text: str = "",
    limit: Annotated[int, Field(ge=1, le=100)] = 20,
) -> list[Ticket]:
    """List or search the team's tickets, most urgent first.

    Args:
        status: only tickets in this status; leave it out for every status
        assignee: only tickets assigned to this person
        text: words to look for in titles and descriptions
        limit: at most this many tickets
    """
    with store.connect(database(ctx)) as conn:
        return store.find(conn, status=status, assignee=assignee, text=text, limit=limit)


@tool(risk="sensitive", idempotent=False, keyed=True, timeout_s=10)
def create_ticket(
    title: Annotated[str, Field(min_length=1, max_length=200)],
    ctx: ToolContext,
    description: str = "",
    priority: Priority = Priority.NORMAL,
    assignee: str | None = None,
) -> Ticket:
    """Open a new ticket.

    Args:
        title: what is wrong or wanted, in a line
        description: the details: what happened, where, since when
        priority: how soon it must be dealt with
        assignee: who will work on it, if anyone yet
    """
    with store.connect(database(ctx), write=True) as conn:
        return store.write_once(conn, ctx.idempotency_key, "create", lambda: store.insert(
            conn, title=title, description=description, priority=priority, assignee=assignee))


@tool(risk="sensitive", idempotent=False, keyed=True, timeout_s=10)
def update_ticket(
    ticket_id: int,
    ctx: ToolContext,
    status: Status | None = None,
    priority: Priority | None = None,
    assignee: str | None = None,
) -> Ticket:
    """Change a ticket: close or reopen it, assign it to someone, change its priority.

    Args:
        ticket_id: the ticket's number
        status: its new status
        priority: its new priority
        assignee: who works on it from now on; an empty text unassigns it
    """
    fields: dict[str, str | None] = {}
    if status is not None:
        fields["status"] = status
    if priority is not None:
        fields["priority"] = priority.value
    if assignee is not None:
        fields["assignee"] = assignee or None
    if not fields:
        raise ToolError("nothing to change: give a status, a priority or an assignee")
    with store.connect(database(ctx), write=True) as conn:
        return store.write_once(conn, ctx.idempotency_key, "update", lambda: existing(
            store.update(conn, ticket_id, fields), ticket_id))


@tool(risk="destructive", idempotent=False, keyed=True, timeout_s=10)
def delete_ticket(
    ctx: ToolContext,
    ticket_id: int | None = None,
    title_contains: str | None = None,
) -> str:
    """Delete a ticket for good, by number or by words of its title. Without either, or when
    several titles match, the user is asked which ticket.

    Args:
        ticket_id: the ticket's number
        title_contains: or words of its title
    """
    with store.connect(database(ctx), write=True) as conn:
        gone = store.write_once(conn, ctx.idempotency_key, "delete", lambda: existing(
            store.delete(conn, target(conn, ticket_id, title_contains, ctx.answer)), ticket_id))
    return f"Deleted ticket #{gone.id} {gone.title!r}."


def target(conn: sqlite3.Connection, ticket_id: int | None, title_contains: str | None,
           answer: str | None) -> int:
    """The ticket to delete: the one named, the one title that matches, or the one the user
    picked (`answer`); otherwise ask the user (`NeedsInput`), and the tool runs again."""
    if ticket_id is not None:
        return ticket_id
    if answer is not None:
        chosen = CHOICE_ID.match(answer)
        ticket = store.get(conn, int(chosen.group(1))) if chosen else None
        if ticket is None or (title_contains or "").lower() not in ticket.title.lower():
            raise ToolError(f"the answer {answer!r} names none of the tickets offered")
        return ticket.id
    candidates = store.titled(conn, title_contains, limit=MAX_CHOICES)
    if not candidates:
        raise ToolError(f"no ticket's title contains {title_contains!r}" if title_contains
                        else "there are no tickets")
    if title_contains and len(candidates) == 1:
        return candidates[0].id
    asked = (f"{len(candidates)} tickets' titles contain {title_contains!r}." if title_contains
             else "No ticket was named.")
    raise NeedsInput(f"{asked} Which one should be deleted?", options=[
        f"#{t.id} {t.title} ({t.status}, {t.priority.value})" for t in candidates])


def existing(ticket: Ticket | None, ticket_id: int | None) -> Ticket:
    if ticket is None:
        raise ToolError(f"there is no ticket #{ticket_id}")
    return ticket
