"""The web console (api/static) in a real browser: Debian's chromium, driven by Playwright.

A person starts a conversation from the console, watches the model's tokens stream in, edits a
call's arguments (the console refuses an invalid edit before sending anything), approves it, and
reads who approved what in the audit trail. Other tests: the live stream resumes after the API
restarts without losing or repeating an event, a question is answered through its form, a refusal
(409) is shown, what a role may not do is not offered (and a 403's reason is shown), and the
client-side schema validator. The main test writes the screenshots of
docs/screenshots.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re
from urllib.parse import quote

import httpx
from playwright.async_api import Browser, expect
from temporalio.client import Client

from durable_react_agent.contract import EndRequest
from durable_react_agent.contract.owner import OwnerLimitsFile
from durable_react_agent.rules.gate import args_hash
from durable_react_agent.testing import ScriptedModelServer, ScriptedReply
from durable_react_agent.worker.app import build_worker
from durable_react_agent.workflows.conversation import ConversationWorkflow
from tests.api_support import ApiProcess, ApiServer, sse_events
from tests.cassette_support import recorded
from tests.console_support import VIEWPORT, Console, call, screenshot, sign_in, status_of
from tests.fake_tools import registry_with_test_tools
from tests.helpers import first_token, note_rows, script, start, tool_call, unique, until
from tests.subagent_support import delegating


async def events_until(api_url: str, cid: str, kind: str) -> list[dict[str, str]]:
    """The conversation's SSE events from the start, up to the first of `kind`."""
    body = ""
    async with httpx.AsyncClient(timeout=20) as http:
        async with http.stream("GET", f"{api_url}/conversations/{quote(cid)}/events") as answer:
            async for chunk in answer.aiter_text():
                body += chunk
                events = sse_events(body)
                if any(e.get("event") == kind and "id" in e for e in events):
                    return events
    raise AssertionError(f"the stream ended before a {kind} event")


# ----- the tests -----

async def test_console_streams_edits_validates_and_approves(
        api: ApiServer, model: ScriptedModelServer, activity_settings, console: Console):
    trigger, edited = unique("console"), unique("Edited")
    thought = "Let me save that as a note for you."
    script(model, trigger,
           ScriptedReply(content=thought,
                         tool_calls=[tool_call("create_note", {"title": "T1", "body": "B1"})]),
           ScriptedReply(content="Saved the note."))
    page = console.page
    await page.goto(f"{api.url}/")
    await expect(page.get_by_test_id("principal")).to_have_text("signed in as anonymous · admin")
    cid = await console.start(f"Please keep a note for me ({trigger}).")
    chat = page.get_by_test_id("chat")

    # The first message, and the model's streamed tokens of step 1.
    await expect(chat.get_by_test_id("user-message")).to_have_text(
        f"Please keep a note for me ({trigger}).")
    await expect(chat.get_by_test_id("assistant-text").first).to_have_text(thought)
    tool = chat.get_by_test_id("tool-card")
    await expect(tool.get_by_test_id("tool-name")).to_have_text("create_note")
    await expect(tool).to_have_attribute("data-status", "awaiting")

    # The approval card, prefilled from the pending confirmation.
    card = page.get_by_test_id("approval-card")
    await expect(card).to_have_count(1)
    await expect(card.get_by_test_id("approval-tool")).to_have_text("create_note")
    await expect(card.get_by_test_id("approval-args")).to_contain_text('"title": "T1"')
    call_id = await card.get_attribute("data-call-id")
    await expect(page.get_by_test_id("status")).to_have_attribute("data-status",
                                                                  "waiting_for_confirmation")
    config = (await call("GET", f"{api.url}/config")).json()
    await expect(page.get_by_test_id("temporal-link")).to_have_attribute(
        "href", f"{config['temporal_ui']}/namespaces/{config['namespace']}/workflows/{quote(cid)}")
    await screenshot(page, "approval.png")

    # The "Needs you" inbox lists it while it waits; it opens the conversation again.
    await page.get_by_test_id("home").click()
    waiting = page.get_by_test_id("inbox").locator(f'[data-id="{cid}"]')
    await expect(waiting).to_be_visible()
    await expect(waiting).to_contain_text("waits for approval")
    await expect(page.get_by_test_id("home-inbox").locator(f'[data-id="{cid}"]')).to_contain_text(
        "create_note")
    await screenshot(page, "inbox.png")
    await waiting.click()
    await expect(page.get_by_test_id("conversation")).to_have_attribute("data-id", cid)
    card = page.get_by_test_id("approval-card")

    # Invalid edits are refused in the page, against the tool's schema: nothing is sent.
    await card.get_by_test_id("edit-args").click()
    editor, error = card.get_by_test_id("args-editor"), card.get_by_test_id("args-error")
    await expect(editor).to_have_value(re.compile(r'"title": "T1"'))
    for bad, why in (({"title": 42, "body": "B1"}, "title: must be string, not integer"),
                     ({"title": "", "body": "B1"}, "title: must be at least 1 character long"),
                     ({"title": "x"}, "body: is required"),
                     ('{"title": ', "not valid JSON")):
        await editor.fill(bad if isinstance(bad, str) else json.dumps(bad))
        await card.get_by_test_id("approve").click()
        await expect(error).to_be_visible()
        await expect(error).to_contain_text(why)
    assert console.posted(cid, "confirm") == []
    still = await status_of(api.url, cid)
    assert still["status"] == "waiting_for_confirmation"
    assert still["pending_confirmations"][0]["args"] == {"title": "T1", "body": "B1"}

    # A valid edit, approved: the edited call runs and the model answers.
    await editor.fill(json.dumps({"title": edited, "body": "B1"}, indent=2))
    await expect(error).to_be_hidden()  # checked again as it is typed
    await card.get_by_test_id("approve").click()
    await expect(chat.get_by_test_id("final-answer")).to_have_text("Saved the note.")
    await expect(page.get_by_test_id("approval-card")).to_have_count(0)
    shown = {call_id: args_hash({"title": "T1", "body": "B1"})}  # bound to the card's args
    assert console.posted(cid, "confirm") == [
        {"call_ids": [call_id], "seen": shown, "args": {"title": edited, "body": "B1"}}]
    await expect(tool).to_have_attribute("data-status", "ok")
    await expect(tool.get_by_test_id("tool-args")).to_contain_text(edited)
    await expect(tool.get_by_test_id("approver")).to_have_text("anonymous")
    await expect(tool.get_by_test_id("tool-ms")).to_contain_text(re.compile(r"\d+ ms"))
    await expect(tool.get_by_test_id("tool-bytes")).to_contain_text(re.compile(r"\d+ B"))
    rows = note_rows(activity_settings.data_dir, edited)
    assert len(rows) == 1 and rows[0][2] == "B1"

    # The audit trail says who approved what.
    await page.get_by_test_id("tab-audit").click()
    action = page.get_by_test_id("audit").locator(
        '[data-testid="audit-action"][data-tool="create_note"]')
    await expect(action.get_by_test_id("audit-approver")).to_have_text("anonymous")
    await expect(action).to_contain_text(edited)
    await expect(action.get_by_test_id("audit-decision")).to_contain_text("approved by anonymous")
    assert console.errors == []


