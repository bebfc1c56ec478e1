"""Who may do what, over the real API (`agent-api` as a process) and a worker with
`AGENT_FOUR_EYES=destructive`: every route against every role, four eyes through REST, AG-UI
and the Update twins, the audit of who did what, and set-ups from before roles and owners."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest
import pytest_asyncio
from temporalio.client import Client, WorkflowUpdateFailedError
from temporalio.common import WorkflowIDConflictPolicy

from durable_react_agent.client.connection import TemporalSettings
from durable_react_agent.client.limits import no_ledger
from durable_react_agent.client.session import Session
from durable_react_agent.contract import ConfirmRequest
from durable_react_agent.contract.owner import LEDGER_WORKFLOW_TYPE, LedgerState, ledger_id
from durable_react_agent.rules.search_attributes import AGENT_OWNER
from durable_react_agent.testing import ScriptedModelServer, ScriptedReply
from durable_react_agent.workflows.conversation import ConversationWorkflow
from tests.api_support import AGUI_EVENTS as EVENTS
from tests.api_support import ApiServer, bearers, sse_events, until_status, user
from tests.helpers import replay, script, start, tool_call, unique
from tests.subagent_support import delegating

TOKENS = {"alice": "tok-a", "bob": "tok-b", "carol": "tok-c", "vic": "tok-v", "root": "tok-r",
          "legacy": "tok:legacy"}  # a token from before roles: no role, and a `:` in it
ROLES = {"alice": "user", "bob": "user", "carol": "approver", "vic": "viewer", "root": "admin"}
PEOPLE = list(ROLES)
# Two roles in one token: a viewer who may also start (and decide) conversations of their own.
MIXED = {"val": ("tok-vu", "viewer+user")}
BEARERS = {**TOKENS, **{name: token for name, (token, _) in MIXED.items()}}  # everyone's token


@pytest.fixture(scope="module")
def roles_api(temporal_address: str, roles_queue: str) -> AsyncIterator[ApiServer]:
    tokens = ",".join([*(f"{name}:{TOKENS[name]}" + (f":{ROLES[name]}" if name in ROLES else "")
                         for name in TOKENS),
                       *(f"{name}:{token}:{roles}" for name, (token, roles) in MIXED.items())])
    with ApiServer(temporal_address, roles_queue, AGENT_API_TOKENS=tokens) as api:
        yield api


@pytest_asyncio.fixture
async def as_(roles_api: ApiServer) -> AsyncIterator[dict[str, httpx.AsyncClient]]:
    """A client per person, with their token."""
    async with bearers(BEARERS, base_url=roles_api.url) as clients:
        yield clients


def waits_for_a_note(model: ScriptedModelServer, tool: str = "create_note",
                     args: dict | None = None) -> str:
    return script(model, unique(f"roles-{tool}"),
                  ScriptedReply(tool_calls=[tool_call(tool, args or {"title": "t", "body": "b"})]),
                  ScriptedReply(content="Done: {last_tool}"),
                  ScriptedReply(content="noted"), ScriptedReply(content="noted again"))


async def started(http: httpx.AsyncClient, trigger: str) -> str:
    cid = unique("roles")
    r = await http.post("/conversations", json={"prompt": trigger, "id": cid})
    assert r.status_code == 201, r.text
    assert r.json()["owner"] == next(n for n, t in BEARERS.items()
                                     if http.headers["authorization"] == f"Bearer {t}")
    return cid


def agui_body(thread: str, text: str | None = None, resume: list | None = None) -> dict:
    body = {"threadId": thread, "runId": unique("run"), "state": None, "tools": [],
            "context": [], "forwardedProps": {},
            "messages": [user(unique("m"), text)] if text else []}
    if resume is not None:
        body["resume"] = resume
    return body


def agui_events(r: httpx.Response) -> list:
    assert r.status_code == 200, r.text
    return [EVENTS.validate_json(e["data"]) for e in sse_events(r.text)]


async def code(http: httpx.AsyncClient, method: str, path: str, body: dict | None = None) -> int:
    if path.endswith("/events"):  # a stream: its status is known once it opens
        async with http.stream(method, path) as r:
            return r.status_code
    return (await http.request(method, path, json=body)).status_code


async def test_a_viewer_who_is_also_a_user_decides_their_own_calls_only(
        as_: dict[str, httpx.AsyncClient], model: ScriptedModelServer):
    """The user role lets a viewer write to their own conversations, never a decision on
    someone else's: the viewer role reads everyone's and decides none of them."""
    alices = await started(as_["alice"], waits_for_a_note(model))
    vals = await started(as_["val"], waits_for_a_note(model))
    await until_status(as_["alice"], alices, "waiting_for_confirmation")
    await until_status(as_["val"], vals, "waiting_for_confirmation")
    pending = (await as_["val"].get(f"/conversations/{alices}")).json()["pending_confirmations"]
    call_ids = [pending[0]["call_id"]]
    for verb in ("confirm", "reject"):
        r = await as_["val"].post(f"/conversations/{alices}/{verb}", json={"call_ids": call_ids})
        assert r.status_code == 403, (verb, r.text)
    own = (await as_["val"].get(f"/conversations/{vals}")).json()["pending_confirmations"]
    r = await as_["val"].post(f"/conversations/{vals}/confirm",
                              json={"call_ids": [own[0]["call_id"]]})
    assert r.status_code == 200, r.text
    assert (await as_["alice"].get(f"/conversations/{alices}")).json()["status"] == \
        "waiting_for_confirmation"


async def test_every_route_against_every_role(as_: dict[str, httpx.AsyncClient],
                                              model: ScriptedModelServer):
    """Read: the owner, an approver, a viewer and an admin; another user gets a 404. Write: a
    viewer never (403); a message or an end, the owner or an admin; a decision, the owner, an
    approver or an admin. A decision that passes the role check meets the conversation's own
    check: naming no pending call, it is the conversation's 409, so nothing is decided here."""
    first = waits_for_a_note(model)
    cid = await started(as_["alice"], first)
    await until_status(as_["alice"], cid, "waiting_for_confirmation")
    ok, hidden, forbidden, refused = 200, 404, 403, 409
    reads = {"alice": ok, "bob": hidden, "carol": ok, "vic": ok, "root": ok}
    expected: dict[tuple[str, str, str], dict[str, int]] = {
        **{("GET", f"/conversations/{cid}{tail}", ""): reads
           for tail in ("", "/history", "/schemas", "/events", "/grants")},
        # revoking a grant is deciding: naming none in force, the conversation's 409
        ("DELETE", f"/conversations/{cid}/grants/g9", ""):
            {"alice": refused, "bob": hidden, "carol": refused, "vic": forbidden,
             "root": refused},
        ("POST", f"/conversations/{cid}/messages", "message"):
            {"alice": ok, "bob": hidden, "carol": forbidden, "vic": forbidden, "root": ok},
        **{("POST", f"/conversations/{cid}/{verb}", verb):
           {"alice": refused, "bob": hidden, "carol": refused, "vic": forbidden, "root": refused}
           for verb in ("confirm", "reject", "answer")},
        ("POST", f"/conversations/{cid}/end", "end"):
            {"bob": hidden, "carol": forbidden, "vic": forbidden},  # who may is below
        ("GET", "/conversations", ""): dict.fromkeys(PEOPLE, ok),
        ("GET", "/config", ""): dict.fromkeys(PEOPLE, ok),
        ("GET", f"/conversations/{unique('nobody')}", ""): dict.fromkeys(PEOPLE, hidden),
        # Memories: each their own; another owner's, an admin alone; what is not one's own to
        # forget is as absent as what never was, and a viewer forgets nothing
        ("GET", "/memories", ""): dict.fromkeys(PEOPLE, ok),
        ("GET", "/memories?owner=alice", ""):
            {"alice": ok, "bob": forbidden, "carol": forbidden, "vic": forbidden, "root": ok},
        ("DELETE", f"/memories/{unique('mem')}", ""):
            {"alice": hidden, "bob": hidden, "carol": hidden, "vic": forbidden, "root": hidden},
    }
    bodies = {"message": {"text": "later"}, "confirm": {"call_ids": ["call_nope"]},
              "reject": {"call_ids": ["call_nope"]}, "answer": {"values": ["x"]}, "end": {}}
    for (method, path, kind), by_person in expected.items():
        for person, want in by_person.items():
            got = await code(as_[person], method, path, bodies.get(kind))
            assert got == want, (person, ROLES[person], method, path, got)

    # Lists: a user's holds only what they started; the others see everyone's.
    trigger = script(model, unique("roles-hello"), ScriptedReply(content="hi"))
    starts = {p: (await as_[p].post("/conversations", json={"prompt": trigger, "one_shot": True}))
              for p in PEOPLE}
    assert {p: r.status_code for p, r in starts.items()} == {
        "alice": 201, "bob": 201, "carol": 201, "vic": 403, "root": 201}
    assert "viewer" in starts["vic"].json()["detail"]
    bobs = starts["bob"].json()["workflow_id"]
    listed = {p: {row["workflow_id"]: row["owner"] for row in
                  (await as_[p].get("/conversations", params={"limit": 1000})).json()}
              for p in PEOPLE}
    assert cid in listed["alice"] and bobs not in listed["alice"]
    assert set(listed["alice"].values()) == {"alice"} and set(listed["bob"].values()) == {"bob"}
    for person in ("carol", "vic", "root"):
        assert listed[person][cid] == "alice" and listed[person][bobs] == "bob"
    # Someone else's id is not taken over, nor its status shown, by starting "it" again.
    again = await as_["bob"].post("/conversations", json={"prompt": trigger, "id": cid})
    assert again.status_code == 409 and "in use" in again.json()["detail"]

    # AG-UI: a message is a message (the owner's or an admin's), a resume is a decision.
    for person, want in {"bob": hidden, "vic": forbidden, "carol": forbidden}.items():
        r = await as_[person].post("/agui", json=agui_body(cid, "hello"))
        assert r.status_code == want, (person, r.text)
    for person in ("carol", "root", "alice"):  # past the check: an unknown interrupt is ignored
        events = agui_events(await as_[person].post("/agui", json=agui_body(
            cid, resume=[{"interruptId": "nope", "status": "resolved", "payload": {}}])))
        assert events[-1].type == "RUN_FINISHED", (person, events[-1])
        assert events[-1].metadata["ignoredResume"][0]["interruptId"] == "nope"
    r = await as_["bob"].post("/agui", json=agui_body(
        cid, resume=[{"interruptId": "nope", "status": "resolved", "payload": {}}]))
    assert r.status_code == hidden

    # The console learns what it may show.
    config = {p: (await as_[p].get("/config")).json() for p in PEOPLE}
    assert config["vic"]["roles"] == ["viewer"] and not config["vic"]["may_start"]
    assert config["carol"]["decides_all"] and not config["carol"]["writes_all"]
    assert not config["alice"]["sees_all"] and config["root"]["writes_all"]

    # Ends: the owner ends their own; an admin ends anyone's.
    assert await code(as_["alice"], "POST", f"/conversations/{cid}/end", {}) == ok
    bobs = await started(as_["bob"], waits_for_a_note(model))
    assert await code(as_["alice"], "POST", f"/conversations/{bobs}/end", {}) == hidden
    assert await code(as_["root"], "POST", f"/conversations/{bobs}/end", {}) == ok

    # The audit names who started it, who sent each message and who ended it.
    history = (await as_["vic"].get(f"/conversations/{cid}/history")).json()
    inputs = [(r["kind"], r["by"]) for r in history if r["kind"] != "step"]
    assert inputs == [("start", "alice"), ("message", "alice"), ("message", "root"),
                      ("end", "alice")], inputs
    assert history[0]["text"] == first and history[1]["text"] == "later"


