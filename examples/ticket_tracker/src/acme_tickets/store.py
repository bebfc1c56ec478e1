"""The tickets, in one SQLite file: plain functions of a connection, which know nothing of agents.

Every write runs inside `write_once`, which records what it did under the caller's key in the
`changes` table, in the same transaction. Called again with that key, it writes nothing and
answers what the first call did: that is what makes a retried tool call harmless.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Literal

from pydantic import BaseModel

Status = Literal["open", "in_progress", "closed"]


class Priority(StrEnum):
    LOW = "low"
    NORMAL = "normal"
    HIGH = "high"
    URGENT = "urgent"


class Ticket(BaseModel):
    id: int
    title: str
    description: str
    status: Status
    priority: Priority
    assignee: str | None
    created_at: str
    updated_at: str


SCHEMA = """
CREATE TABLE IF NOT EXISTS tickets (
    id INTEGER PRIMARY KEY,
    title TEXT NOT NULL,
    description TEXT NOT NULL DEFAULT '',
    status TEXT NOT NULL DEFAULT 'open',
    priority TEXT NOT NULL DEFAULT 'normal',
    assignee TEXT,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS changes (
    idempotency_key TEXT PRIMARY KEY,
    action TEXT NOT NULL,
    ticket_id INTEGER NOT NULL,
    ticket TEXT NOT NULL,  -- the ticket as this write left it (as JSON): what a retry answers
    at TEXT NOT NULL
);
"""
UPDATABLE = frozenset({"status", "priority", "assignee"})
MOST_URGENT_FIRST = ("CASE priority WHEN 'urgent' THEN 0 WHEN 'high' THEN 1 WHEN 'normal' THEN 2 "
                     "ELSE 3 END, id")


@contextmanager
def connect(path: Path, *, write: bool = False) -> Iterator[sqlite3.Connection]:
    """One transaction on the database at `path`, created if need be. A writer takes the write
    lock at once (`BEGIN IMMEDIATE`), so no other writer comes between its check and its write."""
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path, timeout=10, isolation_level=None)
    conn.row_factory = sqlite3.Row
    try:
        conn.executescript(SCHEMA)
        conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
        try:
            yield conn
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
    finally:
        conn.close()


def find(conn: sqlite3.Connection, *, status: Status | None = None, assignee: str | None = None,
         text: str = "", limit: int = 20) -> list[Ticket]:
    """Tickets, most urgent first; `text` is looked for in titles and descriptions."""
    like = _containing(text)
    rows = conn.execute(
        "SELECT * FROM tickets WHERE (? IS NULL OR status = ?) AND (? IS NULL OR assignee = ?) "
        r"AND (title LIKE ? ESCAPE '\' OR description LIKE ? ESCAPE '\') "
        f"ORDER BY {MOST_URGENT_FIRST} LIMIT ?",
        (status, status, assignee, assignee, like, like, limit),
    ).fetchall()
    return [Ticket(**row) for row in rows]


def titled(conn: sqlite3.Connection, words: str | None, *, limit: int) -> list[Ticket]:
    """Tickets whose title contains `words` (any ticket if None), the latest changed first."""
    rows = conn.execute(
        r"SELECT * FROM tickets WHERE title LIKE ? ESCAPE '\' "
        "ORDER BY updated_at DESC, id DESC LIMIT ?",
        (_containing(words or ""), limit),
    ).fetchall()
    return [Ticket(**row) for row in rows]


def get(conn: sqlite3.Connection, ticket_id: int) -> Ticket | None:
    row = conn.execute("SELECT * FROM tickets WHERE id = ?", (ticket_id,)).fetchone()
    return None if row is None else Ticket(**row)


def write_once(conn: sqlite3.Connection, key: str, action: str,
               write: Callable[[], Ticket]) -> Ticket:
    """Run `write` and record its ticket under `key`, unless a write under `key` was already
    recorded: then return that write's ticket and do nothing."""
    done = conn.execute("SELECT ticket FROM changes WHERE idempotency_key = ?", (key,)).fetchone()
    if done is not None:
        return Ticket.model_validate_json(done["ticket"])
    ticket = write()
    conn.execute("INSERT INTO changes VALUES (?, ?, ?, ?, ?)",
                 (key, action, ticket.id, ticket.model_dump_json(), _now()))
    return ticket


def insert(conn: sqlite3.Connection, *, title: str, description: str, priority: Priority,
           assignee: str | None) -> Ticket:
    now = _now()
    cursor = conn.execute(
        "INSERT INTO tickets (title, description, priority, assignee, created_at, updated_at) "
        "VALUES (?, ?, ?, ?, ?, ?)",
        (title, description, priority.value, assignee, now, now),
    )
    ticket = get(conn, cursor.lastrowid)
    assert ticket is not None
    return ticket


def update(conn: sqlite3.Connection, ticket_id: int, fields: dict[str, str | None]
           ) -> Ticket | None:
    """Set `fields` (status, priority, assignee) of a ticket; None when there is no such ticket."""
    if not fields.keys() <= UPDATABLE:
        raise ValueError(f"only {sorted(UPDATABLE)} can change, not {sorted(fields)}")
    if get(conn, ticket_id) is None:
        return None
    assignments = ", ".join(f"{name} = ?" for name in fields)
    conn.execute(f"UPDATE tickets SET {assignments}, updated_at = ? WHERE id = ?",
                 (*fields.values(), _now(), ticket_id))
    return get(conn, ticket_id)


def delete(conn: sqlite3.Connection, ticket_id: int) -> Ticket | None:
    """Delete a ticket and return it as it was; None when there is no such ticket."""
    ticket = get(conn, ticket_id)
    if ticket is not None:
        conn.execute("DELETE FROM tickets WHERE id = ?", (ticket_id,))
    return ticket


def _containing(text: str) -> str:
    """A LIKE pattern (case-insensitive for ASCII) that matches `text` anywhere, taken literally."""
    return "%" + re.sub(r"([\\%_])", r"\\\1", text) + "%"


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")
