"""`agent memories` and `forget`: what the agent remembers of a person, read from and
removed in the workers' store (AGENT_MEMORY_URL, or SQLite in AGENT_DATA_DIR), as `--as` names
them (default: the OS user). No Temporal is needed."""

from __future__ import annotations

import argparse
import json
import os
import uuid

from ..activities.memory import MemoryStore, MemoryUnavailable, open_store, url_from_env
from ..contract.memory import MAX_RECALL_QUERY_BYTES, Memory
from .checks import CliError, Refused, UsageError


def memory_store() -> MemoryStore:
    try:
        url = url_from_env(os.environ)
    except ValueError as err:
        raise UsageError(str(err)) from None
    if url is None:
        raise CliError("memory is off (AGENT_MEMORY=off)")
    return open_store(url)


def render_memory(m: Memory) -> str:
    where = f", in {m.conversation_id}" if m.conversation_id else ""
    return f"{m.id}  {m.created_at[:19].replace('T', ' ')}{where}\n  {m.text}"


def cmd_memories(a: argparse.Namespace) -> int:
    if a.query is not None and len(a.query.encode(errors="replace")) > MAX_RECALL_QUERY_BYTES:
        raise UsageError(f"--query is at most {MAX_RECALL_QUERY_BYTES} bytes")
    try:
        found = memory_store().list(a.who, a.query, a.limit)
    except MemoryUnavailable as err:
        raise CliError(str(err)) from None
    if a.json:
        print(json.dumps([m.model_dump() for m in found], indent=2, ensure_ascii=False))
    elif not found:
        print(f"no memories of {a.who}" + (f" match {a.query!r}" if a.query else ""))
    else:
        print("\n".join(render_memory(m) for m in found))
    return 0


def cmd_forget(a: argparse.Namespace) -> int:
    try:
        gone = memory_store().forget(a.memory_id, a.who, f"cli:{uuid.uuid4().hex}", a.who)
    except MemoryUnavailable as err:
        raise CliError(str(err)) from None
    if gone is None:
        raise Refused(f"{a.who} has no memory {a.memory_id}")
    if a.json:
        print(gone.model_dump_json(indent=2))
    else:
        print(f"forgot {gone.id}: {gone.text}")
    return 0