async def test_console_stops_a_turn_and_the_conversation_goes_on(
        api: ApiServer, model: ScriptedModelServer, client: Client, console: Console):
    """Mid-turn, "Send now" steers a message into the turn and Stop ends it with one click: the
    text the reply had streamed stays as its answer, the turn says `stopped`, and the message
    its model never got is the next turn's, answered."""
    trigger = script(model, unique("console-stop"),
                     ScriptedReply(content="A long answer, coming slowly, piece by piece.",
                                   stream_pause_s=60),
                     ScriptedReply(content="Here, briefly."))
    page = console.page
    await page.goto(f"{api.url}/")
    cid = await console.start(f"Tell me everything ({trigger}).")
    said = (await first_token(client, cid)).text
    stop, now = page.get_by_test_id("stop"), page.get_by_test_id("send-now")
    await expect(stop).to_be_visible()
    await page.get_by_test_id("message-input").fill("Briefly, then?")
    await now.click()
    await expect(page.get_by_test_id("send-outcome")).to_have_text(
        "Sent: steered into turn 1: its model gets it at its next step.")
    chat = page.get_by_test_id("chat")
    await expect(chat.get_by_test_id("steered-message")).to_contain_text("Briefly, then?")
    await stop.click()
    await expect(page.get_by_test_id("end-outcome")).to_have_text("Stop: turn 1 stopped.")
    await expect(chat.get_by_test_id("turn-end").first).to_have_attribute(
        "data-stop-reason", "stopped")
    await expect(chat.get_by_test_id("final-answer").first).to_contain_text(said)
    await expect(chat.get_by_test_id("final-answer").last).to_have_text("Here, briefly.")
    await expect(stop).to_be_hidden()  # nothing runs now
    await expect(now).to_be_hidden()
    assert console.posted(cid, "stop") == [{}]
    assert console.posted(cid, "messages") == [{"text": "Briefly, then?", "steer": True}]
    await screenshot(page, "console-stopped.png")
    assert console.errors == []


async def test_console_allows_a_tool_for_the_rest_of_the_conversation(
        api: ApiServer, model: ScriptedModelServer, activity_settings, console: Console):
    """"Allow for this conversation" approves the call and remembers it (a grant): the next
    note runs without a card. A destructive call's approval is not offered to be remembered."""
    first, second = unique("Allowed"), unique("ByGrant")
    trigger = script(model, unique("console-grant"),
                     ScriptedReply(tool_calls=[tool_call("create_note",
                                                         {"title": first, "body": "1"})]),
                     ScriptedReply(tool_calls=[tool_call("create_note",
                                                         {"title": second, "body": "2"})]),
                     ScriptedReply(content="Two notes saved."))
    page = console.page
    await page.goto(f"{api.url}/")
    cid = await console.start(f"Keep two notes ({trigger}).")
    card = page.get_by_test_id("approval-card")
    allow = card.get_by_test_id("approve-remember")
    await expect(allow).to_have_text("Allow for this conversation")
    call_id = await card.get_attribute("data-call-id")
    await allow.click()

    chat = page.get_by_test_id("chat")
    await expect(chat.get_by_test_id("final-answer")).to_have_text("Two notes saved.")
    await expect(page.get_by_test_id("approval-card")).to_have_count(0)
    [posted] = console.posted(cid, "confirm")  # one decision, for the first note only
    assert (posted["call_ids"], posted["remember"]) == ([call_id], "conversation")
    assert len(note_rows(activity_settings.data_dir, first)) == 1
    assert len(note_rows(activity_settings.data_dir, second)) == 1
    [grant] = (await call("GET", f"{api.url}/conversations/{quote(cid)}/grants")).json()
    assert (grant["tool"], grant["scope"], grant["by"], grant["used"]) == (
        "create_note", "conversation", "anonymous", 1)
    done = await status_of(api.url, cid)
    assert [(d["approver"], d["grant"]) for d in done["decisions"]] == [
        ("anonymous", None), ("anonymous", grant["id"])]

    # destructive: approved once, never remembered, so not offered
    trigger = script(model, unique("console-no-grant"),
                     ScriptedReply(tool_calls=[tool_call("delete_note", {"note_id": 31337})]),
                     ScriptedReply(content="gone"))
    await page.get_by_test_id("home").click()
    await console.start(f"Delete it ({trigger}).")
    card = page.get_by_test_id("approval-card")
    await expect(card.get_by_test_id("approve")).to_be_visible()
    await expect(card.get_by_test_id("approve-remember")).to_have_count(0)
    assert console.errors == []


