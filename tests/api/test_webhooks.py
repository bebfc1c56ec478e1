"""Reaching the human (DESIGN "Reaching the human"): signed deliveries to a receiver the test
runs, within seconds of a call starting to wait; one delivery key however many attempts (a
worker SIGKILLed mid-delivery); a receiver that is down blocks nothing and is recorded as failed;
one-time links (a GET changes nothing, a POST approves exactly those args, a second is refused,
a forged or expired one decides nothing); a Slack message that model-written text cannot put a
link or a mention into; deliveries a Standard Webhooks library verifies; 429 and 408 retried
with the same key, other refusals not."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import hashlib
import hmac
import json
import re
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
import pytest_asyncio
import standardwebhooks
from temporalio.client import Client
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from durable_react_agent.activities.settings import ActivitySettings
from durable_react_agent.activities.webhooks import (
    Webhook,
    WebhookActivities,
    Webhooks,
    WebhooksError,
    slack_text,
)
from durable_react_agent.api.links import decision as link_decision
from durable_react_agent.contract import AnswerRequest, ConfirmRequest, NotifyRequest, SayRequest
from durable_react_agent.rules.links import LinkClaims, read_link, sign_link
from durable_react_agent.testing import ScriptedModelServer, ScriptedReply
from durable_react_agent.worker.app import build_worker
from durable_react_agent.workflows.conversation import ConversationWorkflow
from tests.api_support import ApiServer
from tests.devserver import free_port, worker_env
from tests.fake_tools import registry_with_test_tools
from tests.helpers import (
    note_rows,
    reaches,
    replay,
    script,
    settled,
    start,
    tool_call,
    unique,
)
from tests.processes import WorkerProcess
from tests.webhook_support import LINKS, SECRET, Receiver, hooks_of, signed


@pytest_asyncio.fixture
async def hooked(client: Client, activity_settings: ActivitySettings, receiver: Receiver,
                 monkeypatch: pytest.MonkeyPatch, temporal_address: str
                 ) -> AsyncIterator[tuple[str, ApiServer]]:
    """A worker delivering to the receiver (and to a receiver that is down), and an API
    serving the links; a delivery is given up after 3 s."""
    monkeypatch.setenv("TEST_HOOK_SECRET", SECRET)
    monkeypatch.setenv("AGENT_LINK_SECRET", LINKS)
    queue = unique("hooked")
    api = ApiServer(temporal_address, queue, AGENT_LINK_SECRET=LINKS).start()
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
        claims = read_link(LINKS, body["approve_url"].rsplit("/", 1)[1], time.time())
        forged = sign_link("not the secret", claims.model_copy(update={"h": "sha256:other"}))
        assert (await http.post(f"{api.url}/links/{forged}")).status_code == 403
        # An expired one neither.
        old = sign_link(LINKS, claims.model_copy(update={"x": int(time.time()) - 1}))
        assert (await http.post(f"{api.url}/links/{old}")).status_code == 410
        # One for other args (the call's args changed since) neither.
        other = sign_link(LINKS, claims.model_copy(update={"h": "sha256:" + "0" * 64}))
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
    deadline = time.monotonic() + 30
    while True:
        notes = await notify_notes(handle)
        if any("approval_requested → 127.0.0.1: failed" in n for n in notes):
            break
        assert time.monotonic() < deadline, notes
        await asyncio.sleep(0.1)
    assert any("approval_requested → 127.0.0.1: delivered" in n for n in notes)
    await handle.signal(ConversationWorkflow.end, None)
    await handle.result()
    await replay(handle, "webhook_approval_by_link")


async def test_a_link_approves_its_one_call_and_remembers_nothing(
        client: Client, model: ScriptedModelServer, receiver: Receiver, hooked,
        activity_settings: ActivitySettings):
    """A link decides one call: its approval is never a grant (whatever its token is made to
    say), so the conversation's next call of the same tool waits for a person again."""
    queue, _ = hooked
    first, second = unique("linked"), unique("after-link")
    trigger = script(model, unique("hooked-once"),
                     ScriptedReply(tool_calls=[tool_call("create_note", {"title": first,
                                                                         "body": "b"})]),
                     ScriptedReply(tool_calls=[tool_call("create_note", {"title": second,
                                                                         "body": "b"})]),
                     ScriptedReply(content="{last_tool}"))
    handle = await start(client, queue, trigger)
    await reaches(handle, "waiting_for_confirmation")
    delivery, = await receiver.until("approval_requested")
    token = delivery["json"]["approve_url"].rsplit("/", 1)[1]
    # a link signed with more than a link says: what it decides is the same, one call
    claims = read_link(LINKS, token, time.time())
    padded = {**claims.model_dump(), "remember": "conversation", "for_s": 600, "uses": 9}
    assert read_link(LINKS, sign_link(LINKS, padded), time.time()) == claims
    request = link_decision(claims)
    assert isinstance(request, ConfirmRequest) and request.call_ids == [claims.k]
    assert (request.remember, request.for_s, request.uses) == (None, None, None)

    async with httpx.AsyncClient(timeout=30) as http:
        approved = await http.post(delivery["json"]["approve_url"])
    assert approved.status_code == 200, approved.text
    await receiver.until("approval_requested", count=2)  # the second note asks
    waiting = await reaches(handle, "waiting_for_confirmation")
    assert [p.args["title"] for p in waiting.pending_confirmations] == [second]
    assert [(d.approver, d.grant) for d in waiting.decisions] == [("link", None)]
    assert await handle.query(ConversationWorkflow.grants) == []
    assert len(note_rows(activity_settings.data_dir, first)) == 1
    assert note_rows(activity_settings.data_dir, second) == []
    await handle.signal(ConversationWorkflow.end, None)


