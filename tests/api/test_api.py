"""The HTTP API (`agent-api`) as a real process, on the dev server, a worker and the scripted
model: starts, approvals, edited args, refusals, questions, the SSE stream, auth and bad bodies."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time

import httpx
import pytest
from temporalio.client import Client

from durable_react_agent.api.app import create_app
from durable_react_agent.api.settings import ApiSettings, SettingsError
from durable_react_agent.client.connection import TemporalSettings
from durable_react_agent.testing import ScriptedModelServer, ScriptedReply
from tests.api_support import (
    ROOT,
    ApiServer,
    free_port,
    routes_by_access,
    sse_events,
    status_of,
    until_status,
)
from tests.conftest import SECRET_KEY
from tests.helpers import (
    first_token,
    note_rows,
    recorded_events,
    script,
    start,
    tool_call,
    unique,
)

WEATHER = {"type": "object", "additionalProperties": False, "required": ["city", "celsius"],
           "properties": {"city": {"type": "string"}, "celsius": {"type": "number"}}}


TIMEOUT = httpx.Timeout(30.0)


@pytest.fixture
async def http(api: ApiServer):
    async with httpx.AsyncClient(base_url=api.url, timeout=TIMEOUT) as c:
        yield c


async def test_start_is_idempotent_by_id_and_lists_the_conversation(
        http: httpx.AsyncClient, model: ScriptedModelServer):
    trigger = script(model, unique("api-start"), ScriptedReply(content="hello from the model"))
    cid = unique("api")
    first = await http.post("/conversations", json={"prompt": trigger, "id": cid})
    assert first.status_code == 201, first.text
    assert first.json()["workflow_id"] == cid
    again = await http.post("/conversations", json={"prompt": trigger, "id": cid})
    assert again.status_code == 200 and again.json()["workflow_id"] == cid
    done = await until_status(http, cid, "idle")
    assert done["final_answer"] == "hello from the model"
    assert model.count(trigger) == 1  # one conversation, one model call
    keys = {"workflow_id", "status", "turn", "steps", "llm_calls", "tools_used", "stop_reason",
            "final_answer", "pending_confirmations", "pending_question", "usage", "error"}
    assert keys <= done.keys()

    listed = (await http.get("/conversations", params={"status": "idle"})).json()
    assert cid in [row["workflow_id"] for row in listed]
    assert next(r for r in listed if r["workflow_id"] == cid)["prompt"] == trigger
    assert all(row["status"] == "idle" for row in listed)
    bad = await http.get("/conversations", params={"status": "napping"})
    assert bad.status_code == 422

    fresh = await http.post("/conversations", json={"prompt": trigger, "one_shot": True})
    assert fresh.status_code == 201 and fresh.json()["workflow_id"].startswith("conv-")
    assert (await http.get(f"/conversations/{unique('nobody')}")).status_code == 404


async def test_approval_with_edited_args_records_the_principal(
        http: httpx.AsyncClient, model: ScriptedModelServer, activity_settings, client):
    title = unique("api-note")
    trigger = script(model, unique("api-approve"),
                     ScriptedReply(tool_calls=[tool_call("create_note", {"title": "draft",
                                                                         "body": "b"})]),
                     ScriptedReply(content="Done: {last_tool}"))
    cid = unique("api")
    await http.post("/conversations", json={"prompt": trigger, "id": cid})
    waiting = await until_status(http, cid, "waiting_for_confirmation")
    call = waiting["pending_confirmations"][0]
    assert call["tool"] == "create_note"

    schemas = (await http.get(f"/conversations/{cid}/schemas")).json()
    assert schemas[call["call_id"]]["properties"]["title"]["type"] == "string"

    # A name in the body is not how an approver is chosen: refused as a malformed body.
    before = await recorded_events(client.get_workflow_handle(cid))
    spoofed = await http.post(f"/conversations/{cid}/confirm",
                              json={"call_ids": [call["call_id"]], "approver": "mallory"})
    assert spoofed.status_code == 422
    # Edited args that do not fit the schema: refused by the conversation, nothing changes.
    invalid = await http.post(f"/conversations/{cid}/confirm",
                              json={"call_ids": [call["call_id"]], "args": {"title": 7}})
    assert invalid.status_code == 409
    assert "invalid edited args for create_note" in invalid.json()["detail"]
    unknown = await http.post(f"/conversations/{cid}/confirm", json={"call_ids": ["call_nope"]})
    assert unknown.status_code == 409 and "call_nope" in unknown.json()["detail"]
    neither = await http.post(f"/conversations/{cid}/confirm", json={})
    assert neither.status_code == 422 and "call ids" in neither.json()["detail"][0]["msg"]
    assert await recorded_events(client.get_workflow_handle(cid)) == before  # nothing recorded
    assert (await status_of(http, cid))["pending_confirmations"] == [call]

    taken = await http.post(f"/conversations/{cid}/confirm",
                            json={"call_ids": [call["call_id"]],
                                  "args": {"title": title, "body": "edited"}})
    assert taken.status_code == 200, taken.text
    assert taken.json()["accepted"] is True
    done = await until_status(http, cid, "idle")
    assert done["final_answer"].startswith("Done: Created note")
    assert [row[1:] for row in note_rows(activity_settings.data_dir, title)] == [(title, "edited")]

    stale = await http.post(f"/conversations/{cid}/confirm", json={"call_ids": [call["call_id"]]})
    assert stale.status_code == 409 and "already approved by anonymous" in stale.json()["detail"]
    records = (await http.get(f"/conversations/{cid}/history")).json()
    decision = next(a["decision"] for r in records for a in r["actions"] if a["decision"])
    assert decision["approver"] == "anonymous" and decision["approved"] is True


async def test_stop_ends_the_running_turn_and_says_what_it_did(
        http: httpx.AsyncClient, model: ScriptedModelServer, client: Client):
    trigger = script(model, unique("api-stop"),
                     ScriptedReply(content="a long reply, said slowly", stream_pause_s=60),
                     ScriptedReply(content="heard: {last_user}"),
                     ScriptedReply(content="heard: {last_user}"))
    cid = unique("api-stop")
    await http.post("/conversations", json={"prompt": trigger, "id": cid})
    await first_token(client, cid)  # it is saying something (which the next turn's model reads)
    stopped = await http.post(f"/conversations/{cid}/stop", json={})
    assert stopped.status_code == 200, stopped.text
    assert (stopped.json()["accepted"], stopped.json()["reason"]) == (True, "turn 1 stopped")
    assert (await until_status(http, cid, "idle"))["stop_reason"] == "stopped"
    steered = await http.post(f"/conversations/{cid}/messages", json={"text": "x", "steer": True})
    assert steered.json()["reason"] is None  # no turn running: a message as any other
    await until_status(http, cid, "idle", turn=2)
    again = await http.post(f"/conversations/{cid}/stop")  # no body, as `end` takes none
    assert again.json()["reason"] == "no turn was running: nothing to stop"
    said = await http.post(f"/conversations/{cid}/messages", json={"text": "again"})
    assert (await until_status(http, cid, "idle", turn=said.json()["turn"]))["final_answer"] \
        == "heard: again"
    assert (await http.post(f"/conversations/{cid}/end", json={})).status_code == 200


async def test_reject_question_message_and_end(http: httpx.AsyncClient,
                                               model: ScriptedModelServer):
    trigger = script(
        model, unique("api-ask"),
        ScriptedReply(tool_calls=[tool_call("delete_note", {"note_id": 1})]),
        ScriptedReply(tool_calls=[tool_call("ask_choice", {"message": "Which city?",
                                                           "options": ["Paris", "Rome"]})]),
        ScriptedReply(content="Heard: {last_tool}"),
        ScriptedReply(content="second turn"),
    )
    cid = unique("api")
    await http.post("/conversations", json={"prompt": trigger, "id": cid})
    waiting = await until_status(http, cid, "waiting_for_confirmation")
    call_id = waiting["pending_confirmations"][0]["call_id"]
    rejected = await http.post(f"/conversations/{cid}/reject",
                               json={"call_ids": [call_id], "reason": "not today"})
    assert rejected.status_code == 200 and rejected.json()["accepted"]

    asking = await until_status(http, cid, "waiting_for_input")
    assert asking["pending_question"]["options"] == ["Paris", "Rome"]
    wrong = await http.post(f"/conversations/{cid}/answer", json={"values": ["Oslo"]})
    assert wrong.status_code == 409 and "Paris" in wrong.json()["detail"]
    empty = await http.post(f"/conversations/{cid}/answer", json={"values": []})
    assert empty.status_code == 422
    right = await http.post(f"/conversations/{cid}/answer", json={"values": ["Rome"]})
    assert right.status_code == 200
    done = await until_status(http, cid, "idle")
    assert done["final_answer"] == "Heard: Rome"
    records = (await http.get(f"/conversations/{cid}/history")).json()
    decision = next(a["decision"] for r in records for a in r["actions"] if a["decision"])
    assert (decision["approved"], decision["reason"]) == (False, "not today")

    said = await http.post(f"/conversations/{cid}/messages", json={"text": "and then?"})
    assert said.status_code == 200 and said.json()["turn"] == 2
    assert (await until_status(http, cid, "idle", turn=2))["final_answer"] == "second turn"
    for text in ["", " \n\u3000"]:  # blank is a rule of the schema: refused before sending
        blank = await http.post(f"/conversations/{cid}/messages", json={"text": text})
        assert blank.status_code == 422 and blank.json()["detail"][0]["loc"] == ["body", "text"]

    ended = await http.post(f"/conversations/{cid}/end", json={})
    assert ended.status_code == 200 and ended.json()["accepted"]
    final = await until_status(http, cid, "completed")
    assert final["stop_reason"] == "ended"
    late = await http.post(f"/conversations/{cid}/messages", json={"text": "hello?"})
    assert late.status_code in (404, 409)


async def read_sse(http: httpx.AsyncClient, cid: str, until_kind: str,
                   headers: dict | None = None, times: int = 1) -> list[dict]:
    """Read the event stream until the `times`-th event of `until_kind` (the stream of an idle
    conversation stays open)."""
    events: list[dict] = []
    buffer = ""
    async with http.stream("GET", f"/conversations/{cid}/events", headers=headers or {}) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        async for chunk in r.aiter_text():
            buffer += chunk
            *blocks, buffer = buffer.split("\n\n")
            for e in sse_events("\n\n".join(blocks)):
                events.append(e)
                if [x.get("event") for x in events].count(until_kind) == times:
                    return events
    return events


async def test_event_stream_resumes_after_last_event_id(http: httpx.AsyncClient,
                                                        model: ScriptedModelServer):
    trigger = script(model, unique("api-sse"),
                     ScriptedReply(tool_calls=[tool_call("get_weather", {"location": "Paris"})]),
                     ScriptedReply(content="It is mild in Paris today."))
    cid = unique("api")
    await http.post("/conversations", json={"prompt": trigger, "id": cid})
    await until_status(http, cid, "idle")
    everything = await read_sse(http, cid, "turn_finished")
    kinds = [e["event"] for e in everything]
    assert kinds[0] == "turn_started" and "tool_finished" in kinds and "token" in kinds
    offsets = [int(e["id"]) for e in everything]
    assert offsets == list(range(offsets[0], offsets[0] + len(offsets)))
    finished = json.loads(everything[kinds.index("tool_finished")]["data"])
    assert finished["tool"] == "get_weather" and finished["observation_bytes"] > 0

    cut = offsets[len(offsets) // 2]
    rest = await read_sse(http, cid, "turn_finished", headers={"Last-Event-ID": str(cut)})
    assert [int(e["id"]) for e in rest] == [o for o in offsets if o > cut]
    assert [e["data"] for e in rest] == [e["data"] for e in everything if int(e["id"]) > cut]
    tokens = "".join(json.loads(e["data"])["text"] for e in everything if e["event"] == "token")
    assert tokens == "It is mild in Paris today."

    bad = await http.get(f"/conversations/{cid}/events", headers={"Last-Event-ID": "x"})
    assert bad.status_code == 422
    assert (await http.get(f"/conversations/{unique('nobody')}/events")).status_code == 404

    await http.post(f"/conversations/{cid}/end", json={})
    closed = await read_sse(http, cid, "end", headers={"Last-Event-ID": str(offsets[-1])})
    assert closed[-1]["event"] == "end"  # the conversation completed: the stream closes


async def test_bodies_are_bounded_and_malformed_json_is_explained(http: httpx.AsyncClient):
    cid = unique("api")
    malformed = await http.post("/conversations", content=b'{"prompt": ',
                                headers={"content-type": "application/json"})
    assert malformed.status_code == 422
    [why] = malformed.json()["detail"]
    assert why["type"] == "json_invalid" and why["msg"].startswith("the body is not valid JSON")
    missing = await http.post("/conversations", json={"id": cid})
    assert missing.status_code == 422 and missing.json()["detail"][0]["loc"] == ["body", "prompt"]
    huge = await http.post("/conversations", json={"prompt": "x" * (2 << 20), "id": cid})
    assert huge.status_code == 413
    too_long = await http.post("/conversations", json={"prompt": "x" * 300_000, "id": cid})
    assert too_long.status_code == 422
    assert too_long.json()["detail"][0]["type"] == "string_too_long"
    assert (await http.get(f"/conversations/{cid}")).status_code == 404  # nothing started

    docs = (await http.get("/openapi.json")).json()
    for path in ["/conversations", "/conversations/{cid}", "/conversations/{cid}/messages",
                 "/conversations/{cid}/confirm", "/conversations/{cid}/reject",
                 "/conversations/{cid}/answer", "/conversations/{cid}/end",
                 "/conversations/{cid}/stop",
                 "/conversations/{cid}/history", "/conversations/{cid}/events", "/agui"]:
        assert path in docs["paths"], path
    for model_name in ["StartBody", "ConfirmBody", "RejectBody", "AnswerBody", "MessageBody",
                       "ConversationStatus", "SignalOutcome", "AuditRecord", "RunAgentInput"]:
        assert model_name in docs["components"]["schemas"], model_name
    assert (await http.get("/docs")).status_code == 200
    page = await http.get("/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "frame-ancestors 'none'" in page.headers["content-security-policy"]
    assert page.headers["x-frame-options"] == "DENY"


async def test_tokens_name_the_approver_and_guard_every_route(
        temporal_address: str, task_queue: str, model: ScriptedModelServer, activity_settings):
    api = ApiServer(temporal_address, task_queue,
                     AGENT_API_TOKENS="alice:tok-alice-123,bob:tok-bob-456").start()
    seen: list[str] = []
    try:
        # Every route the app declares (tests/api/test_api_rules.py checks them in-process too).
        guarded, _ = routes_by_access(create_app(ApiSettings(), TemporalSettings()))
        async with httpx.AsyncClient(base_url=api.url, timeout=TIMEOUT) as anon:
            for method, path in guarded:
                r = await anon.request(method, path, json={})
                assert r.status_code == 401, (method, path, r.status_code)
                assert r.headers["www-authenticate"] == "Bearer"
                # the token is checked before the body is read: a malformed one is no 422
                r = await anon.request(method, path, content=b'{"prompt": ',
                                       headers={"content-type": "application/json"})
                assert r.status_code == 401, (method, path, r.status_code)
            wrong = await anon.get("/conversations", headers={"Authorization": "Bearer nope"})
            assert wrong.status_code == 401
            assert (await anon.get("/")).status_code == 200  # the console's page holds no data
        alice = httpx.AsyncClient(base_url=api.url, timeout=TIMEOUT,
                                  headers={"Authorization": "Bearer tok-alice-123"})
        async with alice:
            assert (await alice.get("/config")).json()["principal"] == "alice"
            cross = await alice.get("/conversations", headers={"Origin": "https://evil.example"})
            assert cross.status_code == 403 and "not allowed" in cross.json()["detail"]
            same = await alice.get("/conversations", headers={"Origin": api.url})
            assert same.status_code == 200

            title = unique("alice-note")
            trigger = script(model, unique("api-auth"),
                             ScriptedReply(tool_calls=[tool_call("create_note",
                                                                 {"title": title, "body": "b"})]),
                             ScriptedReply(content="ok"))
            cid = unique("api")
            r = await alice.post("/conversations", json={"prompt": trigger, "id": cid})
            seen.append(r.text)
            waiting = await until_status(alice, cid, "waiting_for_confirmation")
            r = await alice.post(f"/conversations/{cid}/confirm", json={"all": True})
            seen.append(r.text)
            assert r.status_code == 200
            await until_status(alice, cid, "idle")
            for path in ["", "/history"]:
                seen.append((await alice.get(f"/conversations/{cid}{path}")).text)
            records = json.loads(seen[-1])
            decision = next(a["decision"] for rec in records for a in rec["actions"]
                            if a["decision"])
            assert decision["approver"] == "alice"
            assert waiting["pending_confirmations"][0]["tool"] == "create_note"
            assert len(note_rows(activity_settings.data_dir, title)) == 1
        for text in seen:
            assert SECRET_KEY not in text and "tok-alice-123" not in text
    finally:
        api.stop()


def test_no_tokens_off_loopback_is_refused_at_start():
    env = {**os.environ, "AGENT_API_ADDRESS": f"0.0.0.0:{free_port()}"}
    env.pop("AGENT_API_TOKENS", None)
    refused = subprocess.run([sys.executable, "-m", "durable_react_agent.api"], cwd=ROOT, env=env,
                             capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2
    assert "without AGENT_API_TOKENS" in refused.stderr
    # The other settings it refuses, as `agent-api` reads them (a SettingsError: exit 2)
    for bad in ["nohost", "127.0.0.1:99999", "127.0.0.1:http"]:
        with pytest.raises(SettingsError, match="AGENT_API_ADDRESS"):
            ApiSettings.from_env({"AGENT_API_ADDRESS": bad})
    with pytest.raises(SettingsError, match="name:token"):
        ApiSettings.from_env({"AGENT_API_TOKENS": "alice"})
    with pytest.raises(SettingsError, match="AGENT_MEMORY_URL"):
        ApiSettings.from_env({"AGENT_MEMORY_URL": "mysql://x"})


async def test_event_stream_follows_continue_as_new(http: httpx.AsyncClient, client, task_queue,
                                                    model: ScriptedModelServer):
    trigger = script(model, unique("api-can"), ScriptedReply(content="first answer"),
                     ScriptedReply(content="second answer"))
    handle = await start(client, task_queue, trigger, continue_as_new_after_turns=1)
    await until_status(http, handle.id, "idle")
    said = await http.post(f"/conversations/{handle.id}/messages", json={"text": "again"})
    assert said.status_code == 200
    await until_status(http, handle.id, "idle", turn=2)
    assert (await status_of(http, handle.id))["runs"] >= 2
    events = await read_sse(http, handle.id, "turn_finished", times=2)
    answers = [json.loads(e["data"])["text"] for e in events if e["event"] == "turn_finished"]
    assert answers == ["first answer", "second answer"]
    offsets = [int(e["id"]) for e in events]
    assert offsets == sorted(set(offsets))  # one offset sequence across the two runs


async def test_the_http_api_takes_an_output_schema(api, model: ScriptedModelServer):
    trigger = script(model, unique("typed-api"),
                     ScriptedReply(content='{"city": "Rome", "celsius": 20}'))
    async with httpx.AsyncClient(base_url=api.url, timeout=30) as http:
        bad = await http.post("/conversations", json={"prompt": trigger,
                                                      "output_schema": {"type": "nope"}})
        assert bad.status_code == 422 and "output schema is not usable" in bad.text
        cid = unique("typed-api")
        r = await http.post("/conversations", json={"prompt": trigger, "id": cid,
                                                    "output_schema": WEATHER})
        assert r.status_code == 201, r.text
        deadline = time.monotonic() + 30
        while (status := (await http.get(f"/conversations/{cid}")).json())["status"] != "idle":
            assert time.monotonic() < deadline, status
            await asyncio.sleep(0.1)
        assert status["final_output"] == {"city": "Rome", "celsius": 20}
