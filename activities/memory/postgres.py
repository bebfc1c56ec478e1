"""Memories in PostgreSQL (`AGENT_MEMORY_URL=postgresql://...`, a team's deployment), searched
with a `tsvector` (English stemming) and ranked by `ts_rank`.

A deleted row stays in its table, dead, until a vacuum: a removal vacuums the tables (`_erase`),
so no row, live or dead, keeps a removed memory's text."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from .store import (
    LOG_SCHEMA,
    SCRUB_LOG,
    MemoryStore,
    MemoryUnavailable,
    redacted,
)

SCHEMA_LOCK = 0x6D656D  # an advisory lock: workers that start together create the schema once
SCHEMA = """
CREATE TABLE IF NOT EXISTS memories (
    id TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    text TEXT NOT NULL,
    created_at TEXT NOT NULL,
    conversation_id TEXT,
    uses INTEGER NOT NULL DEFAULT 0,
    embedding TEXT,  -- a unit vector as JSON (AGENT_MEMORY_EMBEDDINGS), or NULL
    words tsvector GENERATED ALWAYS AS (to_tsvector('english', text)) STORED
);
ALTER TABLE memories ADD COLUMN IF NOT EXISTS embedding TEXT;  -- a store made before embeddings
CREATE INDEX IF NOT EXISTS memories_by_owner ON memories (owner, created_at);
CREATE INDEX IF NOT EXISTS memories_by_words ON memories USING GIN (words);
""" + LOG_SCHEMA
LOGGED_TEXT = ("SELECT 1 FROM information_schema.columns WHERE table_schema = current_schema() "
               "AND table_name = 'memory_log' AND column_name = 'text'")
VACUUM = "VACUUM memories, memory_log"  # not in a transaction: on a connection in autocommit


class PostgresMemories(MemoryStore):
    placeholder = "%s"

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self._ready = False

    def _connect(self) -> Any:
        import psycopg  # only a deployment that names PostgreSQL needs it loaded

        try:
            conn = psycopg.connect(self.url, connect_timeout=10)
        except psycopg.OperationalError as err:
            raise MemoryUnavailable(f"the memory store {redacted(self.url)} cannot be reached: "
                                    f"{str(err).replace(self.url, redacted(self.url))}") from None
        if not self._ready:
            with conn.transaction():
                conn.execute("SELECT pg_advisory_xact_lock(%s)", [SCHEMA_LOCK])
                conn.execute(SCHEMA)
                scrubbed = conn.execute(LOGGED_TEXT).fetchone() is not None
                for sql in SCRUB_LOG if scrubbed else ():  # a store made when the log kept texts
                    conn.execute(sql)
            if scrubbed:
                self._vacuum(conn)
            self._ready = True
        return conn

    def _vacuum(self, conn: Any) -> None:
        conn.autocommit = True
        try:
            conn.execute(VACUUM)
        finally:
            conn.autocommit = False

    def _erase(self) -> None:
        import psycopg

        conn = self._connect()
        try:
            self._vacuum(conn)
        except psycopg.Error as err:
            raise MemoryUnavailable(f"the memory store {redacted(self.url)} removed the memory "
                                    f"but could not yet vacuum it away: {err}") from err
        finally:
            conn.close()

    @contextmanager
    def _transaction(self) -> Iterator[Any]:
        conn = self._connect()
        try:
            with conn.transaction():
                yield conn
        finally:
            conn.close()

    def _ranked_sql(self, terms: list[str]) -> tuple[str, list[Any]]:
        # Each term a quoted lexeme, so no word of the query is read as tsquery syntax.
        query = " | ".join("'" + t.replace("'", "''").replace("\\", "\\\\") + "'" for t in terms)
        return ("SELECT id, -ts_rank(words, q) AS rank FROM memories, "
                "to_tsquery('english', %s) q WHERE words @@ q", [query])
