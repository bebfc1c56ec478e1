"""Memories in SQLite (the default: `sqlite:///$AGENT_DATA_DIR/memory.sqlite3`), searched with
FTS5 (Porter stemming over Unicode words) and ranked by BM25."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from activities.memory.store import LOG_SCHEMA, MemoryStore, MemoryUnavailable

SCHEMA = """
CREATE TABLE IF NOT EXISTS memories (
    id TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    text TEXT NOT NULL,
    created_at TEXT NOT NULL,
    conversation_id TEXT,
    uses INTEGER NOT NULL DEFAULT 0,
    embedding TEXT  -- a unit vector as JSON (AGENT_MEMORY_EMBEDDINGS), or NULL
);
CREATE INDEX IF NOT EXISTS memories_by_owner ON memories (owner, created_at);
CREATE VIRTUAL TABLE IF NOT EXISTS memories_text USING fts5(
    text, content='memories', content_rowid='rowid', tokenize='porter unicode61');
CREATE TRIGGER IF NOT EXISTS memories_added AFTER INSERT ON memories BEGIN
    INSERT INTO memories_text (rowid, text) VALUES (new.rowid, new.text);
END;
CREATE TRIGGER IF NOT EXISTS memories_removed AFTER DELETE ON memories BEGIN
    INSERT INTO memories_text (memories_text, rowid, text) VALUES ('delete', old.rowid, old.text);
END;
""" + LOG_SCHEMA


class SqliteMemories(MemoryStore):
    def __init__(self, url: str, path: Path) -> None:
        super().__init__(url)
        self.path = path
        self._ready = False

    def _connect(self) -> sqlite3.Connection:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(self.path, timeout=10, isolation_level=None)
            if not self._ready:
                conn.execute("PRAGMA journal_mode=WAL")
                conn.executescript(SCHEMA)
                columns = {row[1] for row in conn.execute("PRAGMA table_info(memories)")}
                if "embedding" not in columns:  # a store made before embeddings
                    conn.execute("ALTER TABLE memories ADD COLUMN embedding TEXT")
                self._ready = True
        except (OSError, sqlite3.Error) as err:
            raise MemoryUnavailable(
                f"the memory store {self.path} cannot be opened: {err}") from err
        return conn

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        conn = self._connect()
        try:
            conn.execute("BEGIN IMMEDIATE")  # writers queue here, not at their first write
            yield conn
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        finally:
            conn.close()

    def _ranked_sql(self, terms: list[str]) -> tuple[str, list[Any]]:
        match = " OR ".join('"' + t.replace('"', '""') + '"' for t in terms)
        return ("SELECT memories.id AS id, bm25(memories_text) AS rank FROM memories_text "
                "JOIN memories ON memories.rowid = memories_text.rowid "
                "WHERE memories_text MATCH ?", [match])
