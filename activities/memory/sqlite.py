"""Memories in SQLite (the default: `sqlite:///$AGENT_DATA_DIR/memory.sqlite3`), searched with
FTS5 (Porter stemming over Unicode words) and ranked by BM25.

A removed memory's bytes would outlive its row three ways: in freed pages and cells, in the
write-ahead log, and in FTS5's segments (a delete there only adds a marker until the segments
merge). So every connection zeroes what it frees (`secure_delete`), and a removal rebuilds the
text index and empties the log into the file (`erase`)."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from .store import LOG_SCHEMA, SCRUB_LOG, MemoryStore, MemoryUnavailable

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


def scrub_log(conn: sqlite3.Connection) -> bool:
    """Whether the log held texts (a store made before it kept none), now erased."""
    conn.execute("BEGIN IMMEDIATE")  # one of several processes opening it at once scrubs it
    try:
        columns = {row[1] for row in conn.execute("PRAGMA table_info(memory_log)")}
        if "text" in columns:
            for sql in SCRUB_LOG:
                conn.execute(sql)
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return "text" in columns


def erase(conn: sqlite3.Connection, vacuum: bool = False) -> None:
    """What was removed, out of the files: the text index rebuilt from the memories left, and the
    write-ahead log checkpointed and truncated; with `vacuum`, the file rebuilt too (its free
    space may hold what was deleted before `secure_delete`). A rebuild, not an 'optimize': with
    SQLite 3.40 the index gains levels at each removal, an optimize's too, and cannot be opened
    past 2,000 ("vtable constructor failed"); a rebuild starts it afresh."""
    conn.execute("INSERT INTO memories_text (memories_text) VALUES ('rebuild')")
    if vacuum:
        conn.execute("VACUUM")
    busy, _, _ = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
    if busy:  # a reader held an older snapshot past the busy timeout
        raise sqlite3.OperationalError("the write-ahead log is in use: it could not be emptied")


class SqliteMemories(MemoryStore):
    def __init__(self, url: str, path: Path) -> None:
        super().__init__(url)
        self.path = path
        self._ready = False

    def _connect(self) -> sqlite3.Connection:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(self.path, timeout=10, isolation_level=None)
            conn.execute("PRAGMA secure_delete=ON")
            if not self._ready:
                conn.execute("PRAGMA journal_mode=WAL")
                conn.executescript(SCHEMA)
                columns = {row[1] for row in conn.execute("PRAGMA table_info(memories)")}
                if "embedding" not in columns:  # a store made before embeddings
                    conn.execute("ALTER TABLE memories ADD COLUMN embedding TEXT")
                if scrub_log(conn):
                    erase(conn, vacuum=True)
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

    def _erase(self) -> None:
        conn = self._connect()
        try:
            erase(conn)
        except sqlite3.Error as err:
            raise MemoryUnavailable(f"the memory store {self.path} removed the memory but could "
                                    f"not yet erase it from its files: {err}") from err
        finally:
            conn.close()

    def _ranked_sql(self, terms: list[str]) -> tuple[str, list[Any]]:
        match = " OR ".join('"' + t.replace('"', '""') + '"' for t in terms)
        return ("SELECT memories.id AS id, bm25(memories_text) AS rank FROM memories_text "
                "JOIN memories ON memories.rowid = memories_text.rowid "
                "WHERE memories_text MATCH ?", [match])
