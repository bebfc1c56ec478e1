"""A webhook receiver the tests run, and the worker's webhooks that deliver to it (the fixtures
that start them are in the test modules)."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import hmac
import json
import threading
import time
import uuid
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest
from temporalio.client import Client

from durable_react_agent.activities.mcp import McpToolbox
from durable_react_agent.activities.settings import ActivitySettings
from durable_react_agent.activities.webhooks import Webhook, Webhooks
from durable_react_agent.worker.app import build_worker
from tests.api_support import ApiServer
from tests.devserver import free_port
from tests.fake_tools import registry_with_test_tools

SECRET, LINKS = "hook-secret-123", "link-secret-456"


class Receiver:
    """A webhook receiver: what it got, when; it can hold its answer (`hold_s`), and answer
    `statuses` in turn before it answers 200."""

    def __init__(self, hold_s: float = 0.0, statuses: tuple[int, ...] = ()) -> None:
        self.got: list[dict] = []
        received, self.hold_s, self.statuses = self.got, hold_s, list(statuses)
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - the http.server name
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                received.append({"at": time.monotonic(), "body": body,
                                 "headers": dict(self.headers)})
                time.sleep(owner.hold_s)
                self.send_response(owner.statuses.pop(0) if owner.statuses else 200)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/hook"
        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()

    def events(self, event: str) -> list[dict]:
        return [{**d, "json": json.loads(d["body"])} for d in self.got
                if d["headers"].get("X-Agent-Event") == event]

    async def until(self, event: str, count: int = 1, timeout_s: float = 20) -> list[dict]:
        deadline = time.monotonic() + timeout_s
        while len(self.events(event)) < count:
            assert time.monotonic() < deadline, f"no {event} delivery: {self.got}"
            await asyncio.sleep(0.05)
        return self.events(event)


def signed(delivery: dict, secret: str = SECRET) -> bool:
    expected = "sha256=" + hmac.new(secret.encode(), delivery["body"], hashlib.sha256).hexdigest()
    return hmac.compare_digest(delivery["headers"]["X-Agent-Signature"], expected)



def hooks_of(*urls: str, addressee: str | None = None, public_url: str = "") -> Webhooks:
    return Webhooks([Webhook(url=url, secret_env="TEST_HOOK_SECRET", addressee=addressee,
                             events=["approval_requested", "question_asked", "turn_finished",
                                     "conversation_failed"]) for url in urls],
                    public_url=public_url or "http://127.0.0.1:8000")


@asynccontextmanager
async def worker_with_links(client: Client, settings: ActivitySettings, receiver: Receiver,
                            temporal_address: str, addressees: Iterable[str | None],
                            tokens: str | None, events: tuple[str, ...] = ("approval_requested",),
                            mcp: McpToolbox | None = None) -> AsyncIterator[tuple[str, ApiServer]]:
    """A worker whose approvals (or other `events`) reach `receiver` through one webhook per
    addressee, with one-time links, and an API with `tokens` serving them: (its task queue, the
    API). `mcp`: the worker's MCP servers."""
    queue = f"links-{uuid.uuid4().hex[:8]}"
    api = ApiServer(temporal_address, queue, AGENT_LINK_SECRET=LINKS,
                     **({"AGENT_API_TOKENS": tokens} if tokens else {})).start()
    hooks = Webhooks([Webhook(url=receiver.url, secret_env="TEST_HOOK_SECRET", addressee=to,
                              events=list(events)) for to in addressees],
                     public_url=api.url)
    with pytest.MonkeyPatch.context() as env:
        env.setenv("TEST_HOOK_SECRET", SECRET)
        env.setenv("AGENT_LINK_SECRET", LINKS)
        try:
            async with httpx.AsyncClient(timeout=10) as http:
                async with build_worker(client, queue, dataclasses.replace(settings, webhooks=hooks),
                                        http, registry_with_test_tools(), mcp=mcp):
                    yield queue, api
        finally:
            api.stop()
