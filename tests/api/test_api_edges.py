"""The API's edges, against a real process on the dev server, a worker and the scripted model:
hostile JSON, odd ids, odd offsets and foreign hosts are 4xx with nothing changed; what Temporal
says is logged, not echoed; a refused request is one log line; and a short pass of our own fuzzer
(tests/fuzz_api.py) finds no 5xx, no hang and no log flood."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import AsyncIterator, Iterator

import httpx
import pytest

from durable_react_agent.testing import ScriptedModelServer, ScriptedReply
from tests.api_support import ApiProcess, LogTail, sse_events, until_status
from tests.fuzz_api import fuzz, logged, not_one_json_object_each, targets
from tests.helpers import LONG, recorded_events, script, start, tool_call, unique
from tests.hostile_input import ODD_IDS, VALID_BODIES, hostile_bodies

TIMEOUT = httpx.Timeout(30.0)
JSON = {"content-type": "application/json"}


@pytest.fixture(scope="module")
def edge_api(temporal_address: str, task_queue: str) -> Iterator[tuple[ApiProcess, LogTail]]:
    """An API process of this module's own, without tokens, whose log is read as it is written."""
    api = ApiProcess(temporal_address, task_queue, AGENT_API_TIMEOUT_S="5").start()
    try:
        yield api, logged(api)
    finally:
        api.stop()


@pytest.fixture
async def http(edge_api) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=edge_api[0].url, timeout=TIMEOUT) as c:
        yield c


def assert_fastapi_422(r: httpx.Response) -> None:
    assert r.status_code == 422, (r.status_code, r.text)
    detail = r.json()["detail"]
    assert detail and all(set(e) == {"loc", "msg", "type"} for e in detail), detail


# ----- 6: no 500s -----

async def test_hostile_json_is_a_422_that_changes_nothing(http: httpx.AsyncClient,
                                                          model: ScriptedModelServer, client):
    note = tool_call("create_note", {"title": "t", "body": "b"})
    trigger = script(model, unique("edge-hostile"), ScriptedReply(tool_calls=[note]),
                     ScriptedReply(content="done"))
    cid = unique("edge")
    started = await http.post("/conversations", json={"prompt": trigger, "id": cid})
    assert started.status_code == 201
    waiting = await until_status(http, cid, "waiting_for_confirmation")
    handle = client.get_workflow_handle(cid)
    before = await recorded_events(handle)

    fresh = unique("edge-never")
    for path in VALID_BODIES:
        if path == "/agui":  # AG-UI answers in its own stream (tests/api/test_agui*.py)
            continue
        for body in hostile_bodies(path, **({"id": fresh} if path == "/conversations" else {})):
            r = await http.post(path.replace("{cid}", cid), content=body, headers=JSON)
            assert_fastapi_422(r)
    surrogate = await http.post(f"/conversations/{cid}/confirm", headers=JSON,
                                content=b'{"call_ids": ["c"], "args": {"t": "\\ud800"}}')
    assert "surrogate" in surrogate.json()["detail"][0]["msg"]
    not_utf8 = await http.post(f"/conversations/{cid}/messages", headers=JSON,
                               content=b'{"text": "\xed\xa0\x80"}')
    assert "not UTF-8" in not_utf8.json()["detail"][0]["msg"]

    assert await recorded_events(handle) == before
    assert (await http.get(f"/conversations/{cid}")).json() == waiting
    assert (await http.get(f"/conversations/{fresh}")).status_code == 404


async def test_odd_ids_and_query_values_are_4xx(http: httpx.AsyncClient):
    for cid in ODD_IDS:
        for suffix in ["", "/history", "/schemas", "/events"]:
            r = await http.get(f"/conversations/{cid}{suffix}")
            assert r.status_code in (404, 422), (cid[:40], suffix, r.status_code, r.text[:200])
        r = await http.post(f"/conversations/{cid}/messages", json={"text": "hi"})
        assert r.status_code in (404, 422), (cid[:40], r.status_code)  # 422: over 1,000
    for query in ["limit=abc", "limit=0", "limit=1001", "limit=-1", "limit=1e3", "status=nope",
                  "status="]:
        assert_fastapi_422(await http.get(f"/conversations?{query}"))
    bad_id = await http.post("/conversations", json={"prompt": "hi", "id": "no/slash"})
    assert_fastapi_422(bad_id)


# ----- 9: every offset has one meaning -----

async def first_events(http: httpx.AsyncClient, cid: str, headers: dict | None = None,
                       params: dict | None = None, wait_s: float = 10) -> list[dict]:
    """The stream's events until `end`, or what came in `wait_s` (a live stream stays open)."""
    events: list[dict] = []
    buffer = ""
    try:
        async with asyncio.timeout(wait_s):
            async with http.stream("GET", f"/conversations/{cid}/events", headers=headers or {},
                                   params=params or {}) as r:
                assert r.status_code == 200, await r.aread()
                async for chunk in r.aiter_text():
                    buffer += chunk
                    *blocks, buffer = buffer.split("\n\n")
                    events += sse_events("\n\n".join(blocks))
                    if events and events[-1].get("event") == "end":
                        return events
    except TimeoutError:
        pass
    return events