async def test_four_eyes_holds_on_every_path(as_: dict[str, httpx.AsyncClient], client: Client,
                                             model: ScriptedModelServer, roles_queue: str):
    """The owner's decision on a destructive call is refused with the reason and the call stays
    pending, whether it comes by REST, AG-UI, an Update or a signal; an approver's is taken
    and audited. A sensitive call, not under four eyes, is the owner's to approve."""
    cid = await started(as_["alice"], waits_for_a_note(model, "delete_note", {"note_id": 424242}))
    waiting = await until_status(as_["alice"], cid, "waiting_for_confirmation")
    call, = waiting["pending_confirmations"]
    assert call["risk"] == "destructive"

    for verb, body in (("confirm", {"call_ids": [call["call_id"]]}),
                       ("reject", {"all": True, "reason": "changed my mind"})):
        r = await as_["alice"].post(f"/conversations/{cid}/{verb}", json=body)
        assert r.status_code == 409, r.text
        assert r.json()["detail"].startswith("four eyes: call")
        assert "alice" in r.json()["detail"]

    # AG-UI: the owner's resume is a RUN_ERROR with the reason; nothing is decided.
    events = agui_events(await as_["alice"].post("/agui", json=agui_body(cid, resume=[
        {"interruptId": call["ref"], "status": "resolved", "payload": {"approved": True}}])))
    assert events[-1].type == "RUN_ERROR" and "four eyes" in events[-1].message

    # The Update twin and the signal, straight to Temporal: the conversation holds the rule.
    handle = client.get_workflow_handle_for(ConversationWorkflow.run, cid)
    with pytest.raises(WorkflowUpdateFailedError) as err:
        await handle.execute_update(ConversationWorkflow.decide_confirm, ConfirmRequest(
            request_id=unique("u"), call_ids=[call["call_id"]], approver="alice"))
    assert "four eyes" in str(err.value.cause)
    rid = unique("signal")
    await handle.signal(ConversationWorkflow.confirm, ConfirmRequest(
        request_id=rid, call_ids=[call["call_id"]], approver="alice"))
    session = Session(client, TemporalSettings(task_queue=roles_queue), 30)
    outcome = await session.outcome(cid, rid)
    assert outcome is not None and not outcome.accepted and "four eyes" in outcome.reason

    still = await until_status(as_["vic"], cid, "waiting_for_confirmation")
    assert still["pending_confirmations"] == [call] and still["decisions"] == []

    taken = await as_["carol"].post(f"/conversations/{cid}/confirm",
                                    json={"call_ids": [call["call_id"]]})
    assert taken.status_code == 200, taken.text
    done = await until_status(as_["alice"], cid, "idle")
    assert done["decisions"][0]["approver"] == "carol"
    history = (await as_["alice"].get(f"/conversations/{cid}/history")).json()
    decision = next(a["decision"] for r in history for a in r["actions"] if a["decision"])
    assert decision["approver"] == "carol" and decision["approved"]
    assert (await as_["alice"].post(f"/conversations/{cid}/end", json={})).status_code == 200
    await handle.result()
    await replay(handle, "four_eyes_owner_refused")  # refusals, owner and inputs in the audit

    # Not under four eyes: the owner approves their own sensitive call.
    cid = await started(as_["alice"], waits_for_a_note(model))
    waiting = await until_status(as_["alice"], cid, "waiting_for_confirmation")
    r = await as_["alice"].post(f"/conversations/{cid}/confirm", json={"all": True})
    assert r.status_code == 200, r.text


