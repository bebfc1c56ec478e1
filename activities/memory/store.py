"""The memory store: what owners asked the agent to remember, searched by full-text rank.

One implementation over SQL for both databases (`SqliteMemories`, `PostgresMemories`): they
differ in how they connect, their schema and their text search (SQLite's FTS5 with BM25,
PostgreSQL's `tsvector` with `ts_rank`). Every write is keyed: `add` under the tool call's
idempotency key (a retry finds the memory it stored), `forget` under its own key (a retry
answers what it forgot), so a crash mid-write never stores or forgets twice. What was
remembered, forgotten and evicted is kept in `memory_log`, the store's audit: who, when and why,
never the memory's text. A removal is erased from the database's files too (`_erase`): a person
who forgets "my bank PIN is 4921" expects it gone.

Calls block: callers run them in a thread (`asyncio.to_thread`).
"""

from __future__ import annotations

import hashlib
import json
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any
from urllib.parse import urlsplit

from ...contract.memory import Memory
from ...rules.memory import memory_text_problem, search_terms
from .grants import SCHEMA as GRANTS_SCHEMA
from .grants import OwnerGrants
from .pushes import SCHEMA as PUSHES_SCHEMA
from .pushes import PushConfigs

COLUMNS = "id, owner, text, created_at, conversation_id"
LOGGED = "memory_id, owner, created_at, conversation_id"  # a memory in the log: never its text
MAX_LISTED = 1000
# With embeddings: how near a memory must be to count (cosine of unit vectors), how many of the
# owner's newest are compared, and the constant of the reciprocal-rank fusion of both ranks
MIN_SIMILARITY = 0.3
MAX_COMPARED = 2000
FUSION_K = 60


class MemoryRefused(ValueError):
    """Input the store will not take (bad text, a bad id): the message says why."""


class MemoryUnavailable(RuntimeError):
    """The store cannot be reached or opened: the message says which and why (no password)."""


@dataclass(frozen=True)
class Stored:
    """What `add` did: the memory, whether this call stored it (not a retry's earlier call), and
    the memories it pushed out to keep the owner within their bound (a retry's: their text "",
    erased)."""

    memory: Memory
    new: bool
    evicted: list[Memory] = field(default_factory=list)


def memory_id(owner: str, key: str) -> str:
    """A memory's id, from its owner and the idempotency key it was stored under: the same on
    every attempt of a call."""
    return "mem-" + hashlib.sha256(f"{owner}\x00{key}".encode()).hexdigest()[:16]


# The log, the same in both databases: remembered, forgotten or evicted, by whom, when and why
LOG_SCHEMA = """
CREATE TABLE IF NOT EXISTS memory_log (
    key TEXT UNIQUE,  -- a forget's idempotency key
    action TEXT NOT NULL,
    memory_id TEXT NOT NULL,
    owner TEXT NOT NULL,
    created_at TEXT NOT NULL,
    conversation_id TEXT,
    by_whom TEXT NOT NULL,
    cause TEXT,
    at TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS memory_log_by_cause ON memory_log (cause);
CREATE INDEX IF NOT EXISTS memory_log_by_memory ON memory_log (memory_id);
""" + GRANTS_SCHEMA + PUSHES_SCHEMA
# A store made when the log kept the texts of removed memories: each erased, then the column
# dropped, on the first open (a store without the column has nothing to do)
SCRUB_LOG = ("UPDATE memory_log SET text = ''", "ALTER TABLE memory_log DROP COLUMN text")


def fused(rankings: list[list[Memory]]) -> list[Memory]:
    """Rankings fused by reciprocal rank: a memory high in either, or fair in both, comes first."""
    score: dict[str, float] = {}
    found: dict[str, Memory] = {}
    for ranking in rankings:
        for place, memory in enumerate(ranking):
            score[memory.id] = score.get(memory.id, 0.0) + 1 / (FUSION_K + place)
            found[memory.id] = memory
    return sorted(found.values(), key=lambda m: -score[m.id])


def redacted(url: str) -> str:
    """`url` without its password, for logs and errors."""
    password = urlsplit(url).password
    return url if password is None else url.replace(f":{password}@", ":***@", 1)


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="microseconds")


