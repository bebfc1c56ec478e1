"""Every way a person decides, against every rule a decision is held to: one table. A channel
is a row of `CHANNELS` (what it can carry: `can`, and whom it can act as: `people`); a rule is
a row of `RULES` (what it needs of a channel). Each cell that a channel can express runs a real
conversation on a worker under four eyes for destructive calls, with subagents, webhooks and
one-time links, and an API with roles. A cell a channel cannot express is not run: the CLI
carries no hashes and no roles, an Update goes to one conversation, a link decides one call as
its addressee, the console shows what it shows.

Channels: the CLI (a signal), an Update, REST, an AG-UI resume, a one-time link, the console in
chromium, and A2A, on which an agent sees a write wait and never decides it. Rules: four eyes; the arguments seen; look-alike ids across parent, child and
grandchild; a request acting once; stale decisions; a decision over several conversations
whole or not at all; roles; an approval remembered (a grant: a link decides one call only)."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import httpx
import pytest
import pytest_asyncio
from a2a.client import ClientConfig, create_client
from a2a.types import GetTaskRequest, Message, Part, Role, SendMessageRequest, TaskState
from ag_ui.core import EventType
from playwright.async_api import Browser, expect
from temporalio.client import Client, WorkflowUpdateFailedError

from durable_react_agent.activities.profiles import AgentProfile, Profiles
from durable_react_agent.activities.settings import ActivitySettings
from durable_react_agent.contract import (
    ConfirmRequest,
    ConversationStatus,
    RejectRequest,
    SayRequest,
)
from durable_react_agent.contract.policy import RevokeRequest
from durable_react_agent.rules.links import read_link, sign_link
from durable_react_agent.testing import ScriptedModelServer, ScriptedReply, ScriptedToolCall
from durable_react_agent.workflows.conversation import ConversationWorkflow
from tests.api_support import AGUI_EVENTS, ROOT, ApiServer, sse_events
from tests.helpers import note_rows, script, start, unique, until
from tests.webhook_support import LINKS, Receiver, worker_with_links

TOKENS = {"alice": "tok-a", "bob": "tok-b", "carol": "tok-c", "vic": "tok-v"}
ROLES = {"alice": "user", "bob": "user", "carol": "approver", "vic": "viewer"}
ADDRESSEES = (None, "alice", "carol", "vic")  # a webhook each: whom its links decide as
STALE_HASH = "sha256:" + "0" * 64
PROFILES = Profiles({
    "writer": AgentProfile(description="Writes notes", system_prompt="You write notes.",
                           tools=["create_note", "delete_note"], max_steps=3),
    "manager": AgentProfile(description="Has notes written", system_prompt="You delegate.",
                            tools=["writer"], max_steps=3)})


# ----- the place: a worker, a receiver of its approvals' links, an API with roles -----

@dataclass
class Desk:
    client: Client
    queue: str
    api: ApiServer
    receiver: Receiver
    model: ScriptedModelServer
    data_dir: Any
    temporal: str
    browser: Browser | None = None


@pytest.fixture(scope="module")
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.close()


@pytest_asyncio.fixture(scope="module")
async def place(client: Client, activity_settings: ActivitySettings, receiver: Receiver,
                temporal_address: str) -> AsyncIterator[tuple[str, ApiServer]]:
    settings = dataclasses.replace(activity_settings, profiles=PROFILES, four_eyes=("destructive",))
    tokens = ",".join(f"{n}:{t}:{ROLES[n]}" for n, t in TOKENS.items())
    async with worker_with_links(client, settings, receiver, temporal_address, ADDRESSEES,
                                 tokens) as place:
        yield place


# ----- what waits: the calls a rule puts before the channel -----

@dataclass(frozen=True)
class Call:
    top: str  # the conversation the person looks at
    owner: str  # the conversation that owns the call
    call_id: str  # its id there
    ref: str  # its name from `top`
    title: str | None = None  # of the note it writes


async def waiting(desk: Desk, top: str, ref: str) -> ConversationStatus:
    deadline = time.monotonic() + 60
    while True:
        status = await desk.client.get_workflow_handle(top).query(ConversationWorkflow.status)
        if any((p.ref or p.call_id) == ref for p in status.pending_confirmations):
            return status
        assert time.monotonic() < deadline, f"{ref} never waited in {top}: {status}"
        await asyncio.sleep(0.05)


def calls(tool: str, title: str, call_id: str) -> ScriptedReply:
    args = {"title": title, "body": "b"} if tool == "create_note" else {"note_id": 808080}
    return ScriptedReply(tool_calls=[ScriptedToolCall(name=tool, arguments=args, id=call_id)])


def delegates(profile: str, task: str, call_id: str) -> ScriptedToolCall:
    return ScriptedToolCall(name=f"agent__{profile}", arguments={"task": f"{task}: go"},
                            id=call_id)


async def one_call(desk: Desk, tool: str = "create_note") -> Call:
    """Alice's conversation, waiting for one call."""
    title = unique("cell")
    trigger = script(desk.model, unique("one"), calls(tool, title, "c1"),
                     ScriptedReply(content="done"))
    handle = await start(desk.client, desk.queue, trigger, owner="alice")
    await waiting(desk, handle.id, "c1")
    return Call(handle.id, handle.id, "c1", "c1", title)