async def idle(api_url: str, cid: str) -> bool:
    return (await status_of(api_url, cid))["status"] == "idle"


async def test_console_stream_resumes_after_the_api_restarts(
        api: ApiServer, temporal_address: str, task_queue: str, model: ScriptedModelServer,
        console: Console):
    """The console's API dies while the conversation waits, and the call is approved elsewhere
    meanwhile, so the turn finishes unseen. The console says it is reconnecting, resumes after
    the last offset it saw (Last-Event-ID), and shows every event it missed, once."""
    trigger = unique("console-resume")
    script(model, trigger,
           ScriptedReply(content="I need your approval for this.",
                         tool_calls=[tool_call("create_note",
                                               {"title": unique("R"), "body": "B"})]),
           ScriptedReply(content="Done while you were away."))
    own = await asyncio.to_thread(ApiProcess(temporal_address, task_queue).start)
    try:
        page = console.page
        await page.goto(f"{own.url}/")
        cid = await console.start(f"Note this down ({trigger}).")
        card = page.get_by_test_id("approval-card")
        await expect(card).to_be_visible()
        call_id = await card.get_attribute("data-call-id")
        state = page.get_by_test_id("stream-state")
        await expect(state).to_have_attribute("data-state", "live")
        # The stream has brought the console up to the approval request (the card above comes
        # from the status, which may run ahead of the stream on a loaded machine).
        await expect(page.get_by_test_id("chat").get_by_test_id("tool-card")).to_have_attribute(
            "data-status", "awaiting")

        own.proc.kill()  # the console's API dies mid-stream
        await asyncio.to_thread(own.proc.wait)
        await expect(state).to_have_attribute("data-state", "reconnecting")
        await expect(state).to_have_text("reconnecting…")
        approved = await call("POST", f"{api.url}/conversations/{quote(cid)}/confirm",
                              json={"call_ids": [call_id]})
        assert approved.status_code == 200, approved.text
        await until(lambda: idle(api.url, cid), timeout_s=90,  # while the console is away
                    what="the turn finishing")
        await asyncio.to_thread(own.start)
        await expect(state).to_have_attribute("data-state", "live")

        chat = page.get_by_test_id("chat")
        await expect(chat.get_by_test_id("final-answer")).to_have_text("Done while you were away.")
        # Nothing lost, nothing twice.
        await expect(chat.get_by_test_id("user-message")).to_have_count(1)
        await expect(chat.get_by_test_id("assistant-text")).to_have_text(
            ["I need your approval for this."])
        tool = chat.get_by_test_id("tool-card")
        await expect(tool).to_have_count(1)
        await expect(tool).to_have_attribute("data-status", "ok")
        await expect(tool.get_by_test_id("approver")).to_have_text("anonymous")
        await expect(chat.get_by_test_id("turn-end")).to_have_count(1)
        await expect(page.get_by_test_id("approval-card")).to_have_count(0)
        # Every attempt resumed after the last event seen: the one before the decision.
        events = await events_until(api.url, cid, "turn_finished")
        decided = next(int(e["id"]) for e in events if e["event"] == "decision_taken")
        assert {r.headers.get("last-event-id") for r in console.streams[1:]} == {str(decided - 1)}
        assert console.errors == []
    finally:
        await asyncio.to_thread(own.stop)


