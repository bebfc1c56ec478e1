"""`forget` deletes: a forgotten or evicted memory's text is in no file of the SQLite store (its
pages, its write-ahead log, its text index), in no row of PostgreSQL's, live or dead, and never
in the store's log, which keeps who, when and why. A store made when the log kept texts is
scrubbed when it is opened."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from durable_react_agent.activities.memory import MemoryStore, open_store
from durable_react_agent.activities.memory.postgres import PostgresMemories
from durable_react_agent.activities.memory.sqlite import SCHEMA, SqliteMemories
from durable_react_agent.contract.memory import Memory
from tests.api_support import ROOT
from tests.helpers import unique

# A word no id, key or timestamp can hold by chance (a hex or decimal "4921" can, once in a
# few runs: a store's bytes are full of them)
WORD = "quokkazephyr"
SECRET = f"my bank PIN is 4921, and the word is {WORD}"
NEEDLES = (SECRET.encode(), WORD.encode())  # the text, and its one distinctive word
# memory_log as stores made before kept it: with each removed memory's text
OLD_LOG = """
CREATE TABLE memory_log (key TEXT UNIQUE, action TEXT NOT NULL, memory_id TEXT NOT NULL,
    owner TEXT NOT NULL, text TEXT NOT NULL, created_at TEXT NOT NULL, conversation_id TEXT,
    by_whom TEXT NOT NULL, cause TEXT, at TEXT NOT NULL);
"""
OLD_FORGET = ("INSERT INTO memory_log (key, action, memory_id, owner, text, created_at, by_whom, "
              "at) VALUES ('f-old', 'forgotten', 'mem-old', 'ann', {p}, '2026-01-01', 'ann', "
              "'2026-01-02')")
OLD_LOGGED = {"action": "forgotten", "memory_id": "mem-old", "owner": "ann", "by": "ann",
              "at": "2026-01-02"}


def remove(store: MemoryStore, secret: Memory, how: str) -> None:
    """`secret`, its owner's oldest of two memories, removed `how`: forgotten by the owner, or
    evicted by a third past a bound of 2."""
    if how == "forgotten":
        assert store.forget(secret.id, secret.owner, unique("f"), secret.owner) == secret
    else:
        stored = store.add(secret.owner, "I take the 8:15 train", unique("k"), max_per_owner=2)
        assert stored.evicted == [secret]


# ----- SQLite: the bytes -----

def files_holding(db: Path) -> dict[str, list[bytes]]:
    """Which of the database's files (main, -wal, -shm) hold which needle, read as raw bytes."""
    found = {}
    for file in db.parent.glob(db.name + "*"):
        held = [n for n in NEEDLES if n in file.read_bytes()]
        if held:
            found[file.name] = held
    return found


@pytest.fixture
def sqlite_store(tmp_path: Path) -> Iterator[tuple[SqliteMemories, Path]]:
    """A store, and another process's idle connection to it: with one open, closing the store's
    connections leaves the write-ahead log in place, as it is in a deployment."""
    db = tmp_path / "memory.sqlite3"
    store = SqliteMemories(f"sqlite:///{db}", db)
    store.list(None)
    held = sqlite3.connect(db)
    held.execute("SELECT count(*) FROM memories").fetchall()
    try:
        yield store, db
    finally:
        held.close()


@pytest.mark.parametrize("how", ["forgotten", "evicted"])
def test_a_removed_memory_is_in_no_file_of_the_sqlite_store(
        sqlite_store: tuple[SqliteMemories, Path], how: str):
    store, db = sqlite_store
    for n in range(20):
        store.add("bob", f"note {n}: the trams run late", unique("k"))
    secret = store.add("ann", SECRET, unique("k"), "conv-secret").memory
    store.add("ann", "I like trams", unique("k"))
    assert files_holding(db) == {"memory.sqlite3-wal": list(NEEDLES)}  # where a new write is

    remove(store, secret, how)

    assert files_holding(db) == {}
    assert (db.parent / "memory.sqlite3-wal").stat().st_size == 0
    who = "ann" if how == "forgotten" else "memory bound"
    assert [(e["action"], e["by"]) for e in store.log("ann") if e["memory_id"] == secret.id] \
        == [("remembered", "ann"), (how, who)]
    # the text index, rebuilt, still finds what is left and never the secret
    assert store.search("ann", "PIN 4921", 5) == []
    assert len(store.search("bob", "trams", 50)) == 20
    assert [m.text for m in store.search("ann", "trams", 5)] == ["I like trams"]