async def look_alikes(desk: Desk) -> Call:
    """The top conversation's `dup` (decided by carol), then a grandchild's `dup`, same args,
    waiting (through a manager `m` and a writer `w`): `m/w/dup` from the top."""
    title = unique("alike")
    writer = script(desk.model, unique("w"), calls("create_note", title, "dup"),
                    ScriptedReply(content="written"))
    manager = script(desk.model, unique("m"), ScriptedReply(tool_calls=[
        delegates("writer", writer, "w")]), ScriptedReply(content="managed"))
    top = script(desk.model, unique("top"), calls("create_note", title, "dup"),
                 ScriptedReply(tool_calls=[delegates("manager", manager, "m")]),
                 ScriptedReply(content="done"))
    handle = await start(desk.client, desk.queue, top, owner="alice")
    await waiting(desk, handle.id, "dup")
    own = Call(handle.id, handle.id, "dup", "dup", title)
    assert await Update().decide(desk, [own], True, "carol")
    await waiting(desk, handle.id, "m/w/dup")
    return Call(handle.id, f"{handle.id}/m/w", "dup", "m/w/dup", title)


async def two_parts(desk: Desk) -> list[Call]:
    """Two writers waiting at once: p1's note (sensitive), p2's delete (destructive)."""
    title = unique("part")
    kids = [script(desk.model, unique("kid"), calls(tool, title, "call_0"),
                   ScriptedReply(content="ok")) for tool in ("create_note", "delete_note")]
    top = script(desk.model, unique("parts"), ScriptedReply(tool_calls=[
        delegates("writer", kid, f"p{n}") for n, kid in enumerate(kids, 1)]),
        ScriptedReply(content="done"))
    handle = await start(desk.client, desk.queue, top, owner="alice")
    for ref in ("p1/call_0", "p2/call_0"):
        await waiting(desk, handle.id, ref)
    return [Call(handle.id, f"{handle.id}/p{n}", "call_0", f"p{n}/call_0", title)
            for n in (1, 2)]


async def decisions(desk: Desk, call: Call) -> list[tuple[bool, str]]:
    """What the call's own conversation recorded of it."""
    status = await desk.client.get_workflow_handle(call.owner).query(ConversationWorkflow.status)
    history = await desk.client.get_workflow_handle(call.owner).query(ConversationWorkflow.history)
    recorded = [d for d in status.decisions if d.call_id == call.call_id] or [
        a.decision for r in history for a in r.actions
        if a.call_id == call.call_id and a.decision is not None]
    return [(d.approved, d.approver) for d in recorded]


async def still_waiting(desk: Desk, call: Call) -> None:
    status = await desk.client.get_workflow_handle(call.owner).query(ConversationWorkflow.status)
    assert [p.call_id for p in status.pending_confirmations if p.conversation_id is None] == [
        call.call_id], status
    assert await decisions(desk, call) == []


async def decided(desk: Desk, call: Call, expected: list[tuple[bool, str]]) -> None:
    deadline = time.monotonic() + 30
    while (got := await decisions(desk, call)) != expected:
        assert time.monotonic() < deadline, f"{call.ref}: {got} != {expected}"
        await asyncio.sleep(0.05)


# ----- the channels -----

