"""The processes a benchmark runs side by side: a tuned dev server, the scripted model, workers."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import timezone
from pathlib import Path

import httpx
import psutil
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.converter import DataConverter

from durable_react_agent.contract import LLM_CALL_ACTIVITY, LLM_STEP_ACTIVITY
from durable_react_agent.testing import Script
from tests.devserver import dev_server_command, free_port, worker_env
from tests.helpers import code_copy, run_histories

ROOT = Path(__file__).resolve().parent.parent


def wait_port(port: int, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise RuntimeError(f"nothing listens on {port}")


class Child:
    def __init__(self, argv: list[str], env: dict[str, str], log: Path, cwd: Path = ROOT):
        with open(log, "ab") as out:
            self.proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=out,
                                         stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        self.ps = psutil.Process(self.proc.pid)

    def _processes(self) -> list[psutil.Process]:
        """The process and its children (`agent-worker --processes N` supervises N)."""
        try:
            return [self.ps, *self.ps.children(recursive=True)]
        except psutil.NoSuchProcess:
            return []

    def _total(self, measure: Callable[[psutil.Process], float]) -> float:
        total = 0.0
        for p in self._processes():
            try:
                total += measure(p)
            except psutil.NoSuchProcess:
                continue
        return total

    def cpu_s(self) -> float:
        return self._total(lambda p: p.cpu_times().user + p.cpu_times().system)

    def rss_mb(self) -> float:
        return self._total(lambda p: p.memory_info().rss) / 2**20

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()


class Stack:
    """A tuned dev server on a SQLite file, the scripted model as its own process, and workers."""

    def __init__(self, work: Path, script: Script):
        self.work = work
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.model_port = free_port()
        (work / "script.json").write_text(script.model_dump_json())
        self.server = Child(dev_server_command(work / "bench.db", self.port), dict(os.environ),
                            work / "server.log")
        self.model = Child([sys.executable, "-m", "durable_react_agent.testing", "--port", str(self.model_port),
                            "--script", str(work / "script.json")], dict(os.environ), work / "model.log")
        wait_port(self.port)
        wait_port(self.model_port)
        self.base_url = f"http://127.0.0.1:{self.model_port}/v1"
        self.workers: list[Child] = []

    def worker_env(self, task_queue: str) -> dict[str, str]:
        return worker_env(self.address, task_queue, self.base_url, self.work / "data")

    def start_worker(self, task_queue: str, module: str | None = None, code: Path = ROOT,
                     args: tuple[str, ...] = (), **env: str) -> Child:
        """A worker process; `code` is the checkout it runs (another one, to compare versions:
        one from before the one import root runs as `-m worker`), `env` what it gets beyond
        the stack's environment."""
        if module is None and (code / "setup.py").exists():  # the one import root
            module = "durable_react_agent.worker"
            if code != ROOT:  # laid out as installed, or the editable install would run ours
                code_copy(self.work / f"code-{task_queue}", code)
                code = self.work / f"code-{task_queue}"
        module = module or "worker"
        worker = Child([sys.executable, "-m", module, *args],
                       {**self.worker_env(task_queue), **env},
                       self.work / f"{module.replace('.', '_')}-{task_queue}.log", cwd=code)
        self.workers.append(worker)
        return worker

    async def client(self, converter: DataConverter = pydantic_data_converter) -> Client:
        return await Client.connect(self.address, data_converter=converter)

    async def chat_requests(self) -> int:
        async with httpx.AsyncClient() as http:
            return (await http.get(f"{self.base_url.removesuffix('/v1')}/_stats")).json()["chat_requests"]

    def stop(self) -> None:
        for worker in self.workers:
            worker.stop()
        self.model.stop()
        self.server.stop()


async def wait_until(predicate, timeout_s: float, interval_s: float = 0.2) -> float:
    """Poll an async predicate; return the seconds it took."""
    started = time.monotonic()
    while not await predicate():
        if time.monotonic() - started > timeout_s:
            raise TimeoutError(f"not done after {timeout_s}s")
        await asyncio.sleep(interval_s)
    return time.monotonic() - started


def dump(path: Path, data: object) -> None:
    path.write_text(json.dumps(data, indent=2, default=str))


# ----- what a run left in the history -----

MODEL_ACTIVITIES = {LLM_CALL_ACTIVITY, LLM_STEP_ACTIVITY}

async def answered_again(handle, killed_at: float) -> float:
    """Seconds from the kill to the first activity of this conversation completed after it."""
    for event in (await handle.fetch_history()).events:
        at = event.event_time.ToDatetime().replace(tzinfo=timezone.utc).timestamp()
        if event.HasField("activity_task_completed_event_attributes") and at > killed_at:
            return at - killed_at
    return float("nan")


async def history_of(client, handle) -> tuple[int, int, int, int]:
    """Every run of a conversation: (history bytes, events, runs, bytes of the last model
    activity's input). Bytes are the events' protobuf sizes, as the server counts them."""
    histories = await run_histories(client, handle)
    events = [e for history in histories for e in history.events]
    inputs = [e.activity_task_scheduled_event_attributes.input.ByteSize() for e in events
              if e.HasField("activity_task_scheduled_event_attributes")
              and e.activity_task_scheduled_event_attributes.activity_type.name in MODEL_ACTIVITIES]
    return (sum(e.ByteSize() for e in events), len(events), len(histories),
            inputs[-1] if inputs else 0)
