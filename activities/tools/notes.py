"""Notes on SQLite in $AGENT_DATA_DIR: list (safe), create (sensitive), delete (destructive).

`create_note` and `delete_note` are not idempotent by nature, so they write under the call's
idempotency key: a retry after a crash mid-write finds what it already did (the row it wrote, the
deletion it made) instead of doing it again, which makes them safe to retry (`keyed`).
"""

from __future__ import annotations

import asyncio
import re
import sqlite3
from datetime import datetime, timezone
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, model_validator

from .function_tool import tool
from .registry import NeedsInput, ToolContext, ToolError


def notes_table(name: str) -> str:
    """The notes table (DESIGN's columns). AUTOINCREMENT: a deleted note's id is never given to
    a new one, so "note 3" in an earlier approval or answer names no other note."""
    return f"""
CREATE TABLE IF NOT EXISTS {name} (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    title TEXT,
    body TEXT,
    created_at TEXT,
    idempotency_key TEXT UNIQUE
)
"""


SCHEMA = notes_table("notes")
# What each delete_note call deleted, under its idempotency key: a retry answers the same.
DELETIONS = """
CREATE TABLE IF NOT EXISTS deletions (
    idempotency_key TEXT PRIMARY KEY,
    note_id INTEGER,
    title TEXT,
    deleted_at TEXT
)
"""
OPTION_ID = re.compile(r"^#(\d+)\b")


def notes_db(data_dir: Path) -> Path:
    return data_dir / "notes.sqlite3"


def _connect(data_dir: Path) -> sqlite3.Connection:
    data_dir.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(notes_db(data_dir), timeout=10)
    conn.execute(SCHEMA)
    conn.execute(DELETIONS)
    if not _autoincrement(conn):
        _migrate_to_autoincrement(conn)
    return conn


def _autoincrement(conn: sqlite3.Connection) -> bool:
    (sql,) = conn.execute("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'notes'"
                          ).fetchone()
    return "AUTOINCREMENT" in sql.upper()