class Channel:
    name = ""
    decides = True  # a person's decision travels on it (A2A's agents decide nothing)
    can: frozenset[str] = frozenset()  # "seen", "many", "repeat", "roles", "remember"
    people: frozenset[str | None] = frozenset({"alice", "bob", "carol", "vic", None})

    async def decide(self, desk: Desk, targets: list[Call], approve: bool, as_: str | None,
                     seen: str | None = None, remember: str | None = None) -> bool:
        """Decide the calls as `as_` (`seen`: the hash the person saw, when not the call's;
        `remember`: what to remember of an approval); whether the decision was taken."""
        raise NotImplementedError

    async def repeat(self, desk: Desk) -> None:
        """Send the last decision again, exactly (a retry, a double click)."""
        raise NotImplementedError


class Cli(Channel):
    name, can = "cli", frozenset({"many", "remember"})
    people = frozenset({"alice", "carol"})

    async def decide(self, desk, targets, approve, as_, seen=None, remember=None):
        argv = [sys.executable, "-m", "durable_react_agent.client", "confirm" if approve else "reject",
                targets[0].top, *(c.ref for c in targets), "--as", as_ or "", "--timeout", "30",
                *(["--remember", remember] if remember else [])]
        done = await asyncio.to_thread(
            subprocess.run, argv, cwd=ROOT, capture_output=True, text=True, timeout=90,
            env={**os.environ, "TEMPORAL_ADDRESS": desk.temporal, "AGENT_TASK_QUEUE": desk.queue})
        return done.returncode == 0


class Update(Channel):
    name, can = "update", frozenset({"seen", "repeat", "remember"})

    async def decide(self, desk, targets, approve, as_, seen=None, remember=None):
        [call] = targets
        status = await desk.client.get_workflow_handle(call.owner).query(
            ConversationWorkflow.status)
        shown = next((p.args_hash for p in status.pending_confirmations
                      if p.call_id == call.call_id and p.conversation_id is None), None)
        kind = ConfirmRequest if approve else RejectRequest
        self.last = call, kind(request_id=unique("u"), call_ids=[call.call_id],
                               approver=as_ or "unknown",
                               seen={call.call_id: h} if (h := seen or shown) else {},
                               **({"remember": remember} if remember else {}))
        return await self._send(desk, *self.last)

    async def _send(self, desk, call, request) -> bool:
        update = (ConversationWorkflow.decide_confirm if isinstance(request, ConfirmRequest)
                  else ConversationWorkflow.decide_reject)
        try:
            outcome = await desk.client.get_workflow_handle(call.owner).execute_update(
                update, request)
        except WorkflowUpdateFailedError:
            return False
        return outcome.accepted

    async def repeat(self, desk):
        await self._send(desk, *self.last)


class Rest(Channel):
    name, can = "rest", frozenset({"seen", "many", "roles", "remember"})
    people = frozenset(TOKENS)

    async def decide(self, desk, targets, approve, as_, seen=None, remember=None):
        status = (await self._get(desk, targets[0].top, "alice")).json()
        hashes = {p["ref"]: p["args_hash"] for p in status["pending_confirmations"]}
        body = {"call_ids": [c.ref for c in targets],
                "seen": {c.ref: seen or hashes.get(c.ref, "") for c in targets},
                **({"remember": remember} if remember else {})}
        async with self._http(desk, as_) as http:
            answer = await http.post(f"/conversations/{quote(targets[0].top)}/"
                                     f"{'confirm' if approve else 'reject'}", json=body)
        return answer.status_code == 200

    @staticmethod
    def _http(desk: Desk, as_: str | None) -> httpx.AsyncClient:
        return httpx.AsyncClient(base_url=desk.api.url, timeout=60, headers={
            "Authorization": f"Bearer {TOKENS[as_ or 'carol']}"})

    async def _get(self, desk, cid, as_):
        async with self._http(desk, as_) as http:
            return await http.get(f"/conversations/{quote(cid)}")