async def test_console_answers_questions_and_shows_a_refusal(
        api: ApiServer, model: ScriptedModelServer, console: Console):
    """Each kind of question answered through its form; then a call decided elsewhere while the
    page still shows it: approving it is refused (409), and the page says so."""
    trigger = unique("console-ask")
    script(model, trigger,
           ScriptedReply(tool_calls=[tool_call("ask_input", {"message": "Your name?"})]),
           ScriptedReply(tool_calls=[tool_call("ask_choice", {
               "message": "Which colour?", "options": ["red", "green", "blue"]})]),
           ScriptedReply(tool_calls=[tool_call("ask_multi_choice", {
               "message": "Which days?", "options": ["mon", "tue", "wed"]})]),
           ScriptedReply(tool_calls=[tool_call("ask_confirm", {"message": "Shall I save it?"})]),
           ScriptedReply(content="Noted.",
                         tool_calls=[tool_call("create_note",
                                               {"title": unique("Q"), "body": "x"})]),
           ScriptedReply(content="All done."))
    page = console.page
    await page.goto(f"{api.url}/")
    cid = await console.start(f"Ask me things ({trigger}).")
    form = page.get_by_test_id("answer-form")

    async def question(kind: str, text: str) -> None:
        await expect(form).to_have_attribute("data-kind", kind)
        await expect(form.get_by_test_id("question-text")).to_have_text(text)

    await question("input", "Your name?")
    await form.get_by_test_id("answer-submit").click()  # empty: refused in the page
    await expect(form.get_by_test_id("refusal")).to_contain_text("Write an answer first.")
    await form.get_by_test_id("answer-input").fill("Ada")
    await form.get_by_test_id("answer-submit").click()
    await question("choice", "Which colour?")
    await expect(form.get_by_test_id("answer-option")).to_have_count(3)
    await form.get_by_label("green").check()
    await form.get_by_test_id("answer-submit").click()
    await question("multi_choice", "Which days?")
    await form.get_by_label("mon").check()
    await form.get_by_label("wed").check()
    await form.get_by_test_id("answer-submit").click()
    await question("confirm", "Shall I save it?")
    await form.get_by_test_id("answer-yes").click()
    card = page.get_by_test_id("approval-card")
    await expect(card).to_be_visible()
    await expect(form).to_have_count(0)
    assert console.posted(cid, "answer") == [  # each bound to the question it answers
        {"values": values, "call_id": f"call_{step}_0"} for step, values in
        enumerate([["Ada"], ["green"], ["mon", "wed"], ["yes"]])]
    await expect(page.get_by_test_id("chat").get_by_test_id("answer")).to_have_count(4)

    # Someone else rejects the call while this page still offers it (its status reads are held
    # at the stale answer): the page's approval is refused, visibly.
    stale = await status_of(api.url, cid)
    call_id = stale["pending_confirmations"][0]["call_id"]
    await page.route(f"**/conversations/{quote(cid)}", lambda route: route.fulfill(json=stale))
    rejected = await call("POST", f"{api.url}/conversations/{quote(cid)}/reject",
                          json={"call_ids": [call_id], "reason": "not now"})
    assert rejected.status_code == 200, rejected.text
    await card.get_by_test_id("approve").click()
    refusal = card.get_by_test_id("refusal")
    await expect(refusal).to_be_visible()
    await expect(refusal).to_contain_text("Refused:")
    await page.unroute(f"**/conversations/{quote(cid)}")
    chat = page.get_by_test_id("chat")
    await expect(chat.get_by_test_id("tool-card").filter(has_text="create_note")).to_have_attribute(
        "data-status", "rejected")
    await expect(chat.get_by_test_id("final-answer")).to_have_text("All done.")
    await expect(page.get_by_test_id("status")).to_have_attribute("data-status", "idle")
    # No longer pending, but the refusal stays on screen until dismissed.
    await expect(card).to_have_class(re.compile(r"\bretired\b"))
    await expect(refusal).to_contain_text("Refused:")
    assert console.errors == []


async def test_console_with_tokens(temporal_address: str, task_queue: str,
                                   model: ScriptedModelServer, console: Console):
    """An API with tokens: the console asks for one, keeps it, sends it on every request (the
    stream too), and records its name as the approver. Then a follow-up message, and the end."""
    trigger = unique("console-token")
    script(model, trigger,
           ScriptedReply(tool_calls=[tool_call("create_note",
                                               {"title": unique("K"), "body": "k"})]),
           ScriptedReply(content="First answer."),
           ScriptedReply(content="Second answer."))
    token = unique("tok")
    own = await asyncio.to_thread(
        ApiServer(temporal_address, task_queue, AGENT_API_TOKENS=f"alice:{token}").start)
    try:
        page = console.page
        await page.goto(f"{own.url}/")
        box = page.get_by_test_id("token-box")
        await expect(box).to_be_visible()
        await expect(page.get_by_test_id("principal")).to_have_text("not signed in")
        await page.get_by_test_id("token-input").fill("wrong")
        await page.get_by_test_id("token-save").click()
        await expect(page.get_by_test_id("token-why")).to_contain_text("refused")
        await page.get_by_test_id("token-input").fill(token)
        await page.get_by_test_id("token-save").click()
        await expect(page.get_by_test_id("principal")).to_have_text("signed in as alice · admin")
        await expect(box).to_be_hidden()

        await console.start(f"Note it ({trigger}).")
        await page.reload()  # the token is kept
        await expect(page.get_by_test_id("principal")).to_have_text("signed in as alice · admin")
        await page.get_by_test_id("approval-card").get_by_test_id("approve").click()
        chat = page.get_by_test_id("chat")
        await expect(chat.get_by_test_id("final-answer")).to_have_text("First answer.")
        await expect(chat.get_by_test_id("approver")).to_have_text("alice")

        await page.get_by_test_id("message-input").fill("And once more?")
        await page.get_by_test_id("send").click()
        await expect(chat.get_by_test_id("final-answer")).to_have_text(
            ["First answer.", "Second answer."])
        await expect(chat.get_by_test_id("user-message")).to_have_text(
            [f"Note it ({trigger}).", "And once more?"])

        await page.get_by_test_id("end").click()
        await page.get_by_test_id("end").click()  # the second click confirms
        await expect(page.get_by_test_id("stream-state")).to_have_attribute("data-state", "ended")
        await expect(page.get_by_test_id("status")).to_have_attribute("data-status", "completed")
        await expect(page.get_by_test_id("message-input")).to_be_disabled()
        assert console.streams
        assert {r.headers.get("authorization") for r in console.streams} == {f"Bearer {token}"}
        assert console.errors == []
    finally:
        await asyncio.to_thread(own.stop)


async def started_by(api_url: str, token: str, prompt: str) -> str:
    """A conversation started through the API with `token`, once it waits for an approval."""
    auth = {"Authorization": f"Bearer {token}"}
    started = await call("POST", f"{api_url}/conversations", json={"prompt": prompt}, headers=auth)
    assert started.status_code == 201, started.text
    cid = started.json()["workflow_id"]
    for _ in range(300):
        status = (await call("GET", f"{api_url}/conversations/{quote(cid)}", headers=auth)).json()
        if status["status"] == "waiting_for_confirmation":
            return cid
        await asyncio.sleep(0.1)
    raise AssertionError(f"{cid} did not come to wait for an approval: {status}")