def test_a_forget_from_the_command_line_erases_it_too(tmp_path: Path):
    """`agent forget` reaches the same store function as the tool and the API."""
    db = tmp_path / "memory.sqlite3"
    store = open_store(f"sqlite:///{db}")
    secret = store.add("ann", SECRET, unique("k")).memory
    assert files_holding(db)
    env = {**os.environ, "AGENT_MEMORY_URL": f"sqlite:///{db}"}
    forgot = subprocess.run([sys.executable, "-m", "durable_react_agent.client", "forget", secret.id, "--as", "ann"],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert forgot.returncode == 0, forgot.stderr
    assert files_holding(db) == {} and store.list("ann") == []


def test_a_sqlite_store_whose_log_kept_texts_is_scrubbed_when_opened(tmp_path: Path):
    db = tmp_path / "memory.sqlite3"
    old = sqlite3.connect(db, isolation_level=None)
    old.execute("PRAGMA journal_mode=WAL")
    old.executescript(OLD_LOG + SCHEMA)
    old.execute("INSERT INTO memories (id, owner, text, created_at) VALUES "
                "('mem-old', 'ann', ?, '2026-01-01')", [SECRET])
    old.execute("DELETE FROM memories")  # as it forgot then: without secure_delete
    old.execute(OLD_FORGET.format(p="?"), [SECRET])
    old.close()
    assert files_holding(db) == {"memory.sqlite3": list(NEEDLES)}

    for _ in range(2):  # the second open finds nothing to do
        store = SqliteMemories(f"sqlite:///{db}", db)
        assert store.log("ann") == [OLD_LOGGED]
        assert files_holding(db) == {}
    with sqlite3.connect(db) as conn:
        assert "text" not in {row[1] for row in conn.execute("PRAGMA table_info(memory_log)")}


# ----- PostgreSQL: the rows, live and dead -----

def tuples_holding(db: psycopg.Connection, needle: bytes) -> int:
    """How many tuples of the store's tables hold `needle`, live or dead (pageinspect reads the
    pages as they are, before any vacuum)."""
    db.execute("CREATE EXTENSION IF NOT EXISTS pageinspect")
    (count,) = db.execute(
        "SELECT count(*) FROM unnest(ARRAY['memories', 'memory_log']) AS t(name), "
        "generate_series(0, pg_relation_size(t.name) / current_setting('block_size')::int - 1) "
        "AS b(n), heap_page_items(get_raw_page(t.name, b.n::int)) AS h "
        "WHERE position(%s::bytea in h.t_data) > 0", [needle]).fetchone()
    return count


def rows_holding(db: psycopg.Connection, needle: str) -> list[str]:
    """The tables of the schema with a row that holds `needle`, in any column."""
    tables = [r[0] for r in db.execute(
        "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()").fetchall()]
    return [t for t in tables if db.execute(
        f'SELECT 1 FROM "{t}" r WHERE r::text LIKE %s LIMIT 1', [f"%{needle}%"]).fetchone()]


def vacuums(db: psycopg.Connection, table: str) -> int:
    (count,) = db.execute("SELECT vacuum_count FROM pg_stat_user_tables WHERE relname = %s",
                          [table]).fetchone()
    return count


@pytest.mark.parametrize("how", ["forgotten", "evicted"])
def test_a_removed_memory_is_in_no_row_of_postgresql_live_or_dead(postgres_url: str, how: str):
    store = open_store(postgres_url)
    with psycopg.connect(postgres_url, autocommit=True) as db:
        owner = unique("pin")
        secret = store.add(owner, SECRET, unique("k"), "conv-secret").memory
        store.add(owner, "I like trams", unique("k"))
        before = vacuums(db, "memories")
        assert tuples_holding(db, NEEDLES[1]) == 1 and rows_holding(db, SECRET) == ["memories"]

        remove(store, secret, how)

        assert vacuums(db, "memories") > before  # the dead row is gone, not waiting for one
        assert tuples_holding(db, NEEDLES[1]) == 0
        assert rows_holding(db, WORD) == []
    assert [e["action"] for e in store.log(owner) if e["memory_id"] == secret.id] == [
        "remembered", how]


def test_a_postgresql_store_whose_log_kept_texts_is_scrubbed_when_opened(postgres_url: str):
    name = unique("old").replace("-", "_")
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    url = f"{postgres_url.rsplit('/', 1)[0]}/{name}"
    with psycopg.connect(url, autocommit=True) as db:
        db.execute(OLD_LOG)
        db.execute(OLD_FORGET.format(p="%s"), [SECRET])
        assert rows_holding(db, SECRET) == ["memory_log"]

        for _ in range(2):  # the second open finds nothing to do
            store = PostgresMemories(url)
            assert store.log("ann") == [OLD_LOGGED]
            assert tuples_holding(db, NEEDLES[1]) == 0 and rows_holding(db, WORD) == []
        assert db.execute("SELECT 1 FROM information_schema.columns WHERE table_name = "
                          "'memory_log' AND column_name = 'text'").fetchone() is None