class Agui(Channel):
    name, can = "agui", frozenset({"many", "roles", "repeat", "remember"})
    people = frozenset({"alice", "bob", "carol", "vic"})

    async def decide(self, desk, targets, approve, as_, seen=None, remember=None):
        payload = {"approved": approve, **({"remember": remember} if remember else {})}
        self.last = as_, targets[0].top, unique("run"), [
            {"interruptId": c.ref, "status": "resolved", "payload": payload} for c in targets]
        return await self._send(desk)

    async def _send(self, desk) -> bool:
        """Taken: the run finished, and it ignored none of the resume's entries (AG-UI ignores
        an entry for an interrupt that is no longer open)."""
        as_, thread, run, resume = self.last
        async with Rest._http(desk, as_) as http:
            answer = await http.post("/agui", json={
                "threadId": thread, "runId": run, "messages": [], "state": None, "tools": [],
                "context": [], "forwardedProps": {}, "resume": resume})
        if answer.status_code != 200:  # a role's 403, another user's 404
            return False
        end = AGUI_EVENTS.validate_json(sse_events(answer.text)[-1]["data"])
        return end.type == EventType.RUN_FINISHED and "ignoredResume" not in (end.metadata or {})

    async def repeat(self, desk):
        await self._send(desk)


class Link(Channel):
    name, can = "link", frozenset({"seen", "repeat", "roles"})
    people = frozenset(ADDRESSEES)

    async def decide(self, desk, targets, approve, as_, seen=None, remember=None):
        [call] = targets
        url = (await links_of(desk.receiver, call))[as_]["approve" if approve else "reject"]
        if seen is not None:  # a link for other arguments: as if they changed since
            token = url.rsplit("/", 1)[1]
            claims = read_link(LINKS, token, time.time()).model_copy(update={"h": seen})
            url = url.replace(token, sign_link(LINKS, claims))
        self.last = url
        async with httpx.AsyncClient(timeout=60) as http:
            return (await http.post(url)).status_code == 200

    async def repeat(self, desk):
        async with httpx.AsyncClient(timeout=60) as http:
            await http.post(self.last)


async def links_of(receiver: Receiver, call: Call) -> dict[str | None, dict[str, str]]:
    deadline = time.monotonic() + 30
    while True:
        found = {}
        for d in receiver.events("approval_requested"):
            body = d["json"]
            if (body["conversation_id"], body["call_id"]) == (call.owner, call.call_id):
                to = read_link(LINKS, body["approve_url"].rsplit("/", 1)[1], time.time()).to
                found[to] = {"approve": body["approve_url"], "reject": body["reject_url"]}
        if len(found) == len(ADDRESSEES):
            return found
        assert time.monotonic() < deadline, f"no links for {call}: {found}"
        await asyncio.sleep(0.05)


class Console(Channel):
    """The console in chromium, signed in with the person's token: the approval card of the
    call, by its ref; not offered (no button, or no conversation) is not taken."""

    name, can = "console", frozenset({"roles", "remember"})
    people = frozenset({"alice", "bob", "carol", "vic"})

    async def decide(self, desk, targets, approve, as_, seen=None, remember=None):
        [call] = targets
        assert desk.browser is not None
        context = await desk.browser.new_context(viewport={"width": 1280, "height": 800})
        try:
            page = await context.new_page()
            await page.goto(f"{desk.api.url}/")
            await page.get_by_test_id("token-input").fill(TOKENS[as_ or "carol"])
            await page.get_by_test_id("token-save").click()
            await page.goto(f"{desk.api.url}/#/c/{quote(call.top)}")
            card = page.locator(f'[data-testid="approval-card"][data-call-id="{call.ref}"]')
            # the console remembers an approval for the conversation, or not at all
            assert remember in (None, "conversation")
            button = card.get_by_test_id(
                "reject" if not approve else "approve-remember" if remember else "approve")
            # the conversation shown (its status read), or why not (another user's: a 404)
            status = page.locator('[data-testid="status"][data-status]')
            error = page.locator('[data-testid="conversation-error"]:not([hidden])')
            await expect(status.or_(error).first).to_be_visible()
            if await error.is_visible():
                return False  # not shown to this person
            if await status.get_attribute("data-status") == "waiting_for_confirmation":
                await expect(card).to_be_visible()  # the cards come a moment after the status
            if not await card.count() or not await button.count():
                return False  # not waiting, or shown and not offered
            async with page.expect_response(lambda r: r.request.method == "POST") as answer:
                await button.click()
            return (await answer.value).status == 200
        finally:
            await context.close()