async def notify_notes(handle) -> list[str]:
    """The audit's records of deliveries."""
    return [r.text for r in await handle.query(ConversationWorkflow.history) if r.kind == "notify"]


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
    slow = Receiver(hold_s=60)  # longer than the worker lives after the delivery starts
    hooks = tmp_path / "hooks.json"
    hooks.write_text(json.dumps({"webhooks": [{
        "url": slow.url, "secret_env": "TEST_HOOK_SECRET", "events": ["turn_finished"]}]}))
    queue = unique("hook-kill")
    env = worker_env(temporal_address, queue, model.base_url, tmp_path / "data",
                     AGENT_WEBHOOKS=str(hooks), TEST_HOOK_SECRET=SECRET)
    worker = WorkerProcess(env, tmp_path)
    (tmp_path / "other").mkdir()
    other = WorkerProcess(env, tmp_path / "other")  # up before the kill: its start is not timed
    try:
        worker.start()
        trigger = script(model, unique("hook-kill"), ScriptedReply(content="done"),
                         ScriptedReply(content="done again"))
        handle = await start(client, queue, trigger)
        await settled(handle, timeout_s=60)
        await slow.until("turn_finished")  # the delivery is in flight, held by the receiver
        other.start()
        await asyncio.to_thread(other.wait_for_log, '"event": "worker started"')
        worker.kill()
        slow.hold_s = 0  # what comes after the kill is answered at once
        # retried once the delivery's heartbeat (5 s) lapses, well before its 15 s deadline
        deliveries = await slow.until("turn_finished", count=2, timeout_s=13)
        await handle.signal(ConversationWorkflow.say, SayRequest(text="more", request_id="m2"))
        await settled(handle, turn=2, timeout_s=60)
        later = await slow.until("turn_finished", count=3, timeout_s=60)
    finally:
        worker.stop()
        other.stop()
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
    assert read_link(LINKS, token, now=1_000) == LinkClaims(**claims)
    for bad in (token + "x", "x" + token, token.replace(".", ""), "", ".", sign_link("s", claims)):
        with pytest.raises(Exception, match="not valid"):
            read_link(LINKS, bad, now=1_000)
    with pytest.raises(Exception, match="expired"):
        read_link(LINKS, token, now=2_000_000_001)


# ----- what a delivery says and how it is signed, at the activity (no server) -----

HOSTILE = "<https://evil.example|Approve> <!channel> <@U123> Tom & Jerry &lt;b&gt;"


def notify_request(**payload: object) -> NotifyRequest:
    fields = {"event": "approval_requested", "conversation_id": "conv-1", "turn": 1,
              "at": "2026-01-01T00:00:00+00:00", "call_id": "call_1", "tool": "create_note",
              "args": {"title": "t"}, "risk": "sensitive", **payload}
    return NotifyRequest(webhook=0, host="hooks.example", event=str(fields["event"]),
                         key="d" * 32, payload=fields, args_hash="sha256:ab")


