"""Reaching the human (DESIGN "Reaching the human"): signed deliveries to a receiver the test
runs, within seconds of a call starting to wait; one delivery key however many attempts (a
worker SIGKILLed mid-delivery); a receiver that is down blocks nothing and is recorded as failed;
one-time links (a GET changes nothing, a POST approves exactly those args, a second is refused,
a forged or expired one decides nothing)."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import hmac
import json
import threading
import time
from collections.abc import AsyncIterator, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
import pytest_asyncio
from temporalio.client import Client

from activities.settings import ActivitySettings
from activities.webhooks import Webhook, Webhooks, WebhooksError, read_link, sign_link
from scripted_model import ScriptedModelServer, ScriptedReply
from tests.api_support import ApiProcess
from tests.devserver import free_port, worker_env
from tests.fake_tools import registry_with_test_tools
from tests.helpers import note_rows, reaches, replay, script, settled, start, tool_call, unique
from tests.test_durability import WorkerProcess
from worker.app import build_worker
from workflows.conversation import ConversationWorkflow
from workflows.models import AnswerRequest, SayRequest

SECRET, LINKS = "hook-secret-123", "link-secret-456"


class Receiver:
    """A webhook receiver: what it got, when; it can hold its answer (`hold_s`)."""

    def __init__(self, hold_s: float = 0.0) -> None:
        self.got: list[dict] = []
        received, self.hold_s = self.got, hold_s
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - the http.server name
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                received.append({"at": time.monotonic(), "body": body,
                                 "headers": dict(self.headers)})
                time.sleep(owner.hold_s)
                self.send_response(200)
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


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.close()


def hooks_of(*urls: str, addressee: str | None = None, public_url: str = "") -> Webhooks:
    return Webhooks([Webhook(url=url, secret_env="TEST_HOOK_SECRET", addressee=addressee,
                             events=["approval_requested", "question_asked", "turn_finished",
                                     "conversation_failed"]) for url in urls],
                    public_url=public_url or "http://127.0.0.1:8000")


@pytest_asyncio.fixture
async def hooked(client: Client, activity_settings: ActivitySettings, receiver: Receiver,
                 monkeypatch: pytest.MonkeyPatch, temporal_address: str
                 ) -> AsyncIterator[tuple[str, ApiProcess]]:
    """A worker delivering to the receiver (and to a receiver that is down), and an API
    serving the links; a delivery is given up after 3 s."""
    monkeypatch.setenv("TEST_HOOK_SECRET", SECRET)
    monkeypatch.setenv("AGENT_LINK_SECRET", LINKS)
    queue = unique("hooked")
    api = ApiProcess(temporal_address, queue, AGENT_LINK_SECRET=LINKS).start()
    down = f"http://127.0.0.1:{free_port()}/down"
    settings = dataclasses.replace(
        activity_settings, webhooks=hooks_of(receiver.url, down, public_url=api.url),
        webhook_retry_s=3)
    try:
        async with httpx.AsyncClient(timeout=10) as http:
            async with build_worker(client, queue, settings, http, registry_with_test_tools()):
                yield queue, api
    finally:
        api.stop()


async def test_a_signed_delivery_comes_within_seconds_and_its_links_decide_once(
        client: Client, model: ScriptedModelServer, receiver: Receiver, hooked,
        activity_settings: ActivitySettings):
    queue, api = hooked
    title = unique("hooked-note")
    trigger = script(model, unique("hooked"),
                     ScriptedReply(tool_calls=[tool_call("create_note", {"title": title,
                                                                         "body": "b"})]),
                     ScriptedReply(content="Written."))
    handle = await start(client, queue, trigger)
    waiting = await reaches(handle, "waiting_for_confirmation")
    asked = time.monotonic()
    delivery, = await receiver.until("approval_requested")
    assert delivery["at"] - asked < 5  # within seconds of the call starting to wait
    assert signed(delivery) and not signed(delivery, "another secret")
    body, call = delivery["json"], waiting.pending_confirmations[0]
    assert body["event"] == "approval_requested" and body["conversation_id"] == handle.id
    assert (body["call_id"], body["tool"], body["args"], body["risk"]) == (
        call.call_id, "create_note", {"title": title, "body": "b"}, "sensitive")
    assert body["console_url"] == f"{api.url}/#/c/{handle.id}"
    assert len(delivery["headers"]["X-Agent-Delivery"]) == 32

    async with httpx.AsyncClient(timeout=30) as http:
        # A GET (a mail scanner, a chat unfurler) shows what will run and changes nothing.
        for _ in range(2):
            page = await http.get(body["approve_url"])
            assert page.status_code == 200 and title in page.text and "<form" in page.text
            assert page.headers["x-frame-options"] == "DENY"  # no click-jacked Approve
        assert (await handle.query(ConversationWorkflow.status)).pending_confirmations == [call]
        # A forged link (its claims changed, its signature kept) decides nothing.
        claims = read_link(LINKS, body["approve_url"].rsplit("/", 1)[1])
        forged = sign_link("not the secret", {**claims, "h": "sha256:other"})
        assert (await http.post(f"{api.url}/links/{forged}")).status_code == 403
        # An expired one neither.
        old = sign_link(LINKS, {**claims, "x": int(time.time()) - 1})
        assert (await http.post(f"{api.url}/links/{old}")).status_code == 410
        # One for other args (the call's args changed since) neither.
        other = sign_link(LINKS, {**claims, "h": "sha256:" + "0" * 64})
        refused = await http.post(f"{api.url}/links/{other}")
        assert refused.status_code == 409 and "arguments" in refused.text
        # The POST approves exactly those args, once.
        approved = await http.post(body["approve_url"])
        assert approved.status_code == 200 and "approved" in approved.text
        done = await settled(handle)
        assert done.final_answer == "Written." and done.decisions[0].approver == "link"
        assert done.decisions[0].args_hash == call.args_hash
        assert [row[1:] for row in note_rows(activity_settings.data_dir, title)] == [(title, "b")]
        again = await http.post(body["approve_url"])
        assert again.status_code == 409 and "no longer waiting" in again.text
        late = await http.post(body["reject_url"])
        assert late.status_code == 409

    finished, = await receiver.until("turn_finished")
    assert finished["json"]["answer"] == "Written." and signed(finished)
    # The receiver that is down blocked nothing; its deliveries were given up, in the audit.
    await asyncio.sleep(4)
    history = await handle.query(ConversationWorkflow.history)
    notes = [r.text for r in history if r.kind == "notify"]
    assert any("approval_requested → 127.0.0.1: delivered" in n for n in notes)
    assert any("approval_requested → 127.0.0.1: failed" in n for n in notes), notes
    await handle.signal(ConversationWorkflow.end, None)
    await handle.result()
    await replay(handle, "webhook_approval_by_link")


async def test_a_question_and_a_failed_turn_are_delivered(
        client: Client, model: ScriptedModelServer, receiver: Receiver, hooked):
    queue, _ = hooked
    trigger = script(model, unique("hooked-q"),
                     ScriptedReply(tool_calls=[tool_call("ask_choice", {
                         "message": "Red or blue?", "options": ["red", "blue"]})]),
                     ScriptedReply(errors=[422], content="never"))
    handle = await start(client, queue, trigger)
    await reaches(handle, "waiting_for_input")
    question, = await receiver.until("question_asked")
    assert question["json"]["question"] == "Red or blue?"
    assert question["json"]["options"] == ["red", "blue"] and "approve_url" not in question["json"]
    await handle.signal(ConversationWorkflow.answer,
                        AnswerRequest(values=["blue"], request_id="a1"))
    failed, = await receiver.until("conversation_failed")
    assert failed["json"]["stop_reason"] == "llm_error" and "422" in failed["json"]["error"]


async def test_one_key_however_many_attempts_when_the_worker_is_killed_mid_delivery(
        client: Client, model: ScriptedModelServer, temporal_address: str, tmp_path: Path):
    slow = Receiver(hold_s=6)  # longer than the worker lives after the delivery starts
    try:
        hooks = tmp_path / "hooks.json"
        hooks.write_text(json.dumps({"webhooks": [{
            "url": slow.url, "secret_env": "TEST_HOOK_SECRET", "events": ["turn_finished"]}]}))
        queue = unique("hook-kill")
        env = worker_env(temporal_address, queue, model.base_url, tmp_path / "data",
                         AGENT_WEBHOOKS=str(hooks), TEST_HOOK_SECRET=SECRET)
        worker = WorkerProcess(env, tmp_path)
        worker.start()
        trigger = script(model, unique("hook-kill"), ScriptedReply(content="done"),
                         ScriptedReply(content="done again"))
        handle = await start(client, queue, trigger)
        await settled(handle, timeout_s=60)
        await slow.until("turn_finished")  # the delivery is in flight, held by the receiver
        worker.kill()
        worker.start()
        deliveries = await slow.until("turn_finished", count=2, timeout_s=60)  # retried
        await handle.signal(ConversationWorkflow.say, SayRequest(text="more", request_id="m2"))
        await settled(handle, turn=2, timeout_s=60)
        later = await slow.until("turn_finished", count=3, timeout_s=60)
        worker.stop()
    finally:
        slow.close()
    first_turn = [d for d in deliveries if d["json"]["turn"] == 1]
    assert len(first_turn) >= 2  # attempts of one delivery...
    assert len({d["headers"]["X-Agent-Delivery"] for d in first_turn}) == 1  # ...one key
    assert all(signed(d) for d in later)
    second = {d["headers"]["X-Agent-Delivery"] for d in later if d["json"]["turn"] == 2}
    assert len(second) == 1 and second != {first_turn[0]["headers"]["X-Agent-Delivery"]}


def test_a_bad_webhooks_file_is_refused(tmp_path: Path):
    path = tmp_path / "hooks.json"
    for data, why in [({"webhooks": []}, "at least 1"),
                      ({"webhooks": [{"url": "ftp://x", "events": ["turn_finished"]}]}, "http"),
                      ({"webhooks": [{"url": "http://x", "events": ["nope"]}]}, "nope"),
                      ({"webhooks": [{"url": "http://x", "events": ["turn_finished"],
                                      "secret": "s"}]}, "Extra inputs"),
                      ({"webhooks": [{"url": "http://x", "events": ["turn_finished"],
                                      "secret_env": "UNSET_SECRET"}]}, "UNSET_SECRET")]:
        path.write_text(json.dumps(data))
        with pytest.raises(WebhooksError, match=why):
            Webhooks.load(path, {})


def test_links_are_signed_bound_and_expire():
    claims = {"c": "conv", "k": "call_1", "h": "sha256:ab", "a": "approve", "x": 2_000_000_000,
              "n": "key", "to": None}
    token = sign_link(LINKS, claims)
    assert read_link(LINKS, token, now=1_000) == claims
    for bad in (token + "x", "x" + token, token.replace(".", ""), "", ".", sign_link("s", claims)):
        with pytest.raises(Exception, match="not valid"):
            read_link(LINKS, bad, now=1_000)
    with pytest.raises(Exception, match="expired"):
        read_link(LINKS, token, now=2_000_000_001)
