"""A2A push notification configs (`api.a2a`): where an A2A client wants a conversation's turns'
changes sent, with what it sends along (its token, its credentials for the receiver). They are
kept where the workers and the API share them (the memory store's database): the conversation
knows each by its id and host only, and the worker's `notify` activity reads the rest here, so
no URL path and no credential enters a history. Calls block: run them in a thread."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

SCHEMA = """
CREATE TABLE IF NOT EXISTS a2a_push_configs (
    conversation_id TEXT NOT NULL,
    id TEXT NOT NULL,
    task_id TEXT NOT NULL,
    url TEXT NOT NULL,
    token TEXT,
    scheme TEXT,
    credentials TEXT,
    by_whom TEXT NOT NULL,
    at TEXT NOT NULL,
    PRIMARY KEY (conversation_id, id)
);
"""
COLUMNS = "conversation_id, id, task_id, url, token, scheme, credentials, by_whom, at"


@dataclass(frozen=True)
class PushConfig:
    conversation_id: str
    id: str
    task_id: str  # the task it was set on; it hears every turn of the conversation
    url: str
    token: str | None
    scheme: str | None
    credentials: str | None
    by: str
    at: str


class PushConfigs:
    """The push configs part of the memory store (`MemoryStore` holds it)."""

    _transaction: Callable[[], AbstractContextManager[Any]]
    _sql: Callable[[str], str]

    def keep_push(self, config: PushConfig) -> None:
        """Keep a config (one of the same id in the conversation is replaced)."""
        with self._transaction() as conn:
            conn.execute(self._sql("DELETE FROM a2a_push_configs WHERE conversation_id = ? "
                                   "AND id = ?"), [config.conversation_id, config.id])
            conn.execute(self._sql(f"INSERT INTO a2a_push_configs ({COLUMNS}) VALUES "
                                   "(?, ?, ?, ?, ?, ?, ?, ?, ?)"),
                         [config.conversation_id, config.id, config.task_id, config.url,
                          config.token, config.scheme, config.credentials, config.by,
                          config.at])

    def pushes(self, conversation_id: str) -> list[PushConfig]:
        """A conversation's configs, oldest first."""
        with self._transaction() as conn:
            rows = conn.execute(self._sql(f"SELECT {COLUMNS} FROM a2a_push_configs WHERE "
                                          "conversation_id = ? ORDER BY at, id"),
                                [conversation_id]).fetchall()
        return [PushConfig(*row) for row in rows]

    def drop_push(self, conversation_id: str, config_id: str) -> bool:
        """Remove a config; whether there was one."""
        with self._transaction() as conn:
            gone = conn.execute(self._sql("DELETE FROM a2a_push_configs WHERE "
                                          "conversation_id = ? AND id = ?"),
                                [conversation_id, config_id])
            return bool(gone.rowcount)