def _migrate_to_autoincrement(conn: sqlite3.Connection) -> None:
    """A database made before note ids were AUTOINCREMENT (it gave the newest note's id again
    once that note was deleted): its table made again, the same rows and ids, the next id past
    every id it holds or has deleted. Once, under a write lock: another worker may try too."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        if not _autoincrement(conn):
            conn.execute(notes_table("notes_autoincrement"))
            conn.execute("INSERT INTO notes_autoincrement SELECT id, title, body, created_at, "
                         "idempotency_key FROM notes")
            conn.execute("DROP TABLE notes")
            conn.execute("ALTER TABLE notes_autoincrement RENAME TO notes")
            (last,) = conn.execute("SELECT MAX(COALESCE((SELECT MAX(id) FROM notes), 0), "
                                   "COALESCE((SELECT MAX(note_id) FROM deletions), 0))").fetchone()
            conn.execute("DELETE FROM sqlite_sequence WHERE name = 'notes'")
            conn.execute("INSERT INTO sqlite_sequence (name, seq) VALUES ('notes', ?)", (last,))
        conn.commit()
    except BaseException:
        conn.rollback()
        raise


class CreateNoteArgs(BaseModel):
    title: str = Field(min_length=1, description="The note's title")
    body: str = Field(description="The note's text")


class DeleteNoteArgs(BaseModel):
    # Checked in the workflow too, before anyone is asked to approve the call.
    model_config = ConfigDict(
        json_schema_extra={"oneOf": [{"required": ["note_id"]}, {"required": ["title"]}]}
    )

    note_id: int | None = Field(default=None, description="The id of the note to delete")
    title: str | None = Field(
        default=None, description="Or the title of the note; if several match, the user chooses"
    )

    @model_validator(mode="after")
    def _one_target(self) -> DeleteNoteArgs:
        if (self.note_id is None) == (self.title is None):
            raise ValueError("give exactly one of note_id and title")
        return self


def _list(data_dir: Path, query: str) -> str:
    with _connect(data_dir) as conn:
        like = f"%{query}%"
        rows = conn.execute(
            "SELECT id, title, body FROM notes WHERE title LIKE ? OR body LIKE ? ORDER BY id",
            (like, like),
        ).fetchall()
    if not rows:
        return "No notes" + (f" matching {query!r}." if query else ".")
    return "\n".join(f"#{i} {title}: {body}" for i, title, body in rows)


def _create(data_dir: Path, args: CreateNoteArgs, key: str) -> str:
    now = datetime.now(timezone.utc).isoformat(timespec="seconds")
    with _connect(data_dir) as conn:
        conn.execute(
            "INSERT INTO notes (title, body, created_at, idempotency_key) VALUES (?, ?, ?, ?) "
            "ON CONFLICT(idempotency_key) DO NOTHING",
            (args.title, args.body, now, key),
        )
        (note_id,) = conn.execute(
            "SELECT id FROM notes WHERE idempotency_key = ?", (key,)
        ).fetchone()
    return f"Created note #{note_id} {args.title!r}."


def _delete(data_dir: Path, args: DeleteNoteArgs, answer: str | None, key: str) -> str:
    with _connect(data_dir) as conn:
        done = conn.execute("SELECT note_id, title FROM deletions WHERE idempotency_key = ?",
                            (key,)).fetchone()
        if done is not None:  # a retry of a call that already deleted its note
            return f"Deleted note #{done[0]} {done[1]!r}."
        if args.note_id is not None:
            if not -(2**63) <= args.note_id < 2**63:  # past SQLite's integers: no note has it
                raise ToolError("no note has that id: it is past the range of note ids")
            target = args.note_id
        else:
            matches = conn.execute(
                "SELECT id, title, created_at FROM notes WHERE title = ? COLLATE NOCASE ORDER BY id",
                (args.title,),
            ).fetchall()
            if not matches:
                raise ToolError(f"no note is titled {args.title!r}")
            options = [f"#{i} {title} (created {created})" for i, title, created in matches]
            if len(matches) == 1:
                target = matches[0][0]
            elif answer is None:
                raise NeedsInput(
                    f"{len(matches)} notes are titled {args.title!r}. Which one to delete?",
                    options=options,
                )
            else:
                chosen = OPTION_ID.match(answer)
                target = int(chosen.group(1)) if chosen else -1
                if target not in {m[0] for m in matches}:
                    raise ToolError(f"the answer {answer!r} names none of the matching notes")
        row = conn.execute("SELECT title FROM notes WHERE id = ?", (target,)).fetchone()
        if row is None:
            raise ToolError(f"there is no note #{target}")
        conn.execute("DELETE FROM notes WHERE id = ?", (target,))
        conn.execute("INSERT INTO deletions VALUES (?, ?, ?, ?)",
                     (key, target, row[0], datetime.now(timezone.utc).isoformat(timespec="seconds")))
    return f"Deleted note #{target} {row[0]!r}."


@tool(timeout_s=10)
async def list_notes(ctx: ToolContext, query: str = "") -> str:
    """List the user's notes, optionally filtered by a text.

    Args:
        query: Text to look for in titles and bodies; empty lists all
    """
    return await asyncio.to_thread(_list, ctx.settings.data_dir, query)


@tool(risk="sensitive", idempotent=False, keyed=True, timeout_s=10)
async def create_note(note: CreateNoteArgs, ctx: ToolContext) -> str:
    """Create a note with a title and a body."""
    return await asyncio.to_thread(_create, ctx.settings.data_dir, note, ctx.idempotency_key)


@tool(risk="destructive", idempotent=False, keyed=True, timeout_s=10)
async def delete_note(target: DeleteNoteArgs, ctx: ToolContext) -> str:
    """Delete a note by id, or by title (the user picks when several match)."""
    return await asyncio.to_thread(_delete, ctx.settings.data_dir, target, ctx.answer,
                                   ctx.idempotency_key)


NOTES_TOOLS = [list_notes, create_note, delete_note]