async def test_conversations_and_tokens_from_before_roles_keep_working(
        as_: dict[str, httpx.AsyncClient], client: Client, model: ScriptedModelServer,
        roles_queue: str):
    """A token without a role is an admin, as every token was; a conversation started before
    owners (none recorded) is read and decided by admins and approvers, listed for those who
    see all, and hidden from users; four eyes has no owner to hold to it."""
    trigger = waits_for_a_note(model, "delete_note", {"note_id": 434343})
    handle = await start(client, roles_queue, trigger, id=unique("ownerless"))  # no owner
    cid = handle.id
    legacy = as_["legacy"]
    waiting = await until_status(legacy, cid, "waiting_for_confirmation")
    assert waiting["owner"] is None
    assert (await legacy.get("/config")).json()["roles"] == ["admin"]
    for person, want in {"alice": 404, "bob": 404, "vic": 200, "carol": 200, "root": 200}.items():
        assert await code(as_[person], "GET", f"/conversations/{cid}") == want, person
    assert cid not in [r["workflow_id"] for r in (await as_["alice"].get(
        "/conversations", params={"limit": 1000})).json()]
    assert cid in [r["workflow_id"] for r in (await legacy.get(
        "/conversations", params={"limit": 1000})).json()]
    r = await legacy.post(f"/conversations/{cid}/confirm", json={"all": True})
    assert r.status_code == 200, r.text
    done = await until_status(legacy, cid, "idle")
    assert done["decisions"][0]["approver"] == "legacy"
    # the admin sends the next message; the start, from before owners, names nobody
    assert (await legacy.post(f"/conversations/{cid}/messages", json={"text": "thanks"})
            ).status_code == 200
    history = (await legacy.get(f"/conversations/{cid}/history")).json()
    inputs = [(r["kind"], r["by"]) for r in history if r["kind"] != "step"]
    assert inputs[:2] == [("start", "unknown"), ("message", "legacy")]


