"""Memory across conversations: the store (`AGENT_MEMORY_URL`), opened once per process."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import unquote

from .store import (
    MemoryRefused,
    MemoryStore,
    MemoryUnavailable,
    Stored,
    redacted,
)

SCHEMES = ("sqlite:///", "postgresql://", "postgres://")


def default_url(data_dir: Path) -> str:
    return f"sqlite:///{data_dir.absolute() / 'memory.sqlite3'}"


def url_from_env(env: Mapping[str, str]) -> str | None:
    """The store the environment names, as a worker reads it (None: AGENT_MEMORY=off), for the
    API and the CLI, which read and remove what the workers store."""
    memory = env.get("AGENT_MEMORY", "").strip().lower()
    if memory not in ("", "on", "off"):
        raise ValueError(f"AGENT_MEMORY must be on or off, not {memory!r}")
    if memory == "off":
        return None
    if env.get("AGENT_MEMORY_URL"):
        return check_url(env["AGENT_MEMORY_URL"])
    return default_url(Path(env.get("AGENT_DATA_DIR") or ".agent-data"))


def check_url(url: str) -> str:
    """`url` if it names a store this runtime has, else a ValueError that says which do."""
    if not url.startswith(SCHEMES):
        raise ValueError(f"AGENT_MEMORY_URL must be sqlite:///PATH or postgresql://..., "
                         f"not {redacted(url)!r}")
    return url


@functools.lru_cache(maxsize=8)
def open_store(url: str) -> MemoryStore:
    """The store `url` names (its schema is made at the first use)."""
    check_url(url)
    if url.startswith("sqlite:///"):
        from .sqlite import SqliteMemories

        return SqliteMemories(url, Path(unquote(url.removeprefix("sqlite://"))))
    from .postgres import PostgresMemories

    return PostgresMemories(url)



__all__ = ["MemoryRefused", "MemoryStore", "MemoryUnavailable", "Stored", "check_url",
           "default_url", "open_store", "redacted", "url_from_env"]
