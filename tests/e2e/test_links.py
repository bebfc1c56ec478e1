"""One-time approval links at the seams: a link decides the exact call it was made for (never a
subagent's look-alike, never a later call that reuses its id), through the conversation that
owns it, once; four eyes holds through links (a link that names nobody, or the owner, decides
nothing under it; an addressee decides as themself, and only if their role may); a correctly
signed link with odd claims is refused, not a 500; and the pages work in a real browser, on a
phone too."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import AsyncIterator, Iterator

import httpx
import pytest
import pytest_asyncio
from playwright.async_api import Browser, expect
from temporalio.client import Client, WorkflowUpdateFailedError

from durable_react_agent.activities.profiles import AgentProfile, Profiles
from durable_react_agent.activities.settings import ActivitySettings
from durable_react_agent.contract import ConfirmRequest, ConversationStatus, SayRequest
from durable_react_agent.rules.links import LinkClaims, read_link, sign_link
from durable_react_agent.testing import ScriptedModelServer, ScriptedReply, ScriptedToolCall
from durable_react_agent.workflows.conversation import ConversationWorkflow
from tests.api_support import ApiServer
from tests.browser_support import PHONE
from tests.helpers import note_rows, reaches, replay, script, settled, start, unique
from tests.webhook_support import LINKS, Receiver, worker_with_links

TOKENS = "alice:tok-a:user,carol:tok-c:approver,vic:tok-v:viewer"
ADDRESSEES = (None, "carol", "vic", "alice")  # one webhook each: whom its links decide as
WRITER = AgentProfile(description="Writes notes", system_prompt="You write notes.",
                      tools=["create_note"], max_steps=3)


@pytest.fixture(scope="module")
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.close()


@pytest_asyncio.fixture(scope="module")
async def linked(client: Client, activity_settings: ActivitySettings, receiver: Receiver,
                 temporal_address: str) -> AsyncIterator[tuple[str, ApiServer]]:
    """A worker under four eyes for destructive calls, with a writer subagent, whose approvals
    reach one webhook per addressee; and an API with tokens serving the links."""
    settings = dataclasses.replace(activity_settings, four_eyes=("destructive",),
                                   profiles=Profiles({"writer": WRITER}))
    async with worker_with_links(client, settings, receiver, temporal_address, ADDRESSEES,
                                 TOKENS) as linked:
        yield linked


async def links_of(receiver: Receiver, conversation: str, call_id: str,
                   deliveries: int = len(ADDRESSEES)) -> dict[str | None, dict[str, str]]:
    """The approve and reject links of each delivery of a call's approval, by addressee (the
    newest delivery of each, when the call's id came again)."""
    deadline = time.monotonic() + 30
    while True:
        found: dict[str | None, dict[str, str]] = {}
        for d in receiver.events("approval_requested"):
            body = d["json"]
            if body["conversation_id"] == conversation and body["call_id"] == call_id:
                to = claims_of(body["approve_url"]).to
                found[to] = {"approve": body["approve_url"], "reject": body["reject_url"]}
        if len(found) >= deliveries:
            return found
        assert time.monotonic() < deadline, f"no links for {conversation} {call_id}: {found}"
        await asyncio.sleep(0.05)


def claims_of(url: str) -> LinkClaims:
    return read_link(LINKS, url.rsplit("/", 1)[1], time.time())


def writes(title: str, call_id: str) -> ScriptedReply:
    return ScriptedReply(tool_calls=[ScriptedToolCall(
        name="create_note", arguments={"title": title, "body": "b"}, id=call_id)])


async def pending_refs(handle) -> list[str]:
    status: ConversationStatus = await handle.query(ConversationWorkflow.status)
    return [p.ref or p.call_id for p in status.pending_confirmations]