async def test_a_subagent_belongs_to_its_parents_owner(client: Client, model: ScriptedModelServer,
                                                       agents_queue: str):
    """The child carries its parent's owner: in its input (four eyes there too) and in the
    search attribute a user's list filters on."""
    trigger = delegating(model, "roles", "researcher", "call_r1",
                         [ScriptedReply(content="found it")])
    parent = await start(client, agents_queue, trigger, owner="alice", one_shot=True)
    assert (await parent.result()).owner == "alice"
    child = client.get_workflow_handle(f"{parent.id}/call_r1")
    assert (await child.query(ConversationWorkflow.status)).owner == "alice"
    assert (await child.describe()).typed_search_attributes.get(AGENT_OWNER) == "alice"
    session = Session(client, TemporalSettings(task_queue=agents_queue), 30)
    # a child's owner is read off its top conversation's
    assert await session.owner(child.id) == await session.owner(parent.id) == "alice"



async def test_an_answer_is_audited_with_who_gave_it(as_: dict[str, httpx.AsyncClient],
                                                    model: ScriptedModelServer):
    """An approver answers the question of alice's conversation: the audit names carol, and
    alice's own message after it."""
    trigger = script(model, unique("roles-ask"),
                     ScriptedReply(tool_calls=[tool_call("ask_choice", {
                         "message": "Which colour?", "options": ["red", "blue"]})]),
                     ScriptedReply(content="Blue it is."), ScriptedReply(content="ok"))
    cid = await started(as_["alice"], trigger)
    waiting = await until_status(as_["alice"], cid, "waiting_for_input")
    assert waiting["pending_question"]["message"] == "Which colour?"
    assert await code(as_["bob"], "POST", f"/conversations/{cid}/answer", {"values": ["red"]}) \
        == 404
    assert await code(as_["vic"], "POST", f"/conversations/{cid}/answer", {"values": ["red"]}) \
        == 403
    r = await as_["carol"].post(f"/conversations/{cid}/answer", json={"values": ["blue"]})
    assert r.status_code == 200, r.text
    assert (await until_status(as_["alice"], cid, "idle"))["final_answer"] == "Blue it is."
    history = (await as_["alice"].get(f"/conversations/{cid}/history")).json()
    assert [(r["kind"], r["by"], r["text"]) for r in history if r["kind"] != "step"] == [
        ("start", "alice", trigger), ("answer", "carol", "blue")]