class A2a(Channel):
    """Another agent, over A2A with a person's token: it sees a write as `input-required` and
    never decides one (its message while a call waits is refused); a person decides it on
    another channel, and the agent sees the turn through."""

    name, decides = "a2a", False
    people = frozenset(TOKENS)

    async def decide(self, desk, targets, approve, as_, seen=None, remember=None):
        message = Message(message_id=unique("m"), role=Role.ROLE_USER,
                          context_id=targets[0].top, parts=[Part(text="yes, approve it")])
        async with self.agent(desk, as_) as agent:
            try:
                async for _ in agent.send_message(SendMessageRequest(message=message)):
                    pass
            except Exception:  # noqa: BLE001 (refused, as the rule expects)
                return False
        return True

    @staticmethod
    @asynccontextmanager
    async def agent(desk: Desk, as_: str | None):
        async with Rest._http(desk, as_) as http:
            client = await create_client(desk.api.url, client_config=ClientConfig(
                streaming=False, httpx_client=http))
            try:
                yield client
            finally:
                await client.close()


CHANNELS: list[Channel] = [Cli(), Update(), Rest(), Agui(), Link(), Console(), A2a()]


# ----- the rules -----

async def four_eyes(ch: Channel, desk: Desk) -> None:
    """A destructive call of alice's: her decision (or one that names nobody) is not taken;
    carol's is, as carol."""
    call = await one_call(desk, "delete_note")
    for who in ("alice", None):
        if who in ch.people:
            assert not await ch.decide(desk, [call], True, who), who
    await still_waiting(desk, call)
    assert await ch.decide(desk, [call], True, "carol")
    await decided(desk, call, [(True, "carol")])


async def arguments_seen(ch: Channel, desk: Desk) -> None:
    """A decision made on other arguments than the call's is not taken."""
    call = await one_call(desk)
    assert not await ch.decide(desk, [call], True, "carol", seen=STALE_HASH)
    await still_waiting(desk, call)
    assert await ch.decide(desk, [call], True, "carol")
    await decided(desk, call, [(True, "carol")])


async def look_alike_ids(ch: Channel, desk: Desk) -> None:
    """A grandchild's `dup` (the same id and args as its top conversation's decided `dup`) is
    decided by its ref, and only it: one more note, the top's decision unchanged."""
    call = await look_alikes(desk)
    top = Call(call.top, call.top, "dup", "dup", call.title)
    assert await ch.decide(desk, [call], True, "carol")
    await decided(desk, call, [(True, "carol")])
    assert await decisions(desk, top) == [(True, "carol")]
    await until(lambda: len(note_rows(desk.data_dir, call.title)) == 2)


async def acts_once(ch: Channel, desk: Desk) -> None:
    """The same decision sent twice is one decision, one write."""
    call = await one_call(desk)
    assert await ch.decide(desk, [call], True, "carol")
    await ch.repeat(desk)
    await decided(desk, call, [(True, "carol")])
    await until(lambda: len(note_rows(desk.data_dir, call.title)) == 1)
    await asyncio.sleep(0.3)  # no second write comes late
    assert len(note_rows(desk.data_dir, call.title)) == 1


async def stale(ch: Channel, desk: Desk) -> None:
    """A call rejected already is not approved after."""
    call = await one_call(desk)
    assert await Update().decide(desk, [call], False, "carol")
    assert not await ch.decide(desk, [call], True, "carol")
    await decided(desk, call, [(False, "carol")])
    assert note_rows(desk.data_dir, call.title) == []


async def whole_or_nothing(ch: Channel, desk: Desk) -> None:
    """alice decides two subagents' calls at once, one of them hers to leave to another (four
    eyes): neither is decided."""
    parts = await two_parts(desk)
    assert not await ch.decide(desk, parts, True, "alice")
    for part in parts:
        await still_waiting(desk, part)
    assert note_rows(desk.data_dir, parts[0].title) == []


async def roles(ch: Channel, desk: Desk) -> None:
    """A viewer, and a user who does not own the conversation, decide nothing; an approver
    does."""
    call = await one_call(desk)
    for who in ("vic", "bob"):
        if who in ch.people:
            assert not await ch.decide(desk, [call], True, who), who
    await still_waiting(desk, call)
    assert await ch.decide(desk, [call], True, "carol")
    await decided(desk, call, [(True, "carol")])


