"""`agent-api` for the API, AG-UI and console tests: in this process (`ApiServer`), or as a
real child process (`ApiProcess`) where a test kills it or reads its log."""

from __future__ import annotations

import asyncio
import os
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from ag_ui.core import PROTOCOL_VERSION, EventType
from ag_ui.core.events import Event
from fastapi import FastAPI
from pydantic import TypeAdapter
from starlette.routing import Mount, Route

from durable_react_agent.api.__main__ import KEEP_ALIVE_S
from durable_react_agent.api.app import create_app
from durable_react_agent.api.routes import every_route
from durable_react_agent.api.settings import ApiSettings
from durable_react_agent.client.connection import TemporalSettings

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LogTail:
    """The lines a process writes (stdout and stderr), read as it writes them: a pipe nobody
    reads fills up, and then the process blocks on its next log line."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.lines: list[str] = []
        threading.Thread(target=self._read, args=(proc,), daemon=True).start()

    def _read(self, proc: subprocess.Popen) -> None:
        for raw in proc.stdout:  # type: ignore[union-attr]
            self.lines.append(raw.decode(errors="replace").rstrip("\n"))

    def mark(self) -> int:
        return len(self.lines)

    def since(self, mark: int, settle_s: float = 0.5) -> list[str]:
        time.sleep(settle_s)  # the last answers' lines are written just after them
        return self.lines[mark:]


class _Api:
    """The API's address (a free loopback port) and its variables: the tests' dev server and
    queue, and `env`'s."""

    def __init__(self, temporal_address: str, task_queue: str, **env: str):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {"TEMPORAL_ADDRESS": temporal_address, "AGENT_TASK_QUEUE": task_queue,
                    "AGENT_API_ADDRESS": f"127.0.0.1:{self.port}",
                    # the memory store it reads, unless a test names one: never the checkout's
                    "AGENT_DATA_DIR": tempfile.mkdtemp(prefix="agent-api-data-"), **env}