class MemoryStore(OwnerGrants, PushConfigs, ABC):
    """The memories of every owner, in one database."""

    placeholder = "?"

    def __init__(self, url: str) -> None:
        self.url = url

    # ----- what each database does its own way -----

    @abstractmethod
    def _connect(self) -> Any:
        """A connection, with the schema in place."""

    @contextmanager
    @abstractmethod
    def _transaction(self) -> Iterator[Any]:
        """A connection in a transaction, committed when the block ends without an error."""

    @abstractmethod
    def _ranked_sql(self, terms: list[str]) -> tuple[str, list[Any]]:
        """SQL (and its parameters) for the ids of memories that match any of `terms`, best
        first, as a subquery `ranked(id, rank)`: lower rank is better."""

    @abstractmethod
    def _erase(self) -> None:
        """Erase from the database's files what the last commit removed, so that no page, free
        space, journal or text index keeps a removed memory's words: a retry of a removal calls
        it again."""

    # ----- the store -----

    def _sql(self, sql: str) -> str:
        return sql if self.placeholder == "?" else sql.replace("?", self.placeholder)

    def _rows(self, conn: Any, sql: str, params: Sequence[Any] = ()) -> list[Memory]:
        rows = conn.execute(self._sql(sql), list(params)).fetchall()
        return [Memory(id=r[0], owner=r[1], text=r[2], created_at=r[3], conversation_id=r[4])
                for r in rows]

    def _logged(self, conn: Any, where: str, params: Sequence[Any]) -> list[Memory]:
        """The memories the log names where `where`, oldest entry first, as it keeps them: with
        no text (""), which it never holds."""
        rows = conn.execute(self._sql(f"SELECT {LOGGED} FROM memory_log WHERE {where} "
                                      "ORDER BY at"), list(params)).fetchall()
        return [Memory(id=r[0], owner=r[1], text="", created_at=r[2], conversation_id=r[3])
                for r in rows]

    def add(self, owner: str, text: str, key: str, conversation_id: str | None = None,
            max_per_owner: int = 500, embedding: list[float] | None = None) -> Stored:
        """Store `text` for `owner` under `key` (with its unit `embedding`, if any); a second call
        with the key returns the first's memory (and the ids of what it pushed out: the log keeps
        no text). Past `max_per_owner`, the owner's least-used memories go, the oldest first,
        logged as evicted and erased as a forget is."""
        problem = memory_text_problem(text)
        if problem is not None:
            raise MemoryRefused(problem)
        mid = memory_id(owner, key)
        with self._transaction() as conn:
            found = self._rows(conn, f"SELECT {COLUMNS} FROM memories WHERE id = ?", [mid])
            removed = [] if found else self._logged(
                conn, "memory_id = ? AND action <> 'remembered'", [mid])
            if found:  # a retry: what the first pushed out, by id, erased again below
                stored = Stored(found[0], new=False, evicted=self._logged(conn, "cause = ?", [mid]))
            elif removed:  # stored by an earlier attempt, and forgotten since: not stored again
                return Stored(removed[0].model_copy(update={"text": text}), new=False)
            else:
                memory = Memory(id=mid, owner=owner, text=text, created_at=now(),
                                conversation_id=conversation_id)
                stored = self._insert(conn, memory, max_per_owner, embedding)
        if stored.evicted:
            self._erase()
        return stored

    def _insert(self, conn: Any, memory: Memory, max_per_owner: int,
                embedding: list[float] | None) -> Stored:
        """`memory` stored and logged; past `max_per_owner`, the owner's least-used memories
        removed, the oldest first."""
        conn.execute(self._sql(f"INSERT INTO memories ({COLUMNS}, uses, embedding) "
                               "VALUES (?, ?, ?, ?, ?, 0, ?)"),
                     [memory.id, memory.owner, memory.text, memory.created_at,
                      memory.conversation_id, None if embedding is None else json.dumps(embedding)])
        self._log(conn, "remembered", memory, by=memory.owner)
        (count,) = conn.execute(self._sql("SELECT count(*) FROM memories WHERE owner = ?"),
                                [memory.owner]).fetchone()
        evicted = []
        if count > max_per_owner:
            evicted = self._rows(
                conn, f"SELECT {COLUMNS} FROM memories WHERE owner = ? AND id <> ? "
                "ORDER BY uses, created_at LIMIT ?",
                [memory.owner, memory.id, count - max_per_owner])
            for gone in evicted:
                self._remove(conn, gone, action="evicted", by="memory bound", cause=memory.id)
        return Stored(memory, new=True, evicted=evicted)

    def search(self, owner: str, query: str, limit: int,
               embedding: list[float] | None = None) -> list[Memory]:
        """The owner's memories that share words with `query`, best first; with the query's
        unit `embedding`, also those near it, both ranks fused. Each found counts as a use (the
        least-used go first when the owner's bound is reached)."""
        terms = search_terms(query)
        if limit < 1 or (not terms and embedding is None):
            return []
        with self._transaction() as conn:
            ranked = self._text_ranked(conn, owner, terms, limit * 4) if terms else []
            if embedding is not None:
                ranked = fused([ranked, self._nearest(conn, owner, embedding, limit * 4)])
            found = ranked[:limit]
            for memory in found:
                conn.execute(self._sql("UPDATE memories SET uses = uses + 1 WHERE id = ?"),
                             [memory.id])
        return found

    def _text_ranked(self, conn: Any, owner: str | None, terms: list[str], n: int
                     ) -> list[Memory]:
        """The memories of `owner` (None: every owner's) that share any of `terms`, best first."""
        ranked, params = self._ranked_sql(terms)
        where, whose = ("WHERE m.owner = ?", [owner]) if owner is not None else ("", [])
        return self._rows(
            conn, f"SELECT m.id, m.owner, m.text, m.created_at, m.conversation_id "
            f"FROM ({ranked}) ranked JOIN memories m ON m.id = ranked.id {where} "
            "ORDER BY ranked.rank, m.created_at DESC LIMIT ?", [*params, *whose, n])

    def _nearest(self, conn: Any, owner: str, query: list[float], n: int) -> list[Memory]:
        """The owner's memories whose vectors are nearest `query` (of those of its dimensions,
        among the newest compared), at least `MIN_SIMILARITY` near."""
        rows = conn.execute(self._sql(
            f"SELECT {COLUMNS}, embedding FROM memories WHERE owner = ? AND embedding IS NOT NULL "
            "ORDER BY created_at DESC LIMIT ?"), [owner, MAX_COMPARED]).fetchall()
        scored = []
        for row in rows:
            vector = json.loads(row[5])
            if len(vector) == len(query):
                near = sum(a * b for a, b in zip(vector, query, strict=True))
                if near >= MIN_SIMILARITY:
                    scored.append((near, Memory(id=row[0], owner=row[1], text=row[2],
                                                created_at=row[3], conversation_id=row[4])))
        scored.sort(key=lambda pair: -pair[0])
        return [memory for _, memory in scored[:n]]

    def list(self, owner: str | None, query: str | None = None,
             limit: int = MAX_LISTED) -> list[Memory]:
        """The memories of `owner` (None: every owner's), newest first, or those matching
        `query`, best first."""
        limit = max(0, min(limit, MAX_LISTED))
        with self._transaction() as conn:
            if query:
                terms = search_terms(query)
                return self._text_ranked(conn, owner, terms, limit) if terms else []
            where, whose = ("WHERE owner = ?", [owner]) if owner is not None else ("", [])
            return self._rows(conn, f"SELECT {COLUMNS} FROM memories {where} "
                              "ORDER BY created_at DESC, id LIMIT ?", [*whose, limit])

    def get(self, memory_id: str) -> Memory | None:
        with self._transaction() as conn:
            found = self._rows(conn, f"SELECT {COLUMNS} FROM memories WHERE id = ?", [memory_id])
        return found[0] if found else None

    def forget(self, memory_id: str, owner: str | None, key: str, by: str) -> Memory | None:
        """Remove the memory `memory_id` of `owner` (None: of anyone, for an admin), logged with
        who asked, and erase it from the database's files; None if there is none such. A second
        call with `key` answers as the first, without the text (the store keeps none)."""
        with self._transaction() as conn:
            done = self._logged(conn, "key = ?", [key])
            if done:
                gone = done[0]
            else:
                found = self._rows(conn, f"SELECT {COLUMNS} FROM memories WHERE id = ?",
                                   [memory_id])
                if not found or (owner is not None and found[0].owner != owner):
                    return None  # another owner's is as absent as one that never was
                gone = found[0]
                self._remove(conn, gone, action="forgotten", by=by, key=key)
        self._erase()
        return gone

    def log(self, owner: str | None = None) -> list[dict[str, Any]]:
        """What was remembered, forgotten (by whom) and evicted, oldest first: no text."""
        where, params = ("WHERE owner = ?", [owner]) if owner is not None else ("", [])
        with self._transaction() as conn:
            rows = conn.execute(self._sql(
                f"SELECT action, memory_id, owner, by_whom, at FROM memory_log {where} "
                "ORDER BY at"), params).fetchall()
        return [dict(zip(("action", "memory_id", "owner", "by", "at"), r, strict=True))
                for r in rows]

    def _remove(self, conn: Any, memory: Memory, action: str, by: str,
                key: str | None = None, cause: str | None = None) -> None:
        conn.execute(self._sql("DELETE FROM memories WHERE id = ?"), [memory.id])
        self._log(conn, action, memory, by, key, cause)

    def _log(self, conn: Any, action: str, memory: Memory, by: str,
             key: str | None = None, cause: str | None = None) -> None:
        conn.execute(self._sql(
            f"INSERT INTO memory_log (key, action, {LOGGED}, by_whom, cause, at) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"),
            [key, action, memory.id, memory.owner, memory.created_at, memory.conversation_id,
             by, cause, now()])