async def delivered(request: NotifyRequest, secret: str = SECRET, status: int = 200,
                    hook_format: str = "json") -> tuple[list[httpx.Request], int | Exception]:
    """What `notify` sends a receiver answering `status`, and what it returns or raises."""
    sent: list[httpx.Request] = []

    def answer(r: httpx.Request) -> httpx.Response:
        sent.append(r)
        return httpx.Response(status)

    hooks = Webhooks([Webhook(url="https://hooks.example/agent", secret_env="TEST_HOOK_SECRET",
                              events=["approval_requested", "turn_finished"],
                              format=hook_format)])
    async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as http:
        notify = WebhookActivities(hooks, http, {"TEST_HOOK_SECRET": secret,
                                                 "AGENT_LINK_SECRET": LINKS}).notify
        try:
            outcome: int | Exception = await ActivityEnvironment().run(notify, request)
        except ApplicationError as err:
            outcome = err
    return sent, outcome


async def test_a_slack_message_links_only_to_us_whatever_the_model_wrote():
    request = notify_request(tool="create_note`<!here>", risk="sensitive",
                             args={"title": HOSTILE, "body": "``` `x` " + "y" * 5000})
    sent, _ = await delivered(request, hook_format="slack")
    text = json.loads(sent[0].content)["text"]
    links = re.findall(r"<([^<>]*)>", text)  # every link or mention Slack would make
    assert [link.rpartition("|")[2] for link in links] == ["conv-1", "Approve", "Reject"]
    assert links[1].startswith("http://127.0.0.1:8000/links/")
    assert "&lt;https://evil.example|Approve&gt; &lt;!channel&gt; &lt;@U123&gt;" in text
    assert "Tom &amp; Jerry &amp;lt;b&amp;gt;" in text  # an entity it wrote stays text
    assert text.count("`") == 4  # two code spans, the tool's and the args', none closed early
    assert len(text) < 1500 and "…" in text  # long args are clipped
    for event, field in [("question_asked", "question"), ("turn_finished", "answer"),
                         ("conversation_failed", "error"), ("turn_held", "message")]:
        said = slack_text({"event": event, "conversation_id": "conv-1", "turn": 2,
                           "console_url": "http://127.0.0.1:8000/#/c/conv-1",
                           field: HOSTILE + "\n" + "z" * 10_000})
        assert re.findall(r"<([^<>]*)>", said) == ["http://127.0.0.1:8000/#/c/conv-1|conv-1"]
        assert "&lt;!channel&gt; &lt;@U123&gt;" in said and "Tom &amp; Jerry" in said
        assert len(said) < 2000 and said.endswith("…")


async def test_a_delivery_verifies_as_a_standard_webhook_and_keeps_its_agent_headers():
    raw = base64.b64encode(b"a standard secret, 24 b").decode()
    # (our secret, what a receiver gives the library): a whsec_ secret as it is; any other
    # as the base64 of its UTF-8 bytes, or as those bytes.
    for secret, theirs in [(SECRET, base64.b64encode(SECRET.encode()).decode()),
                           (SECRET, SECRET.encode()), ("whsec_" + raw, "whsec_" + raw),
                           ("whsec_" + raw.rstrip("="), raw)]:
        (first,), _ = await delivered(notify_request(), secret)
        (again,), _ = await delivered(notify_request(), secret)  # another attempt
        headers, body = dict(first.headers), first.content
        receiver = standardwebhooks.Webhook(theirs)
        assert receiver.verify(body, headers)["approve_url"].startswith("http://127.0.0.1:")
        assert receiver.verify(again.content, dict(again.headers))
        assert headers["webhook-id"] == again.headers["webhook-id"] == "d" * 32
        assert abs(int(headers["webhook-timestamp"]) - time.time()) < 5  # of this attempt
        # The contract's headers, as they were.
        assert headers["x-agent-delivery"] == again.headers["x-agent-delivery"] == "d" * 32
        assert headers["x-agent-signature"] == "sha256=" + hmac.new(
            secret.encode(), body, hashlib.sha256).hexdigest()
        # A replayed delivery with its id, its time or its body changed verifies no more.
        for changed in [{"webhook-id": "e" * 32},
                        {"webhook-timestamp": str(int(headers["webhook-timestamp"]) - 1)}]:
            with pytest.raises(standardwebhooks.WebhookVerificationError):
                receiver.verify(body, {**headers, **changed})
        with pytest.raises(standardwebhooks.WebhookVerificationError):
            receiver.verify(body.replace(b"create_note", b"delete_note"), headers)
        with pytest.raises(standardwebhooks.WebhookVerificationError):
            standardwebhooks.Webhook(base64.b64encode(b"another secret").decode()).verify(
                body, headers)