async def test_console_as_a_viewer_offers_nothing_to_do(
        temporal_address: str, task_queue: str, model: ScriptedModelServer, browser: Browser):
    """alice (user) starts a conversation that waits for her approval. vic (viewer) reads it,
    the pending call and the audit trail (who started it, with what), but is offered no control:
    no start form, no approve, reject or edit, no message, no end, and each place says why.
    alice's console offers her the approval, and she gives it."""
    trigger = unique("console-viewer")
    title = unique("V")
    script(model, trigger,
           ScriptedReply(tool_calls=[tool_call("create_note", {"title": title, "body": "v"})]),
           ScriptedReply(content="Noted for alice."))
    alice, vic = unique("tok-a"), unique("tok-v")
    own = await asyncio.to_thread(ApiServer(
        temporal_address, task_queue,
        AGENT_API_TOKENS=f"alice:{alice}:user,vic:{vic}:viewer").start)
    contexts = []
    try:
        prompt = f"Keep a note, please ({trigger})."
        cid = await started_by(own.url, alice, prompt)

        context = await browser.new_context(viewport=VIEWPORT)
        contexts.append(context)
        viewer = Console(await context.new_page())
        page = viewer.page
        await sign_in(page, own.url, vic)
        await expect(page.get_by_test_id("principal-name")).to_have_text("vic")
        await expect(page.get_by_test_id("principal-roles")).to_have_text("viewer")
        await expect(page.get_by_test_id("principal")).to_have_text("signed in as vic · viewer")
        # No conversation to start: the form is disabled, and says why.
        await expect(page.get_by_test_id("new-prompt")).to_be_disabled()
        await expect(page.get_by_test_id("start")).to_be_disabled()
        await expect(page.get_by_test_id("start-denied")).to_have_text(
            "vic (viewer) may read, not start conversations")
        # It is listed (a viewer reads every conversation), but nothing waits for vic.
        item = page.get_by_test_id("conversation-list").locator(f'[data-id="{cid}"]')
        await expect(item).to_contain_text("waits for approval")
        await expect(item).to_contain_text("alice")
        await expect(page.get_by_test_id("inbox-count")).to_have_text("0")
        await expect(page.get_by_test_id("home-inbox")).to_contain_text(
            "vic (viewer) may read every conversation, not decide")

        await item.click()
        await expect(page.get_by_test_id("conversation")).to_have_attribute("data-id", cid)
        await expect(page.get_by_test_id("status")).to_have_attribute(
            "data-status", "waiting_for_confirmation")
        await expect(page.get_by_test_id("facts")).to_contain_text("started by alice")
        await expect(page.get_by_test_id("chat").get_by_test_id("tool-card")).to_have_attribute(
            "data-status", "awaiting")
        card = page.get_by_test_id("approval-card")
        await expect(card.get_by_test_id("approval-tool")).to_have_text("create_note")
        await expect(card.get_by_test_id("approval-args")).to_contain_text(title)
        await expect(card.get_by_test_id("decide-denied")).to_have_text(
            "vic (viewer) may read, not write")
        for control in ("approve", "reject", "edit-args", "reject-reason"):
            await expect(page.get_by_test_id(control)).to_have_count(0)
        await expect(page.get_by_test_id("message-input")).to_be_disabled()
        await expect(page.get_by_test_id("send")).to_be_disabled()
        await expect(page.get_by_test_id("end")).to_be_disabled()
        await expect(page.get_by_test_id("end")).to_have_attribute(
            "title", "vic (viewer) may read, not write")
        await expect(page.get_by_test_id("write-denied")).to_have_text(
            "vic (viewer) may read, not write")

        # The audit trail: who started it, with what, apart from the steps.
        await page.get_by_test_id("tab-audit").click()
        audit = page.get_by_test_id("audit")
        started = audit.locator('[data-testid="audit-row"][data-kind="start"]')
        await expect(started).to_have_count(1)
        await expect(started.get_by_test_id("audit-input")).to_contain_text("started by alice")
        await expect(started.get_by_test_id("audit-by")).to_have_text("alice")
        await expect(started.get_by_test_id("audit-text")).to_have_text(prompt)
        await expect(audit.locator('[data-testid="audit-row"][data-kind="step"]')).to_have_count(0)
        assert viewer.posts == []  # vic's console sent nothing

        # alice's own console offers her the approval; vic's page sees it given.
        context = await browser.new_context(viewport=VIEWPORT)
        contexts.append(context)
        owner = Console(await context.new_page())
        await sign_in(owner.page, own.url, alice)
        await expect(owner.page.get_by_test_id("principal")).to_have_text(
            "signed in as alice · user")
        await expect(owner.page.get_by_test_id("new-prompt")).to_be_enabled()
        await expect(owner.page.get_by_test_id("start-denied")).to_be_hidden()
        await owner.page.get_by_test_id("inbox").locator(f'[data-id="{cid}"]').click()
        await expect(owner.page.get_by_test_id("message-input")).to_be_enabled()
        await expect(owner.page.get_by_test_id("write-denied")).to_be_hidden()
        await owner.page.get_by_test_id("approval-card").get_by_test_id("approve").click()
        await expect(owner.page.get_by_test_id("chat").get_by_test_id("final-answer")).to_have_text(
            "Noted for alice.")
        await expect(page.get_by_test_id("approval-card")).to_have_count(0)
        step = audit.locator('[data-testid="audit-row"][data-kind="step"]')
        await expect(step.get_by_test_id("audit-approver")).to_have_text("alice")
        await page.get_by_test_id("tab-chat").click()
        await expect(page.get_by_test_id("chat").get_by_test_id("final-answer")).to_have_text(
            "Noted for alice.")
        assert viewer.posts == []
        assert viewer.errors == [] and owner.errors == []
    finally:
        for context in contexts:
            await context.close()
        await asyncio.to_thread(own.stop)