@pytest.mark.long  # a stress-scale run: `make test-long`
async def test_every_stream_offset_has_a_defined_start(http: httpx.AsyncClient,
                                                       model: ScriptedModelServer):
    for params, headers in [({"from_offset": "-1"}, {}), ({"from_offset": "x"}, {}),
                            ({}, {"Last-Event-ID": "-1"}), ({}, {"Last-Event-ID": "1e3"}),
                            ({}, {"Last-Event-ID": b"\xff"})]:
        r = await http.get(f"/conversations/{unique('any')}/events", params=params,
                           headers=headers)
        assert_fastapi_422(r)
        assert r.json()["detail"][0]["loc"][0] in ("query", "header")

    trigger = script(model, unique("edge-offsets"), ScriptedReply(content="first"),
                     ScriptedReply(content="second"))
    cid = unique("edge")
    await http.post("/conversations", json={"prompt": trigger, "id": cid})
    await until_status(http, cid, "idle")
    everything = await first_events(http, cid, wait_s=2)
    end = int(everything[-1]["id"]) + 1

    # Past the end of a live conversation: the stream waits at the end, for the next event.
    async def watch() -> list[dict]:
        return await first_events(http, cid, headers={"Last-Event-ID": str(10**30)})
    watcher = asyncio.create_task(watch())
    await asyncio.sleep(1)
    assert not watcher.done()
    said = await http.post(f"/conversations/{cid}/messages", json={"text": "more"})
    assert said.status_code == 200
    later = await watcher
    assert later and int(later[0]["id"]) == end and later[0]["event"] == "turn_started"

    # Dropped streams that waited past the end hold no Update of the conversation: its input
    # still goes through (ten left waiting would take every in-flight Update it may have).
    await until_status(http, cid, "idle", turn=2)
    for _ in range(2):
        streams = [asyncio.create_task(first_events(http, cid, params={"from_offset": 10**9},
                                                    wait_s=1.5)) for _ in range(6)]
        await asyncio.gather(*streams)
        said = await http.post(f"/conversations/{cid}/messages", json={"text": "still here?"})
        assert said.status_code == 200, said.text
        await until_status(http, cid, "idle", turn=said.json()["turn"])

    # Past the end of a finished conversation: `end` at once.
    assert (await http.post(f"/conversations/{cid}/end", json={})).status_code == 200
    await until_status(http, cid, "completed")
    for headers, params in [({"Last-Event-ID": str(10**30)}, {}), ({}, {"from_offset": 10**9})]:
        started = time.monotonic()
        assert [e["event"] for e in await first_events(http, cid, headers, params)] == ["end"]
        assert time.monotonic() - started < 5


async def test_a_stream_resumes_across_continue_as_new(http: httpx.AsyncClient, client,
                                                       task_queue: str,
                                                       model: ScriptedModelServer):
    trigger = script(model, unique("edge-can"), ScriptedReply(content="first answer"),
                     ScriptedReply(content="second answer"))
    handle = await start(client, task_queue, trigger, continue_as_new_after_turns=1)
    await until_status(http, handle.id, "idle")
    first_run = await first_events(http, handle.id, wait_s=2)
    assert (await http.post(f"/conversations/{handle.id}/messages",
                            json={"text": "again"})).status_code == 200
    await until_status(http, handle.id, "idle", turn=2)
    assert (await http.get(f"/conversations/{handle.id}")).json()["runs"] >= 2
    everything = await first_events(http, handle.id, wait_s=2)
    # After the last event of the first run: the second run's events, none lost or repeated.
    after = await first_events(http, handle.id, {"Last-Event-ID": first_run[-1]["id"]}, wait_s=2)
    assert [e["id"] for e in after] == [e["id"] for e in everything[len(first_run):]]
    assert "second answer" in "".join(e["data"] for e in after)


# ----- 10, 11, 12: the log, the host, and what Temporal says -----

async def test_a_burst_of_bad_requests_logs_one_line_each(edge_api, http: httpx.AsyncClient):
    _, log = edge_api
    mark = log.mark()
    sent = 0
    for _ in range(3):
        for path in VALID_BODIES:
            if path == "/agui":
                continue
            for body in hostile_bodies(path):
                await http.post(path.replace("{cid}", "nobody"), content=body, headers=JSON)
                sent += 1
        for cid in ODD_IDS:
            await http.get(f"/conversations/{cid}")
            sent += 1
        await http.post("/conversations", content=b"x" * (2 << 20), headers=JSON)  # 413
        await http.get("/config", headers={"Host": "evil.example"})  # 403
        sent += 2
    lines = log.since(mark)
    assert not_one_json_object_each(lines) == []
    assert len(lines) <= sent, f"{len(lines)} lines for {sent} requests"
    assert all(json.loads(line)["level"] == "info" for line in lines)  # refused, not failed


