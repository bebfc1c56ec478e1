"""The notes tools against a real SQLite file, without Temporal."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from durable_react_agent.activities.tools import NeedsInput, ToolError
from durable_react_agent.activities.tools.notes import (
    CreateNoteArgs,
    DeleteNoteArgs,
    _create,
    _delete,
    _list,
)
from tests.helpers import note_rows


def test_create_with_the_same_idempotency_key_writes_once(tmp_path: Path):
    args = CreateNoteArgs(title="Milk", body="2 litres")
    first = _create(tmp_path, args, "key-1")
    again = _create(tmp_path, args, "key-1")  # a retry of the same call, e.g. after a crash
    assert first == again == "Created note #1 'Milk'."
    assert note_rows(tmp_path) == [(1, "Milk", "2 litres")]
    _create(tmp_path, args, "key-2")  # a new call is a new note
    assert len(note_rows(tmp_path)) == 2


def test_list_filters_by_text(tmp_path: Path):
    assert _list(tmp_path, "") == "No notes."
    _create(tmp_path, CreateNoteArgs(title="Milk", body="2 litres"), "a")
    _create(tmp_path, CreateNoteArgs(title="Trip", body="Paris in May"), "b")
    assert _list(tmp_path, "paris") == "#2 Trip: Paris in May"
    assert _list(tmp_path, "zzz") == "No notes matching 'zzz'."


def test_delete_by_title_asks_when_ambiguous(tmp_path: Path):
    for key in ("a", "b"):
        _create(tmp_path, CreateNoteArgs(title="Todo", body=key), key)
    _create(tmp_path, CreateNoteArgs(title="Solo", body="s"), "c")
    with pytest.raises(NeedsInput) as asked:
        _delete(tmp_path, DeleteNoteArgs(title="todo"), None, "d1")
    question = asked.value.question
    assert question.kind == "choice" and [o.split(" (")[0] for o in question.options] == ["#1 Todo", "#2 Todo"]
    with pytest.raises(ToolError, match="names none of the matching notes"):
        _delete(tmp_path, DeleteNoteArgs(title="Todo"), "#3 Solo", "d1")
    assert _delete(tmp_path, DeleteNoteArgs(title="Todo"), question.options[1], "d1") == "Deleted note #2 'Todo'."
    assert _delete(tmp_path, DeleteNoteArgs(title="Solo"), None, "d2") == "Deleted note #3 'Solo'."
    with pytest.raises(ToolError, match="there is no note #9"):
        _delete(tmp_path, DeleteNoteArgs(note_id=9), None, "d3")
    with pytest.raises(ValueError):
        DeleteNoteArgs(note_id=1, title="Todo")


def test_a_retried_delete_answers_what_it_did(tmp_path: Path):
    _create(tmp_path, CreateNoteArgs(title="Once", body="b"), "c1")
    first = _delete(tmp_path, DeleteNoteArgs(title="Once"), None, "key-d")
    again = _delete(tmp_path, DeleteNoteArgs(title="Once"), None, "key-d")  # after a crash, say
    assert first == again == "Deleted note #1 'Once'."
    with pytest.raises(ToolError, match="no note is titled 'Once'"):
        _delete(tmp_path, DeleteNoteArgs(title="Once"), None, "key-other")  # a new call


def test_a_deleted_notes_id_is_never_given_again(tmp_path: Path):
    for key in ("a", "b", "c"):
        _create(tmp_path, CreateNoteArgs(title=f"note {key}", body=key), key)
    assert _delete(tmp_path, DeleteNoteArgs(note_id=3), None, "d") == "Deleted note #3 'note c'."
    # "note 3" in an earlier approval still names the deleted note, not the next one
    assert _create(tmp_path, CreateNoteArgs(title="new", body="n"), "e") == "Created note #4 'new'."


def test_a_database_from_before_takes_no_deleted_id_again(tmp_path: Path):
    with sqlite3.connect(tmp_path / "notes.sqlite3") as conn:  # as the notes tool made it before
        conn.executescript("""
            CREATE TABLE notes (id INTEGER PRIMARY KEY, title TEXT, body TEXT, created_at TEXT,
                                idempotency_key TEXT UNIQUE);
            CREATE TABLE deletions (idempotency_key TEXT PRIMARY KEY, note_id INTEGER,
                                    title TEXT, deleted_at TEXT);
            INSERT INTO notes VALUES (1, 'kept', 'k', '2025-01-01T00:00:00+00:00', 'a'),
                                     (2, 'newest', 'n', '2025-01-01T00:00:00+00:00', 'b');
            DELETE FROM notes WHERE id = 2;
            INSERT INTO deletions VALUES ('d', 2, 'newest', '2025-01-02T00:00:00+00:00');
        """)
    assert _create(tmp_path, CreateNoteArgs(title="new", body="n"), "c") == "Created note #3 'new'."
    assert _create(tmp_path, CreateNoteArgs(title="new", body="n"), "c") == "Created note #3 'new'."
    assert note_rows(tmp_path) == [(1, "kept", "k"), (3, "new", "n")]
    with sqlite3.connect(tmp_path / "notes.sqlite3") as conn:  # DESIGN's columns, as they were
        columns = [(c[1], c[2], c[5]) for c in conn.execute("PRAGMA table_info(notes)")]
    assert columns == [("id", "INTEGER", 1), ("title", "TEXT", 0), ("body", "TEXT", 0),
                       ("created_at", "TEXT", 0), ("idempotency_key", "TEXT", 0)]