async def test_console_under_four_eyes_offers_the_owner_no_approval(
        temporal_address: str, roles_queue: str, model: ScriptedModelServer, browser: Browser):
    """With AGENT_FOUR_EYES=destructive on the worker, alice's console shows her own destructive
    call and why someone else decides it, with no approve button; carol (approver) approves."""
    trigger = unique("console-four-eyes")
    script(model, trigger, ScriptedReply(tool_calls=[tool_call("delete_note", {"note_id": 9})]),
           ScriptedReply(content="Deleted, as carol allowed."))
    alice, carol = unique("tok-a"), unique("tok-c")
    own = await asyncio.to_thread(ApiServer(
        temporal_address, roles_queue,
        AGENT_API_TOKENS=f"alice:{alice}:user,carol:{carol}:approver",
        AGENT_TRACE_URL="http://traces.example/trace/{trace_id}").start)
    contexts = []
    try:
        cid = await started_by(own.url, alice, f"Delete note 9 ({trigger}).")
        pages = {}
        for name, token in (("alice", alice), ("carol", carol)):
            context = await browser.new_context(viewport=VIEWPORT)
            contexts.append(context)
            pages[name] = Console(await context.new_page())
            await sign_in(pages[name].page, own.url, token)
            await pages[name].page.goto(f"{own.url}/#/c/{quote(cid)}")
        page = pages["alice"].page
        card = page.get_by_test_id("approval-card")
        await expect(card.get_by_test_id("approval-tool")).to_have_text("delete_note")
        await expect(card.get_by_test_id("decide-denied")).to_contain_text(
            "four eyes: a destructive call is decided by someone other than you")
        await expect(page.get_by_test_id("approve")).to_have_count(0)
        await expect(page.get_by_test_id("message-input")).to_be_enabled()  # still hers
        # the turn's trace, linked to the viewer AGENT_TRACE_URL names
        status = (await call("GET", f"{own.url}/conversations/{quote(cid)}",
                             headers={"Authorization": f"Bearer {alice}"})).json()
        await expect(page.get_by_test_id("trace-link")).to_have_attribute(
            "href", f"http://traces.example/trace/{status['trace_id']}")
        approver = pages["carol"].page
        await approver.get_by_test_id("approval-card").get_by_test_id("approve").click()
        await expect(page.get_by_test_id("chat").get_by_test_id("final-answer")).to_have_text(
            "Deleted, as carol allowed.")
        assert pages["alice"].posts == [] and pages["alice"].errors == []
    finally:
        for context in contexts:
            await context.close()
        await asyncio.to_thread(own.stop)


async def test_console_shows_why_a_write_is_forbidden(
        temporal_address: str, task_queue: str, model: ScriptedModelServer, console: Console):
    """bob (approver) may decide alice's conversation, not message or end it: the console offers
    the approval and says why the rest is not offered. Then bob is made a viewer while his page
    is open: the approval it still offers is refused (403), and the page shows the API's reason."""
    trigger = unique("console-forbidden")
    script(model, trigger,
           ScriptedReply(tool_calls=[tool_call("create_note",
                                               {"title": unique("F"), "body": "f"})]),
           ScriptedReply(content="Done."))
    alice, bob = unique("tok-a"), unique("tok-b")
    api = ApiServer(temporal_address, task_queue,
                     AGENT_API_TOKENS=f"alice:{alice}:user,bob:{bob}:approver")
    await asyncio.to_thread(api.start)
    try:
        cid = await started_by(api.url, alice, f"Note it ({trigger}).")
        page = console.page
        await sign_in(page, api.url, bob)
        await expect(page.get_by_test_id("principal")).to_have_text("signed in as bob · approver")
        await expect(page.get_by_test_id("new-prompt")).to_be_enabled()
        await page.get_by_test_id("inbox").locator(f'[data-id="{cid}"]').click()
        card = page.get_by_test_id("approval-card")
        await expect(card.get_by_test_id("approve")).to_be_enabled()
        await expect(card.get_by_test_id("decide-denied")).to_have_count(0)
        why = ("bob (approver) may not send messages to or end this conversation: only its "
               "owner (alice) or an admin may")
        await expect(page.get_by_test_id("write-denied")).to_have_text(why)
        await expect(page.get_by_test_id("message-input")).to_be_disabled()
        await expect(page.get_by_test_id("end")).to_be_disabled()

        # bob is a viewer now; his page, loaded as an approver, still offers the approval.
        await asyncio.to_thread(api.stop)
        api.env["AGENT_API_TOKENS"] = f"alice:{alice}:user,bob:{bob}:viewer"
        await asyncio.to_thread(api.start)
        await expect(page.get_by_test_id("stream-state")).to_have_attribute("data-state", "live")
        await card.get_by_test_id("approve").click()
        refusal = card.get_by_test_id("refusal")
        await expect(refusal).to_be_visible()
        await expect(refusal).to_have_text("Not allowed: bob (viewer) may read, not write")
        await expect(refusal).to_have_attribute("data-kind", "refused")
        await expect(card.get_by_test_id("approve")).to_be_enabled()  # to try again, or not
        assert len(console.posted(cid, "confirm")) == 1
        status = await call("GET", f"{api.url}/conversations/{quote(cid)}",
                            headers={"Authorization": f"Bearer {alice}"})
        assert status.json()["status"] == "waiting_for_confirmation"  # nothing was decided
        assert console.errors == []
    finally:
        await asyncio.to_thread(api.stop)