async def test_an_owner_sees_their_own_limits_and_only_an_admin_sets_them(
        client: Client, roles_queue: str, as_: dict[str, httpx.AsyncClient]):
    owner = unique("alice-limits")  # a ledger of its own (the dev server outlives one test)
    await client.start_workflow(
        LEDGER_WORKFLOW_TYPE, LedgerState(owner=owner), id=ledger_id(owner),
        task_queue=roles_queue, id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING)
    assert (await as_["root"].get(f"/owners/{owner}/limits")).json()["owner"] == owner
    hidden = await as_["alice"].get(f"/owners/{owner}/limits")  # not hers: as if there were none
    assert (hidden.status_code, hidden.json()["detail"]) == (404, no_ledger(owner))
    mine = await as_["alice"].get("/owners/alice/limits")
    assert mine.status_code in (200, 404)  # hers: 404 only while no turn of hers ran limited
    refused = await as_["alice"].put(f"/owners/{owner}/limits", json={"running_turns": 9})
    assert refused.status_code == 403, refused.text
    r = await as_["root"].put(f"/owners/{owner}/limits", json={"running_turns": 3,
                                                               "daily_usd": 2.5})
    assert r.status_code == 200, r.text
    assert r.json()["limits"] == {"running_turns": 3, "daily_tokens": None, "daily_usd": 2.5}
    assert r.json()["override"]["running_turns"] == 3
    assert (await as_["root"].put(f"/owners/{owner}/limits",
                                  json={"running_turns": 0})).status_code == 422
    assert (await as_["root"].put(f"/owners/{owner}/limits",
                                  json={"turns": 2})).status_code == 422
    reset = await as_["root"].put(f"/owners/{owner}/limits", json={"reset": True})
    assert reset.json()["limits"]["running_turns"] is None
    assert (await as_["root"].put(f"/owners/{unique('nobody')}/limits",
                                  json={"running_turns": 1})).status_code == 404
