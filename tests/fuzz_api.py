"""A small fuzzer of the HTTP API, our own: every route, with hostile inputs, for a bounded time.

It asserts what a client and an operator would notice: no answer is a 5xx, no request hangs (every
answer starts within a timeout; a stream is read with a deadline, then dropped), and the API's log
grows by at most one line per request, each a JSON object (no traceback spread over lines).

What it sends (tests/hostile_input.py): JSON text that Temporal cannot carry (lone surrogates as
escapes and as raw bytes, NUL, BOMs, bidi marks), nesting from 1 to 3,000 levels, large and odd
numbers (NaN, 1e400, 5,000 digits), bodies that are not UTF-8 or not JSON, random JSON of every
type, valid bodies with one field replaced, unknown fields, odd content types; odd ids in paths
(encoded slashes, NUL, 5,000 characters, emoji, dots); odd query values and stream offsets
(negative, huge, not numbers, on a live and on a finished conversation); odd Origin, Host,
Authorization and Last-Event-ID headers; unknown methods and paths; and malformed HTTP over a raw
socket.

Run from tests/api/test_api_edges.py with a small budget, or alone for a longer pass, against a stack
of its own (dev server, scripted model, worker, API): `python -m tests.fuzz_api --seconds 300`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import tempfile
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

from durable_react_agent.activities.settings import ActivitySettings
from durable_react_agent.rules.search_attributes import AGENT_OWNER, AGENT_STATUS
from durable_react_agent.testing import ScriptedModelServer
from durable_react_agent.worker.app import build_worker
from tests.api_support import ApiProcess, LogTail
from tests.devserver import TUNING_ARGS, temporal_cli
from tests.fake_tools import registry_with_test_tools
from tests.hostile_input import (
    CONTENT_TYPES,
    ODD_IDS,
    ODD_OFFSETS,
    RAW_BODIES,
    RAW_REQUESTS,
    TEXT_FIELDS,
    VALID_BODIES,
    hostile_bodies,
    hostile_values,
    random_json,
    random_json_key,
)

REQUEST_TIMEOUT_S = 15.0  # the API's own wait for a worker is shorter (AGENT_API_TIMEOUT_S)
STREAM_READ_S = 0.5
WORKERS = 4
# A worker that answers no query within AGENT_API_TIMEOUT_S gets this 503. In the suite the
# worker shares the fuzzer's event loop, and a finished conversation's every query is a replay,
# so it happens under the fuzzer's own load; the report counts them (`503` in its statuses).
NO_WORKER = "no worker answered"

# ----- the API's log -----


def logged(api: ApiProcess) -> LogTail:
    """The log of a started API, read from its first line on; returns once its start-up lines are
    read, so that a mark taken next counts only what requests make it write."""
    tail = api.tail
    assert tail is not None
    deadline = time.monotonic() + 10
    while not any('"api_ready"' in line for line in tail.lines):
        assert time.monotonic() < deadline, f"the API never logged api_ready: {tail.lines}"
        time.sleep(0.05)
    return tail


def not_one_json_object_each(lines: list[str]) -> list[str]:
    """The lines that are not a JSON object each (a traceback, uvicorn's text, a broken line)."""
    bad = []
    for line in lines:
        try:
            if not isinstance(json.loads(line), dict):
                bad.append(line)
        except ValueError:
            bad.append(line)
    return bad


# ----- the fuzzer -----

@dataclass
class Target:
    """The conversations the fuzzer aims at. Streams and input go to different live
    conversations: a stream left waiting at the end holds one of its conversation's ten
    in-flight Updates until the next event, so streams opened and dropped by the dozen would
    starve that conversation's input (a known limit of the client layer's `follow`)."""

    live_input: str
    live_stream: str
    finished: str
    start_ids: list[str]


@dataclass
class Report:
    seconds: float = 0
    requests: int = 0
    statuses: Counter = field(default_factory=Counter)  # (route, status) -> count
    findings: list[str] = field(default_factory=list)
    log_lines: int = 0

    def summary(self) -> str:
        by_route: dict[str, Counter] = {}
        for (route, status), n in self.statuses.items():
            by_route.setdefault(route, Counter())[status] += n
        lines = [(f"{self.requests} requests in {self.seconds:.0f} s, {self.log_lines} log "
                  f"lines, {len(self.findings)} findings")]
        lines += [f"  {route}: {dict(sorted(c.items(), key=str))}"
                  for route, c in sorted(by_route.items())]
        lines += [f"  FINDING {f}" for f in self.findings[:20]]
        return "\n".join(lines)


@dataclass
class Request:
    route: str
    method: str
    url: str
    headers: dict[str, str | bytes] = field(default_factory=dict)
    body: bytes | None = None
    stream: bool = False

    def __str__(self) -> str:
        body = "" if self.body is None else f" body={self.body[:160]!r}"
        return f"{self.method} {self.url[:200]} headers={self.headers!r:.200}{body}"


class Fuzzer:
    def __init__(self, base_url: str, target: Target, seed: int) -> None:
        self.base_url = base_url
        self.target = target
        self.rng = random.Random(seed)
        self.host = base_url.removeprefix("http://")

    def request(self) -> Request:
        rng = self.rng
        route = rng.choice(["start", "list", "read", "events", "input", "agui", "public", "odd"])
        return getattr(self, f"_{route}")(rng)

    def _cid(self, rng: random.Random, *real: str) -> str:
        if rng.random() < 0.5:
            return rng.choice(real)
        return rng.choice([f"fuzz-missing-{rng.randrange(10**6)}", *ODD_IDS])

    def _start(self, rng: random.Random) -> Request:
        body = dict(VALID_BODIES["/conversations"], id=rng.choice(self.target.start_ids))
        return Request("POST /conversations", "POST", "/conversations",
                       **self._body_of(rng, "/conversations", body))

    def _list(self, rng: random.Random) -> Request:
        query = rng.choice(["", f"?limit={quote(rng.choice(ODD_OFFSETS + ['0', '1001']))}",
                            f"?status={quote(rng.choice(['idle', 'nope', '', '%ff']))}",
                            "?limit=5&limit=6&status=idle&x=1"])
        return Request("GET /conversations", "GET", f"/conversations{query}",
                       headers=self._headers(rng))

    def _read(self, rng: random.Random) -> Request:
        suffix = rng.choice(["", "/history", "/schemas"])
        cid = self._cid(rng, self.target.live_input, self.target.finished)
        return Request(f"GET /conversations/{{cid}}{suffix}", "GET",
                       f"/conversations/{cid}{suffix}", headers=self._headers(rng))

    def _events(self, rng: random.Random) -> Request:
        cid = self._cid(rng, self.target.live_stream, self.target.finished)
        query = rng.choice(["", f"?from_offset={quote(rng.choice(ODD_OFFSETS + ['0', '3']))}"])
        headers = self._headers(rng)
        if rng.random() < 0.6:
            headers["Last-Event-ID"] = rng.choice(ODD_OFFSETS + ["0", "5", b"\xff\xfe"])
        return Request("GET /conversations/{cid}/events", "GET",
                       f"/conversations/{cid}/events{query}", headers, stream=True)

    def _input(self, rng: random.Random) -> Request:
        verb = rng.choice(["messages", "confirm", "reject", "answer", "end"])
        path = f"/conversations/{{cid}}/{verb}"
        # ending the live conversation would leave nothing live to write to
        cid = self._cid(rng, self.target.finished, *(
            [] if verb == "end" else [self.target.live_input]))
        return Request(f"POST {path}", "POST", f"/conversations/{cid}/{verb}",
                       **self._body_of(rng, path, VALID_BODIES[path]))

    def _agui(self, rng: random.Random) -> Request:
        body = dict(VALID_BODIES["/agui"], threadId=rng.choice(
            [self.target.finished, *self.target.start_ids, "bad id/x", "\ud800"]))
        return Request("POST /agui", "POST", "/agui", stream=True,
                       **self._body_of(rng, "/agui", body))

    def _public(self, rng: random.Random) -> Request:
        path = rng.choice(["/", "/openapi.json", "/docs", "/redoc", "/config",
                           "/static/console/main.js", "/static/..%2f..%2fetc%2fpasswd",
                           "/static/%00", "/static/" + "a" * 3000])
        return Request(f"GET {path[:30]}", "GET", path, headers=self._headers(rng))

    def _odd(self, rng: random.Random) -> Request:
        method = rng.choice(["PUT", "DELETE", "PATCH", "OPTIONS", "HEAD", "TRACE", "GET", "POST"])
        path = rng.choice(["/conversations", "/conversations/x", "/nope", "//conversations",
                           "/conversations/x/confirm/extra", "/agui", "/conversations/"])
        return Request(f"{method} (odd)", method, path, headers=self._headers(rng))

    def _headers(self, rng: random.Random) -> dict[str, str | bytes]:
        headers: dict[str, str | bytes] = {}
        if rng.random() < 0.1:
            headers["Origin"] = rng.choice(["null", "http://evil.example", self.base_url,
                                            f"http://{self.host}/", "http://\u00e9.example"])
        if rng.random() < 0.05:
            headers["Host"] = rng.choice(["evil.example", f"localhost:{self.host.split(':')[1]}",
                                          "[::1]", "127.0.0.1:1", "", "a" * 300])
        if rng.random() < 0.1:
            headers["Authorization"] = rng.choice(["Bearer", "Bearer x", "Basic Zm9v",
                                                   b"Bearer \xff\xfe"])
        return headers

    def _body_of(self, rng: random.Random, path: str, valid: dict[str, Any]) -> dict[str, Any]:
        headers = self._headers(rng)
        pick = rng.randrange(10)
        if pick == 0:
            body = json.dumps(valid).encode()
        elif pick <= 4:  # one field broken, added or removed
            broken = dict(valid)
            key = rng.choice([*valid, random_json_key(rng)])
            if rng.random() < 0.2:
                broken.pop(key, None)
            else:
                broken[key] = hostile_values(rng)
            body = json.dumps(broken).encode()
        elif pick <= 6:
            body = json.dumps(random_json(rng, rng.randrange(5))).encode()
        elif pick == 7:
            body = rng.choice(hostile_bodies(path) if path in TEXT_FIELDS else RAW_BODIES)
        else:
            body = rng.choice(RAW_BODIES)
        content_type = rng.choice(CONTENT_TYPES) if rng.random() < 0.2 else "application/json"
        if content_type:
            headers["Content-Type"] = content_type
        return {"headers": headers, "body": body}


async def send(http: httpx.AsyncClient, req: Request) -> tuple[int | None, str | None]:
    """The status of one request, and what went wrong, if anything did."""
    headers = {k: v.encode() if isinstance(v, str) else v for k, v in req.headers.items()}
    try:
        async with asyncio.timeout(REQUEST_TIMEOUT_S):
            async with http.stream(req.method, req.url, headers=headers, content=req.body) as r:
                if req.stream and r.status_code == 200:
                    try:  # a live stream never ends: read a little, then drop it
                        async with asyncio.timeout(STREAM_READ_S):
                            async for _ in r.aiter_bytes():
                                pass
                    except TimeoutError:
                        pass
                else:
                    await r.aread()
    except TimeoutError:
        return None, f"no answer in {REQUEST_TIMEOUT_S:.0f} s"
    except httpx.LocalProtocolError:  # httpx would not send it (raw HTTP covers such requests)
        return None, None
    except httpx.HTTPError as err:
        return None, f"{type(err).__name__}: {err}"
    if r.status_code == 503 and NO_WORKER in r.text:
        return r.status_code, None  # the documented answer of a busy worker: counted, not a bug
    if r.status_code >= 500:
        return r.status_code, f"{r.status_code}: {r.text[:200]}"
    return r.status_code, None


async def send_raw(host: str, port: int, raw: bytes) -> tuple[int | None, str | None]:
    try:
        async with asyncio.timeout(REQUEST_TIMEOUT_S):
            reader, writer = await asyncio.open_connection(host, port)
            writer.write(raw.replace(b"{host}", f"{host}:{port}".encode()))
            await writer.drain()
            line = await reader.readline()
            writer.close()
    except TimeoutError:
        return None, "no answer to raw HTTP"
    except OSError:
        return None, None  # the server closed the connection: a refusal, not a failure
    parts = line.split()
    status = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else None
    if status is not None and status >= 500:
        return status, f"{status} to raw HTTP"
    return status, None


async def fuzz(base_url: str, target: Target, seconds: float, seed: int,
               log: LogTail | None = None) -> Report:
    """Hit every route with hostile input for `seconds`; a report of what came back."""
    fuzzer = Fuzzer(base_url, target, seed)
    report = Report()
    mark = log.mark() if log else 0
    deadline = time.monotonic() + seconds
    host, port = fuzzer.host.split(":")

    async def worker(http: httpx.AsyncClient) -> None:
        while time.monotonic() < deadline:
            if fuzzer.rng.random() < 0.03:
                raw = fuzzer.rng.choice(RAW_REQUESTS)
                status, problem = await send_raw(host, int(port), raw)
                route, shown = "raw HTTP", repr(raw[:120])
            else:
                req = fuzzer.request()
                status, problem = await send(http, req)
                route, shown = req.route, str(req)
            report.requests += 1
            report.statuses[(route, status)] += 1
            if problem:
                report.findings.append(f"{problem} <- {shown}")

    started = time.monotonic()
    async with httpx.AsyncClient(base_url=base_url, timeout=REQUEST_TIMEOUT_S) as http:
        await asyncio.gather(*(worker(http) for _ in range(WORKERS)))
    report.seconds = time.monotonic() - started
    if log is not None:
        lines = log.since(mark)
        report.log_lines = len(lines)
        if len(lines) > report.requests:
            report.findings.append(f"{len(lines)} log lines for {report.requests} requests")
        report.findings += [f"log line not one JSON object: {line[:200]}"
                            for line in not_one_json_object_each(lines)[:5]]
    return report


async def targets(http: httpx.AsyncClient, run: str) -> Target:
    """Two idle conversations and a finished one, started through the API (the scripted model
    answers any prompt)."""
    ids = [f"fuzz-{run}-{name}" for name in ("input", "stream", "finished")]
    for cid in ids:
        r = await http.post("/conversations", json={"prompt": f"fuzzing {cid}", "id": cid,
                                                    "one_shot": cid.endswith("finished")})
        assert r.status_code in (200, 201), r.text
    deadline = time.monotonic() + 30
    for cid, wanted in zip(ids, ("idle", "idle", "completed"), strict=True):
        while (await http.get(f"/conversations/{cid}")).json()["status"] != wanted:
            assert time.monotonic() < deadline, f"{cid} never became {wanted}"
            await asyncio.sleep(0.1)
    return Target(*ids, start_ids=[f"fuzz-{run}-start-{n}" for n in range(3)])


# ----- alone: a stack of its own -----

async def standalone(seconds: float, seed: int) -> int:
    model = ScriptedModelServer().start()
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=temporal_cli(), data_converter=pydantic_data_converter,
        search_attributes=[AGENT_STATUS, AGENT_OWNER], dev_server_extra_args=TUNING_ARGS)
    queue = f"fuzz-{uuid.uuid4().hex[:8]}"
    settings = ActivitySettings(
        openai_api_key="scripted", openai_base_url=model.base_url, openai_model="scripted",
        geocoding_url=model.geocoding_url, forecast_url=model.forecast_url,
        data_dir=Path(tempfile.mkdtemp(prefix="fuzz-api-")), auto_approvable=None)
    address = env.client.service_client.config.target_host
    try:
        async with httpx.AsyncClient(timeout=10) as tools_http, \
                build_worker(env.client, queue, settings, tools_http, registry_with_test_tools()):
            api = ApiProcess(address, queue, AGENT_API_TIMEOUT_S="5").start()
            try:
                log = logged(api)
                async with httpx.AsyncClient(base_url=api.url, timeout=30) as http:
                    target = await targets(http, uuid.uuid4().hex[:6])
                report = await fuzz(api.url, target, seconds, seed, log)
            finally:
                api.stop()
    finally:
        await env.shutdown()
        model.stop()
    print(report.summary())
    return 1 if report.findings else 0


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.fuzz_api", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--seed", type=int, default=int(time.time()))
    args = parser.parse_args()
    print(f"seed {args.seed}", flush=True)
    return asyncio.run(standalone(args.seconds, args.seed))


if __name__ == "__main__":
    raise SystemExit(main())