class ApiProcess(_Api):
    """One API process, talking to the tests' dev server and queue."""

    def __init__(self, temporal_address: str, task_queue: str, **env: str):
        super().__init__(temporal_address, task_queue, **env)
        self.proc: subprocess.Popen | None = None
        self.tail: LogTail | None = None

    def start(self, timeout_s: float = 30) -> ApiProcess:
        self.proc = subprocess.Popen([sys.executable, "-m", "durable_react_agent.api"], cwd=ROOT,
                                     env={**os.environ, **self.env},
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        self.tail = LogTail(self.proc)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                time.sleep(0.2)  # its last lines
                raise RuntimeError("the API exited: " + "\n".join(self.tail.lines))
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


class ApiServer(_Api):
    """The API as `ApiProcess` runs it, served by uvicorn on a thread of this process: the same
    app, settings from the same variables; without the process's start-up (a second of
    imports) or its log lines (`ApiProcess` for those)."""

    def __init__(self, temporal_address: str, task_queue: str, **env: str):
        super().__init__(temporal_address, task_queue, **env)
        self.server: uvicorn.Server | None = None
        self.thread: threading.Thread | None = None

    def start(self, timeout_s: float = 30) -> ApiServer:
        app = create_app(ApiSettings.from_env(self.env), TemporalSettings.from_env(self.env))
        self.server = uvicorn.Server(uvicorn.Config(
            app, host="127.0.0.1", port=self.port, log_level="warning", log_config=None,
            timeout_graceful_shutdown=2, timeout_keep_alive=KEEP_ALIVE_S))
        failed: list[BaseException] = []

        def serve() -> None:
            try:
                asyncio.run(self.server.serve())  # type: ignore[union-attr]
            except BaseException as err:  # noqa: BLE001 (told to the caller)
                failed.append(err)

        self.thread = threading.Thread(target=serve, name=f"api-{self.port}", daemon=True)
        self.thread.start()
        deadline = time.monotonic() + timeout_s
        while not self.server.started:
            if failed or not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the API did not start: {failed}")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        if self.server is not None and self.thread is not None:
            self.server.should_exit = True
            self.thread.join(10)

    def __enter__(self) -> ApiServer:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()


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


async def status_of(http: httpx.AsyncClient, cid: str) -> dict:
    r = await http.get(f"/conversations/{cid}")
    assert r.status_code == 200, r.text
    return r.json()


async def until_status(http: httpx.AsyncClient, cid: str, *statuses: str, turn: int = 1,
                       timeout_s: float = 30) -> dict:
    deadline = time.monotonic() + timeout_s
    while True:
        current = await status_of(http, cid)
        if current["status"] in statuses and current["turn"] >= turn:
            return current
        assert time.monotonic() < deadline, f"never reached {statuses}: {current}"
        await asyncio.sleep(0.1)


# What holds no data and loads without a token (README, Security): the console's page and its
# static files, and the OpenAPI docs; and the one-time links, whose signed link is the
# credential (`api.guard`); and the A2A agent card, which says how to reach the agent and
# which tokens it takes (`api.a2a`).
PUBLIC_PATHS = frozenset({"/", "/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc",
                          "/links/{token}", "/.well-known/agent-card.json"})


def concrete(path: str) -> str:
    """A route's path with its parameters filled in."""
    return re.sub(r"\{[^}]+\}", "x", path)


def routes_by_access(app: FastAPI) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """Every (method, path) the app serves: those that must need a token, and the public ones."""
    guarded: list[tuple[str, str]] = []
    public: list[tuple[str, str]] = []
    for route in every_route(app.routes):
        if isinstance(route, Mount):
            assert route.path == "/static", f"a mount nobody checked: {route.path}"
            public += [("GET", "/static/index.html"), ("GET", "/static/console/main.js")]
        elif isinstance(route, Route):  # APIRoute too
            methods = sorted(route.methods - {"HEAD"})
            (public if route.path in PUBLIC_PATHS else guarded).extend(
                (method, concrete(route.path)) for method in methods)
    return guarded, public


AGUI_EVENTS = TypeAdapter(Event)


async def agui_run(http: httpx.AsyncClient, thread: str, messages: list[dict], resume=None,
                   run_id: str | None = None) -> list:
    """One AG-UI run, its events parsed with the protocol's own models: it starts, and ends
    once, in RUN_FINISHED or RUN_ERROR."""
    body = {"threadId": thread, "runId": run_id or f"run-{uuid.uuid4().hex[:8]}",
            "messages": messages, "state": None, "tools": [], "context": [],
            "forwardedProps": {}}
    if resume is not None:
        body["resume"] = resume
    r = await http.post("/agui", json=body)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/event-stream")
    events = [AGUI_EVENTS.validate_json(e["data"]) for e in sse_events(r.text)]
    assert events[0].type == EventType.RUN_STARTED and events[0].thread_id == thread
    assert events[0].protocol_version == PROTOCOL_VERSION == "1.0"
    assert events[-1].type in (EventType.RUN_FINISHED, EventType.RUN_ERROR)
    ends = [e for e in events if e.type in (EventType.RUN_FINISHED, EventType.RUN_ERROR)]
    assert ends == [events[-1]]
    return events


def of(events: list, kind: EventType) -> list:
    return [e for e in events if e.type == kind]


def user(mid: str, text: str) -> dict:
    return {"id": mid, "role": "user", "content": text}


def tokens_env(tokens: Mapping[str, tuple[str, str]]) -> str:
    """`AGENT_API_TOKENS` for {name: (token, roles)}."""
    return ",".join(f"{name}:{token}:{roles}" for name, (token, roles) in tokens.items())


@asynccontextmanager
async def bearers(tokens: Mapping[str, str], **options: Any
                  ) -> AsyncIterator[dict[str, httpx.AsyncClient]]:
    """An HTTP client per name, each sending that name's bearer token (`options`: the
    clients' own, a base URL or a transport), closed after."""
    clients = {name: httpx.AsyncClient(timeout=60, headers={"Authorization": f"Bearer {token}"},
                                       **options)
               for name, token in tokens.items()}
    try:
        yield clients
    finally:
        for c in clients.values():
            await c.aclose()