async def until_pending(handle, ref: str, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while ref not in await pending_refs(handle):
        assert time.monotonic() < deadline, f"{ref} never waited: {await pending_refs(handle)}"
        await asyncio.sleep(0.05)


async def test_a_link_decides_only_its_own_call_not_a_subagents_look_alike(
        client: Client, linked, receiver: Receiver, model: ScriptedModelServer,
        activity_settings: ActivitySettings):
    """The parent calls create_note(T) as `dup`, approved by its link; then a writer subagent
    calls create_note(T) as `dup` too. The parent's link, posted again, must not approve the
    child's call: only the child's own link (or a person) does."""
    queue, _ = linked
    title = unique("look-alike")
    child = script(model, unique("dup-child"), writes(title, "dup"), ScriptedReply(content="ok"))
    parent = script(model, unique("dup-parent"), writes(title, "dup"),
                    ScriptedReply(tool_calls=[ScriptedToolCall(
                        name="agent__writer", arguments={"task": f"{child}: go"}, id="w")]),
                    ScriptedReply(content="done"))
    handle = await start(client, queue, parent, owner="alice")
    parents = await links_of(receiver, handle.id, "dup")
    async with httpx.AsyncClient(timeout=30) as http:
        assert (await http.post(parents[None]["approve"])).status_code == 200
        await until_pending(handle, "w/dup")
        again = await http.post(parents[None]["approve"])
        assert again.status_code == 409, again.text
        assert "no longer waiting" in again.text
        assert await pending_refs(handle) == ["w/dup"]  # the child's call still waits
        assert len(note_rows(activity_settings.data_dir, title)) == 1
        # Nor does a link from before tickets show the child's call as the one it decides.
        legacy = sign_link(LINKS, claims_of(parents[None]["approve"]).model_copy(
            update={"t": None}))
        page = await http.get(f"{parents[None]['approve'].rsplit('/links/', 1)[0]}/links/{legacy}")
        assert page.status_code == 409 and "no longer waiting" in page.text
        # The child's own delivery names the child's conversation: its link decides its call.
        childs = await links_of(receiver, f"{handle.id}/w", "dup")
        assert claims_of(childs[None]["approve"]).c == f"{handle.id}/w"
        assert (await http.post(childs[None]["approve"])).status_code == 200
    done = await reaches(handle, "idle", timeout_s=60)  # the child's report comes a moment later
    assert done.final_answer == "done", done
    assert len(note_rows(activity_settings.data_dir, title)) == 2  # one per approval
    await replay(handle, "link_decides_its_own_call")


async def test_a_link_does_not_decide_a_later_call_that_reuses_its_id(
        client: Client, linked, receiver: Receiver, model: ScriptedModelServer,
        activity_settings: ActivitySettings):
    """A conversation remembers the latest 128 call ids; a link lives a day. After 128 other
    calls, a model may use `r1` again for the very same write: the old link is not for it."""
    queue, _ = linked
    title = unique("reused-id")
    reads = [ScriptedReply(tool_calls=[ScriptedToolCall(name="list_notes", arguments={"query": f"{title} {step} {i}"},
                                                        id=f"read_{step}_{i}") for i in range(64)])
             for step in range(2)]
    trigger = script(model, unique("reuse"), writes(title, "r1"), *reads,
                     ScriptedReply(content="first"), writes(title, "r1"),
                     ScriptedReply(content="second"))
    handle = await start(client, queue, trigger, owner="alice", max_steps=6)
    old = (await links_of(receiver, handle.id, "r1"))[None]
    async with httpx.AsyncClient(timeout=30) as http:
        assert (await http.post(old["approve"])).status_code == 200
        assert (await settled(handle, timeout_s=60)).final_answer == "first"
        await handle.execute_update(ConversationWorkflow.send_message,
                                    SayRequest(text=f"{trigger} again", request_id=unique("say")))
        await until_pending(handle, "r1")
        status = await handle.query(ConversationWorkflow.status)
        assert status.pending_confirmations[0].args_hash == claims_of(old["approve"]).h
        for url in (old["approve"], old["reject"]):  # the same id and args, another call
            assert (await http.get(url)).status_code == 409
            assert (await http.post(url)).status_code == 409
        assert await pending_refs(handle) == ["r1"]
        assert len(note_rows(activity_settings.data_dir, title)) == 1
        new = await links_of(receiver, handle.id, "r1")  # the new call's own links decide it
        assert claims_of(new[None]["approve"]).t != claims_of(old["approve"]).t
        assert (await http.post(new[None]["approve"])).status_code == 200
    assert (await settled(handle, turn=2, timeout_s=60)).final_answer == "second"
    assert len(note_rows(activity_settings.data_dir, title)) == 2


async def test_four_eyes_holds_through_links(
        client: Client, linked, receiver: Receiver, model: ScriptedModelServer):
    """Alice's destructive call, under four eyes: her own link, one naming nobody and a
    viewer's decide nothing (GET and POST); the conversation itself refuses a decision that
    names nobody; carol's link decides, as carol."""
    queue, api = linked
    trigger = script(model, unique("four-eyes-link"),
                     ScriptedReply(tool_calls=[ScriptedToolCall(
                         name="delete_note", arguments={"note_id": 987654}, id="del")]),
                     ScriptedReply(content="deleted"))
    handle = await start(client, queue, trigger, owner="alice")
    links = await links_of(receiver, handle.id, "del")
    async with httpx.AsyncClient(timeout=30) as http:
        for to, why in ((None, "four eyes"), ("alice", "four eyes"),
                        ("vic", "vic may not decide")):
            page = await http.get(links[to]["approve"])
            assert page.status_code == 403 and why in page.text and "<form" not in page.text
            refused = await http.post(links[to]["approve"])
            assert refused.status_code == 403 and why in refused.text, (to, refused.text)
        status = await handle.query(ConversationWorkflow.status)
        assert [p.ref for p in status.pending_confirmations] == ["del"] and not status.decisions
        # Past the API: the conversation refuses an approver that names no person.
        with pytest.raises(WorkflowUpdateFailedError):
            await handle.execute_update(ConversationWorkflow.decide_confirm, ConfirmRequest(
                request_id=unique("nobody"), call_ids=["del"], approver="link"))
        assert (await http.post(links["carol"]["approve"])).status_code == 200
    done = await settled(handle)
    assert [(d.approved, d.approver) for d in done.decisions] == [(True, "carol")]
    await replay(handle, "four_eyes_through_links")


async def test_odd_links_are_refused_never_a_500(
        client: Client, linked, receiver: Receiver, model: ScriptedModelServer):
    queue, api = linked
    trigger = script(model, unique("odd-links"), writes(unique("odd"), "odd"),
                     ScriptedReply(content="done"))
    handle = await start(client, queue, trigger, owner="alice")
    links = await links_of(receiver, handle.id, "odd")
    claims = claims_of(links[None]["approve"])
    odd = [{**claims.model_dump(), "c": 5}, {**claims.model_dump(), "a": "delete"},
           {**claims.model_dump(), "x": "tomorrow"}, {**claims.model_dump(), "k": ["odd"]},
           {"c": handle.id}, ["not", "claims"], {**claims.model_dump(), "to": "x" * 100}]
    async with httpx.AsyncClient(base_url=api.url, timeout=30) as http:
        for bad in odd:
            token = sign_link(LINKS, bad)  # correctly signed, oddly claimed
            for method in ("GET", "POST"):
                answer = await http.request(method, f"/links/{token}")
                assert answer.status_code == 403 and "not valid" in answer.text, (bad, answer.text)
        # A link for other arguments (they changed since it was made) shows nothing to decide.
        other = sign_link(LINKS, claims.model_copy(update={"h": "sha256:" + "0" * 64}))
        page = await http.get(f"/links/{other}")
        assert page.status_code == 409 and "arguments" in page.text and "<form" not in page.text
        # Addressed to someone whose role may not decide (a viewer): nothing, GET or POST.
        for method in ("GET", "POST"):
            answer = await http.request(method, links["vic"]["approve"])
            assert answer.status_code == 403 and "vic may not decide" in answer.text
        # A browser that keeps its referrer to itself posts the form with `Origin: null`: the
        # signed link is the credential here, so that is no cross-site request (another site's
        # origin still is).
        page = await http.get(links[None]["approve"])
        assert page.headers["referrer-policy"] == "same-origin"
        assert (await http.post(links["carol"]["approve"], headers={
            "Origin": "https://evil.example"})).status_code == 403
        # A link from before tickets (no `t`) still decides its own call, once.
        legacy = sign_link(LINKS, claims.model_copy(update={"t": None, "a": "reject"}))
        assert (await http.post(f"/links/{legacy}", headers={"Origin": "null"})).status_code == 200
        assert (await http.post(f"/links/{legacy}")).status_code == 409
    done = await settled(handle)
    assert [(d.approved, d.approver) for d in done.decisions] == [(False, "link")]


# ----- in a real browser: the link's own page, its form, its answer -----

async def test_a_link_approves_in_chromium_and_rejects_on_a_phone(
        client: Client, linked, receiver: Receiver, model: ScriptedModelServer, browser: Browser,
        activity_settings: ActivitySettings):
    queue, _ = linked
    titles = [unique("browser-yes"), unique("browser-no")]
    handles = []
    for n, title in enumerate(titles):
        trigger = script(model, unique("browser-link"), writes(title, f"b{n}"),
                         ScriptedReply(content=f"done {n}"))
        handles.append(await start(client, queue, trigger, owner="alice"))
    desktop = await browser.new_context(viewport={"width": 1280, "height": 800})
    phone = await browser.new_context(**PHONE)
    try:
        # Desktop: open the approve link as a mail client would, read it, click Approve.
        page = await desktop.new_page()
        url = (await links_of(receiver, handles[0].id, "b0"))[None]["approve"]
        await page.goto(url)
        await expect(page.get_by_role("heading")).to_have_text("Approve create_note?")
        await expect(page.locator("pre")).to_contain_text(titles[0])
        await page.get_by_role("button", name="Approve").click()
        await expect(page.get_by_role("heading")).to_have_text("create_note approved")
        assert (await settled(handles[0])).final_answer == "done 0"
        assert len(note_rows(activity_settings.data_dir, titles[0])) == 1
        await page.goto(url)  # used: it says so, and offers nothing
        await expect(page.locator("body")).to_contain_text("no longer waiting")
        assert await page.get_by_role("button").count() == 0

        # Phone: the reject link, read and tapped on a 390 px touch screen.
        page = await phone.new_page()
        await page.goto((await links_of(receiver, handles[1].id, "b1"))[None]["reject"])
        button = page.get_by_role("button", name="Reject")
        await expect(button).to_be_in_viewport()
        assert await page.evaluate("document.documentElement.scrollWidth") <= 390
        await button.tap()
        await expect(page.get_by_role("heading")).to_have_text("create_note rejected")
    finally:
        await desktop.close()
        await phone.close()
    done = await settled(handles[1])
    assert [(d.approved, d.approver) for d in done.decisions] == [(False, "link")]
    assert note_rows(activity_settings.data_dir, titles[1]) == []