def raw_get(api: ApiProcess, path: str, host: str | None, origin: str | None = None,
            version: str = "1.1") -> int:
    """The status of a GET sent over a plain socket, with exactly the Host (or none) given."""
    lines = [f"GET {path} HTTP/{version}"] + ([f"Host: {host}"] if host is not None else [])
    lines += [f"Origin: {origin}"] if origin else []
    with socket.create_connection(("127.0.0.1", api.port), timeout=10) as s:
        s.sendall(("\r\n".join([*lines, "Connection: close", "", ""])).encode())
        return int(s.recv(1024).split()[1])


async def test_without_tokens_only_a_loopback_host_is_answered(edge_api,
                                                               http: httpx.AsyncClient):
    """A DNS-rebinding page controls both Host and Origin; it never sends a loopback Host."""
    api, _ = edge_api
    evil = f"evil.example:{api.port}"
    cid = unique("edge-rebound")
    r = await http.post("/conversations", json={"prompt": "write a note", "id": cid},
                        headers={"Host": evil, "Origin": f"http://{evil}"})
    assert r.status_code == 403 and "not loopback" in r.json()["detail"]
    r = await http.post(f"/conversations/{cid}/confirm", json={"all": True},
                        headers={"Host": evil, "Origin": f"http://{evil}"})
    assert r.status_code == 403
    assert (await http.get(f"/conversations/{cid}")).status_code == 404  # nothing started
    for host in [f"localhost:{api.port}", f"127.0.0.1:{api.port}", "127.0.0.2", "[::1]",
                 f"[::1]:{api.port}", "LOCALHOST"]:
        assert raw_get(api, "/config", host) == 200, host
    assert raw_get(api, "/config", f"localhost:{api.port}",
                   origin=f"http://localhost:{api.port}") == 200
    for host in [evil, "127.0.0.1.nip.io", "0.0.0.0", "[::ffff:7f00:1]", "localhost.evil", ""]:
        assert raw_get(api, "/config", host) == 403, host
    assert raw_get(api, "/", None, version="1.0") == 403  # no Host at all


async def test_temporal_refusals_are_logged_not_echoed(temporal_address: str, task_queue: str):
    api = ApiProcess(temporal_address, task_queue, TEMPORAL_NAMESPACE="no-such-namespace").start()
    try:
        log = logged(api)
        mark = log.mark()
        async with httpx.AsyncClient(base_url=api.url, timeout=TIMEOUT) as http:
            r = await http.get("/conversations")
        assert r.status_code == 502
        body = r.json()
        assert body["request_id"] == r.headers["x-request-id"]
        assert "no-such-namespace" not in r.text and "not found" not in r.text.lower()
        [line] = [json.loads(line) for line in log.since(mark)]
        assert line["request_id"] == body["request_id"] and line["status"] == 502
        assert "no-such-namespace" in line["temporal_error"]
    finally:
        api.stop()


# ----- the fuzzer -----

@pytest.mark.long  # a stress-scale run: `make test-long`
async def test_fuzzing_every_route_finds_no_5xx_hang_or_log_flood(edge_api,
                                                                  http: httpx.AsyncClient):
    api, log = edge_api
    target = await targets(http, unique("t"))
    # ten seconds in `make test`, a minute in `make test-long`
    report = await fuzz(api.url, target, seconds=60 if LONG else 10, seed=20, log=log)
    print(report.summary())
    assert report.requests > 100 and len({route for route, _ in report.statuses}) >= 12
    assert report.findings == [], report.summary()


async def test_watchers_hold_nothing_of_the_conversation(http: httpx.AsyncClient, client,
                                                        model: ScriptedModelServer):
    """A stream reads with a query: twelve open streams on an idle conversation (more than the
    10 Updates Temporal lets a workflow have in flight) neither block its input nor grow its
    history while nothing happens."""
    trigger = script(model, unique("edge-watchers"), ScriptedReply(content="first"),
                     ScriptedReply(content="second"))
    cid = unique("edge")
    await http.post("/conversations", json={"prompt": trigger, "id": cid})
    await until_status(http, cid, "idle")
    handle = client.get_workflow_handle(cid)
    before = await recorded_events(handle)
    streams = [asyncio.create_task(first_events(http, cid, params={"from_offset": 10**9},
                                                wait_s=8)) for _ in range(12)]
    await asyncio.sleep(2)
    assert await recorded_events(handle) == before  # watching adds nothing to the history
    said = await http.post(f"/conversations/{cid}/messages", json={"text": "still here?"})
    assert said.status_code == 200, said.text
    await until_status(http, cid, "idle", turn=2)
    seen = await asyncio.gather(*streams)
    assert all(any(e.get("event") == "turn_finished" for e in events) for events in seen)


async def test_an_agui_thread_id_no_event_can_carry_is_a_422(edge_api):
    api, log = edge_api
    mark = log.mark()
    body = (b'{"threadId": "\\ud800", "runId": "r1", "state": {}, "messages": [], "tools": [],'
            b' "context": [], "forwardedProps": {}}')
    async with httpx.AsyncClient(base_url=api.url, timeout=30) as http:
        answer = await http.post("/agui", content=body,
                                 headers={"Content-Type": "application/json"})
    assert answer.status_code == 422, answer.text
    assert not any("Traceback" in line for line in log.since(mark))