async def test_console_shows_a_subagents_events_under_the_call_that_started_it(
        api: ApiServer, client: Client, agents_queue: str,
        model: ScriptedModelServer, console: Console):
    parent = delegating(model, "console-sub", "researcher", "c1", [
        ScriptedReply(tool_calls=[tool_call("get_weather", {"location": "Paris"})]),
        ScriptedReply(content="Paris is mild.")], "The researcher says: {last_tool}")
    handle = await start(client, agents_queue, parent)
    page = console.page
    await page.goto(f"{api.url}/#/c/{quote(handle.id)}")
    own = page.locator('[data-testid="chat"] > [data-testid="tool-card"]')  # the parent's calls
    await expect(own).to_have_attribute("data-call-id", "c1")
    sub = own.get_by_test_id("subagent")
    await expect(sub).to_have_attribute("data-agent", "researcher")
    await expect(sub).to_have_attribute("data-conversation-id", f"{handle.id}/c1")
    await expect(sub.get_by_test_id("agent-name")).to_have_text("researcher")
    await expect(sub.get_by_test_id("user-message")).to_have_text(
        re.compile(r"^Task\s*console-sub-child-\w+: go$"))  # the task its parent gave it
    weather = sub.get_by_test_id("tool-card")
    await expect(weather.get_by_test_id("tool-name")).to_have_text("get_weather")
    await expect(weather).to_have_attribute("data-status", "ok")
    await expect(sub.get_by_test_id("final-answer")).to_have_text("Paris is mild.")
    await expect(own).to_have_attribute("data-status", "ok")
    await expect(page.locator('[data-testid="chat"] > [data-testid="final-answer"]')).to_have_text(
        "The researcher says: Paris is mild.")
    own_messages = page.locator('[data-testid="chat"] > [data-testid="user-message"]')
    await expect(own_messages).to_have_count(1)
    assert console.errors == []


def sse(event: dict, offset: int | None = None) -> str:
    return (f"id: {offset}\n" if offset is not None else "") + \
        f"event: {event['kind']}\ndata: {json.dumps(event)}\n\n"


async def test_console_shows_a_running_tools_progress_on_its_card(
        api: ApiServer, console: Console):
    """A stream played to the page: a tool's progress (`tool_progress`) shows on its card, the
    conversation's own and a subagent's alike."""
    cid = unique("progress")
    child = {"agent": "researcher", "conversation_id": f"{cid}/c1"}
    body = "".join([
        sse({"kind": "turn_started", "turn": 1, "text": "Go"}, 0),
        sse({"kind": "tool_started", "turn": 1, "step": 1, "call_id": "c1",
             "tool": "agent__researcher", "args": {"task": "look"}}, 1),
        sse({"kind": "child_started", "turn": 1, "step": 1, "call_id": "c1", "tool": "researcher",
             "text": f"{cid}/c1"}, 2),
        sse({"kind": "tool_started", "turn": 1, "step": 1, "call_id": "c2", "tool": "count_up",
             "args": {"to": 3}}, 3),
        sse({"kind": "tool_started", "turn": 1, "step": 1, "call_id": "c2", "tool": "fetch",
             **child}),  # the subagent's call ids are its own: the same id is another call
        sse({"kind": "tool_progress", "turn": 1, "step": 1, "call_id": "c2", "tool": "fetch",
             "text": "page 1 of 2", **child}),
        sse({"kind": "tool_progress", "turn": 1, "step": 1, "call_id": "c2", "tool": "count_up",
             "text": "2 of 3"}, 4),
        sse({"kind": "tool_progress", "turn": 1, "step": 1, "call_id": "c2", "tool": "fetch",
             "text": "page 2 of 2", **child}),
        "event: end\ndata: {}\n\n"])
    page = console.page
    await page.route(f"**/conversations/{cid}/events", lambda route: route.fulfill(
        status=200, headers={"content-type": "text/event-stream"}, body=body))
    await page.goto(f"{api.url}/#/c/{cid}")
    counting = page.locator('[data-testid="chat"] > [data-testid="tool-card"][data-call-id="c2"]')
    await expect(counting.get_by_test_id("tool-name")).to_have_text("count_up")
    await expect(counting.get_by_test_id("tool-progress")).to_have_text("2 of 3")
    await expect(counting).to_have_attribute("data-status", "running")
    fetching = page.locator(
        '[data-call-id="c1"] [data-testid="subagent"] [data-testid="tool-card"]')
    await expect(fetching.get_by_test_id("tool-name")).to_have_text("fetch")
    await expect(fetching.get_by_test_id("tool-progress")).to_have_text("page 2 of 2")
    assert console.errors == []


