"""`agent-worker` whose file store writes half of a large payload, says so in the file
`SLOW_STORE_MARKER` names, and then waits (to be SIGKILLed there: a worker killed while it
stores a result). Run as `python tests/slow_store_worker.py`, with the worker's environment."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from durable_react_agent.client import payload_store
from durable_react_agent.worker.__main__ import cli

MARKER = Path(os.environ["SLOW_STORE_MARKER"])
write = payload_store.FileStorageDriver._write


def half_then_wait(path: Path, data: bytes) -> None:
    if len(data) < 1_000_000:
        return write(path, data)
    with open(path, "wb") as out:
        out.write(data[: len(data) // 2])
        out.flush()
    MARKER.write_text(str(path))
    time.sleep(600)
    return write(path, data)


payload_store.FileStorageDriver._write = staticmethod(half_then_wait)
sys.exit(cli())
