"""`python -m api` as a real child process, for the API, AG-UI and console tests."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ApiProcess:
    """One API process on a free loopback port, talking to the tests' dev server and queue."""

    def __init__(self, temporal_address: str, task_queue: str, **env: str):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {**os.environ, "TEMPORAL_ADDRESS": temporal_address,
                    "AGENT_TASK_QUEUE": task_queue,
                    "AGENT_API_ADDRESS": f"127.0.0.1:{self.port}", **env}
        self.proc: subprocess.Popen | None = None
        self.log = b""

    def start(self, timeout_s: float = 30) -> ApiProcess:
        self.proc = subprocess.Popen([sys.executable, "-m", "api"], cwd=ROOT, env=self.env,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the API exited: {self.proc.stdout.read().decode()}")  # type: ignore[union-attr]
            try:
                httpx.get(f"{self.url}/openapi.json", timeout=1)
                return self
            except httpx.HTTPError:
                time.sleep(0.2)
        raise RuntimeError("the API did not start listening")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def sse_events(body: str) -> list[dict[str, str]]:
    """Parse an SSE body into its events' fields (comments dropped)."""
    events = []
    for block in body.replace("\r\n", "\n").split("\n\n"):
        fields: dict[str, str] = {}
        for line in block.split("\n"):
            if not line or line.startswith(":"):
                continue
            name, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            fields[name] = fields[name] + "\n" + value if name in fields else value
        if fields:
            events.append(fields)
    return events