async def remembered(ch: Channel, desk: Desk) -> None:
    """An approval remembered for the conversation lets its next note run without asking,
    approved by the grant of whoever approved; revoked, it lets nothing run."""
    first, second, third = (unique(t) for t in ("granted", "by-grant", "after-revoke"))
    trigger = script(desk.model, unique("grant"), calls("create_note", first, "c1"),
                     calls("create_note", second, "c2"), ScriptedReply(content="done"),
                     calls("create_note", third, "c3"), ScriptedReply(content="again"))
    handle = await start(desk.client, desk.queue, trigger, owner="alice")
    await waiting(desk, handle.id, "c1")
    call = Call(handle.id, handle.id, "c1", "c1", first)
    assert await ch.decide(desk, [call], True, "carol", remember="conversation")
    await decided(desk, Call(handle.id, handle.id, "c2", "c2", second), [(True, "carol")])
    await until(lambda: len(note_rows(desk.data_dir, second)) == 1)
    [grant] = await handle.query(ConversationWorkflow.grants)
    assert (grant.tool, grant.scope, grant.by, grant.used) == (
        "create_note", "conversation", "carol", 1)
    status = await handle.query(ConversationWorkflow.status)
    assert [d.grant for d in status.decisions if d.call_id == "c2"] == [grant.id]
    await handle.execute_update(ConversationWorkflow.revoke_grant,
                                RevokeRequest(grant_id=grant.id, by="alice"))
    assert await handle.query(ConversationWorkflow.grants) == []
    await handle.signal(ConversationWorkflow.say, SayRequest(text="one more"))
    await waiting(desk, handle.id, "c3")
    assert note_rows(desk.data_dir, third) == []


async def agents_never_decide(ch: Channel, desk: Desk) -> None:
    """Whoever's token the agent holds (the owner's, an approver's), the write waits as
    `input-required` naming the call, a message does not decide it, and a person decides it
    on another channel; the agent then reads the turn through."""
    call = await one_call(desk)
    task = f"{call.top}~1"
    for who in ("alice", "carol"):
        assert not await ch.decide(desk, [call], True, who), who
    await still_waiting(desk, call)
    async with A2a.agent(desk, "alice") as agent:
        shown = await agent.get_task(GetTaskRequest(id=task))
        assert shown.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
        assert "create_note(" in shown.status.message.parts[0].text
        assert await Rest().decide(desk, [call], True, "carol")
        await decided(desk, call, [(True, "carol")])
        await until(lambda: len(note_rows(desk.data_dir, call.title)) == 1)
        for _ in range(600):
            done = await agent.get_task(GetTaskRequest(id=task))
            if done.status.state == TaskState.TASK_STATE_COMPLETED:
                break
            await asyncio.sleep(0.05)
        assert [p.text for a in done.artifacts for p in a.parts] == ["done"], done


@dataclass(frozen=True)
class Rule:
    check: Callable[[Channel, Desk], Awaitable[None]]
    needs: frozenset[str] = field(default_factory=frozenset)
    agents: bool = False  # a rule of the channels on which no person decides


RULES = {"four-eyes": Rule(four_eyes), "arguments-seen": Rule(arguments_seen, frozenset({"seen"})),
         "look-alike-ids": Rule(look_alike_ids), "acts-once": Rule(acts_once, frozenset({"repeat"})),
         "stale": Rule(stale), "whole": Rule(whole_or_nothing, frozenset({"many"})),
         "roles": Rule(roles, frozenset({"roles"})),
         "remembered": Rule(remembered, frozenset({"remember"})),
         "agents-never-decide": Rule(agents_never_decide, agents=True)}
CELLS = [pytest.param(rule, channel, id=f"{name}-{channel.name}")
         for name, rule in RULES.items() for channel in CHANNELS
         if rule.needs <= channel.can and rule.agents != channel.decides]


@pytest.fixture
def desk(place, client: Client, receiver: Receiver, model: ScriptedModelServer,
         activity_settings: ActivitySettings, temporal_address: str) -> Desk:
    queue, api = place
    return Desk(client, queue, api, receiver, model, activity_settings.data_dir, temporal_address)


@pytest.mark.parametrize(("rule", "channel"), [c for c in CELLS if c.values[1].name != "console"])
async def test_every_channel_holds_every_rule(rule: Rule, channel: Channel, desk: Desk):
    await rule.check(channel, desk)


@pytest.mark.parametrize(("rule", "channel"), [c for c in CELLS if c.values[1].name == "console"])
async def test_the_console_holds_every_rule_it_can_show(rule: Rule, channel: Channel, desk: Desk,
                                                         browser: Browser):
    await rule.check(channel, dataclasses.replace(desk, browser=browser))