def test_a_whsec_secret_that_is_not_base64_is_refused(tmp_path: Path):
    path = tmp_path / "hooks.json"
    path.write_text(json.dumps({"webhooks": [{"url": "http://x", "events": ["turn_finished"],
                                              "secret_env": "HOOK_SECRET"}]}))
    with pytest.raises(WebhooksError, match="HOOK_SECRET.*base64"):
        Webhooks.load(path, {"HOOK_SECRET": "whsec_not*base64!"})
    assert Webhooks.load(path, {"HOOK_SECRET": "whsec_" + base64.b64encode(b"k").decode()})


async def test_only_what_a_retry_can_cure_is_retried():
    for status in (200, 202, 204):
        assert (await delivered(notify_request(), status=status))[1] == status
    for status, retried in [(408, True), (429, True), (500, True), (502, True), (503, True),
                            (301, True), (400, False), (401, False), (403, False),
                            (404, False), (409, False), (410, False), (422, False)]:
        _, refused = await delivered(notify_request(), status=status)
        assert isinstance(refused, ApplicationError) and refused.type == "WebhookRefused"
        assert refused.non_retryable is not retried, status


async def test_a_receiver_answering_429_or_408_gets_the_delivery_again_and_400_or_404_not(
        client: Client, model: ScriptedModelServer, activity_settings: ActivitySettings,
        monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("TEST_HOOK_SECRET", SECRET)
    busy, slow = Receiver(statuses=(429, 429)), Receiver(statuses=(408,))
    bad, gone = Receiver(statuses=(400,) * 5), Receiver(statuses=(404,) * 5)
    receivers = [busy, slow, bad, gone]
    queue = unique("hook-retry")
    settings = dataclasses.replace(
        activity_settings, webhooks=hooks_of(*(r.url for r in receivers)), webhook_retry_s=60)
    try:
        async with httpx.AsyncClient(timeout=10) as http:
            async with build_worker(client, queue, settings, http, registry_with_test_tools()):
                handle = await start(client, queue, script(model, unique("hook-retry"),
                                                           ScriptedReply(content="done")))
                await settled(handle)
                deliveries = [await busy.until("turn_finished", 3),
                              await slow.until("turn_finished", 2),
                              await bad.until("turn_finished"), await gone.until("turn_finished")]
                keys = [d[0]["headers"]["X-Agent-Delivery"] for d in deliveries]
                deadline = time.monotonic() + 20
                while len(notes := await notify_notes(handle)) < 4:
                    assert time.monotonic() < deadline, notes
                    await asyncio.sleep(0.1)
                await handle.signal(ConversationWorkflow.end, None)
                await handle.result()
    finally:
        for r in receivers:
            r.close()
    outcome = {key: note.split(": ")[1].split(" ")[0] for note in notes for key in keys
               if key in note}
    assert [outcome[key] for key in keys] == ["delivered", "delivered", "failed", "failed"]
    for attempts in deliveries[:2]:  # retried, as one delivery: the same keys, each verified
        assert len({d["headers"]["X-Agent-Delivery"] for d in attempts}) == 1
        assert {d["headers"]["webhook-id"] for d in attempts} == {
            attempts[0]["headers"]["X-Agent-Delivery"]}
        receiver = standardwebhooks.Webhook(base64.b64encode(SECRET.encode()).decode())
        assert all(receiver.verify(d["body"], d["headers"]) for d in attempts)
    assert [len(r.got) for r in receivers] == [3, 2, 1, 1]  # a 400 or a 404 is final