VALIDATION_CASES = [
    # (schema, value, the errors expected, as substrings; [] for valid)
    ({"type": "object", "properties": {"n": {"type": "integer", "minimum": 1, "maximum": 5}},
      "required": ["n"], "additionalProperties": False}, {"n": 3}, []),
    ({"type": "object", "properties": {"n": {"type": "integer"}}}, {"n": 2.5},
     ["n: must be integer, not number"]),
    ({"type": "object", "properties": {"n": {"type": "number", "minimum": 1}}}, {"n": 0},
     ["n: must be ≥ 1"]),
    ({"type": "object", "properties": {"n": {"type": "number", "maximum": 1}}}, {"n": 2},
     ["n: must be ≤ 1"]),
    ({"type": "object", "properties": {}, "additionalProperties": False}, {"x": 1},
     ["x: is not an argument"]),
    ({"type": "object", "required": ["a", "b"]}, {"a": None}, ["b: is required"]),
    ({"type": "object", "properties": {"s": {"type": "string", "maxLength": 3}}}, {"s": "abcd"},
     ["s: must be at most 3"]),
    ({"type": "object", "properties": {"s": {"enum": ["a", "b"]}}}, {"s": "c"},
     ['s: must be one of "a", "b"']),
    ({"type": "object", "properties": {"l": {"type": "array", "items": {"type": "boolean"}}}},
     {"l": [True, "no"]}, ["l[1]: must be boolean, not string"]),
    ({"type": "object", "properties": {"v": {"type": "null"}}}, {"v": 0},
     ["v: must be null, not integer"]),
    ({"type": "object", "properties": {"v": {"anyOf": [{"type": "integer"}, {"type": "null"}]}}},
     {"v": None}, []),
    ({"type": "object", "properties": {"o": {"type": "object", "properties": {
        "deep": {"type": "string", "minLength": 2}}}}}, {"o": {"deep": "x"}},
     ["o.deep: must be at least 2 characters long"]),
    ({"type": "object", "properties": {"s": {"$ref": "#/$defs/S"}},
      "$defs": {"S": {"type": "string"}}},
     {"s": 1}, ["s: must be string, not integer"]),
]


async def test_console_validator(api: ApiServer, console: Console):
    await console.page.goto(f"{api.url}/")
    for schema, value, expected in VALIDATION_CASES:
        errors = await console.page.evaluate("([s, v]) => window.agentConsole.validate(s, v)",
                                             [schema, value])
        assert len(errors) == len(expected), (schema, value, errors)
        for got, want in zip(errors, expected, strict=True):
            assert want in got, (schema, value, errors)
    assert console.errors == []


async def test_the_console_takes_back_a_calls_text_and_shows_why_a_turn_failed(
        api: ApiServer, client: Client, task_queue: str, model: ScriptedModelServer,
        console: Console):
    """In a real browser: the recorded prose-then-fence reply streams its JSON as text, then
    the console keeps only the words and shows the call waiting for approval; a turn whose
    call could not be read says why under it."""
    trigger = script(model, unique("console-prose"), recorded("prose_then_fence"))
    handle = await start(client, task_queue, trigger)
    page = console.page
    await page.goto(f"{api.url}/#/c/{quote(handle.id)}")
    card = page.get_by_test_id("approval-card")
    await expect(card).to_contain_text("create_note")
    words = page.get_by_test_id("assistant-text")
    await expect(words).to_contain_text("Let's go through this step-by-step")
    assert '"arguments"' not in await words.inner_text()
    await handle.signal(ConversationWorkflow.end, EndRequest())

    trigger = script(model, unique("console-unread"), recorded("fence_cut_at_max_tokens"),
                     recorded("fence_cut_at_max_tokens"))
    handle = await start(client, task_queue, trigger, one_shot=True)
    await page.goto(f"{api.url}/#/c/{quote(handle.id)}")
    await expect(page.get_by_test_id("turn-error")).to_contain_text(
        "the model wrote a call of get_weather")
    assert console.errors == []


async def test_console_shows_a_turn_waiting_for_its_owner_s_share_then_going_on(
        client: Client, temporal_address: str, activity_settings, model: ScriptedModelServer,
        console: Console):
    """Under AGENT_OWNER_LIMITS (one running turn an owner), a second conversation's turn waits
    while the first waits for approval: the page says why, and that it goes on once the
    first's turn ended."""
    queue = unique("console-limits")
    settings = dataclasses.replace(activity_settings, owner_limits=OwnerLimitsFile.model_validate(
        {"default": {"running_turns": 1}}))
    waits = script(model, unique("console-slot"), ScriptedReply(tool_calls=[tool_call(
        "create_note", {"title": "t", "body": "b"})]), ScriptedReply(content="Noted."))
    quick = script(model, unique("console-queued"), ScriptedReply(content="My turn came."))
    api = ApiServer(temporal_address, queue).start()
    try:
        async with httpx.AsyncClient(timeout=10) as http, build_worker(
                client, queue, settings, http, registry_with_test_tools()):
            first = await start(client, queue, waits, owner="anonymous")  # the console's owner
            await until(lambda: status_is(api.url, first.id, "waiting_for_confirmation"))
            page = console.page
            await page.goto(f"{api.url}/")
            await console.start(f"Answer when you can ({quick}).")
            chat = page.get_by_test_id("chat")
            held = chat.get_by_test_id("chat-note").filter(has_text="owner's share")
            await expect(held.first).to_have_text(
                "Waiting for the owner's share: queued behind 1 running turn(s) of anonymous "
                "(at most 1 at once)")
            await expect(page.get_by_test_id("activity")).to_have_text(
                "waiting for the owner's share")
            pending = (await status_of(api.url, first.id))["pending_confirmations"][0]
            await call("POST", f"{api.url}/conversations/{first.id}/confirm",
                       json={"call_ids": [pending["call_id"]]})
            await expect(held.last).to_have_text("The owner's share allows it: going on.")
            await expect(chat.get_by_test_id("final-answer")).to_have_text("My turn came.")
            assert console.errors == []
    finally:
        api.stop()


async def status_is(api_url: str, cid: str, status: str) -> bool:
    return (await status_of(api_url, cid)).get("status") == status
