"""Remembered approvals over HTTP: a REST confirm and an AG-UI resume that remember the approval
(`remember`, `for_s`, `uses`), with the token's roles; `GET .../grants` and
`DELETE .../grants/{id}`, by role; what is a 422 (the schema says it) and what the conversation
refuses (409). The app runs in this process (httpx.ASGITransport) on the session's worker."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import datetime
from typing import Any

import httpx
import pytest
import pytest_asyncio
from ag_ui.core import EventType, ResumeEntry
from fastapi import FastAPI
from temporalio.client import Client

from durable_react_agent.api.app import create_app
from durable_react_agent.api.interrupts import plan_resume
from durable_react_agent.api.settings import ApiSettings
from durable_react_agent.client.checks import UsageError
from durable_react_agent.client.connection import TemporalSettings
from durable_react_agent.contract import (
    ConfirmRequest,
    ConversationStatus,
    PendingConfirmation,
    RejectRequest,
    Usage,
)
from durable_react_agent.testing import ScriptedModelServer, ScriptedReply
from tests.api_support import agui_run, until_status, user
from tests.helpers import note_rows, script, tool_call, unique

TOKENS = {"alice": ("tok-a", "user"), "bob": ("tok-b", "user"), "carol": ("tok-c", "approver"),
          "vic": ("tok-v", "viewer")}


def in_process(temporal: TemporalSettings, client: Client) -> FastAPI:
    app = create_app(ApiSettings.from_env({"AGENT_API_TOKENS": ",".join(
        f"{name}:{token}:{role}" for name, (token, role) in TOKENS.items())}), temporal, client)
    app.state.client = client  # the lifespan, which would set it, does not run in-process
    return app


@pytest_asyncio.fixture
async def as_(client: Client, task_queue: str) -> AsyncIterator[dict[str, httpx.AsyncClient]]:
    """A client per person, with their token, of the API in this process."""
    app = in_process(TemporalSettings(task_queue=task_queue), client)
    clients = {name: httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app, raise_app_exceptions=False),
        base_url="http://127.0.0.1", timeout=60, headers={"Authorization": f"Bearer {token}"})
        for name, (token, _) in TOKENS.items()}
    try:
        yield clients
    finally:
        for c in clients.values():
            await c.aclose()


def note(title: str) -> ScriptedReply:
    return ScriptedReply(tool_calls=[tool_call("create_note", {"title": title, "body": "b"})])


def notes_then_another(model: ScriptedModelServer) -> tuple[str, list[str]]:
    """Two notes in one turn (the second after the first ran), then, next turn, a third."""
    titles = [unique(t) for t in ("first", "second", "third")]
    trigger = script(model, unique("grants"), note(titles[0]), note(titles[1]),
                     ScriptedReply(content="two notes"), note(titles[2]),
                     ScriptedReply(content="{last_tool}"))
    return trigger, titles


async def started(http: httpx.AsyncClient, prompt: str) -> str:
    cid = unique("grants")
    r = await http.post("/conversations", json={"prompt": prompt, "id": cid})
    assert r.status_code == 201, r.text
    return cid


async def confirms_recorded(client: Client, cid: str) -> list[ConfirmRequest]:
    """The confirms the conversation took by Update, as its history holds them."""
    history = await client.get_workflow_handle(cid).fetch_history()
    convert = client.data_converter.payload_converter
    taken = []
    for event in history.events:
        if event.HasField("workflow_execution_update_accepted_event_attributes"):
            request = event.workflow_execution_update_accepted_event_attributes.accepted_request
            if request.input.name == "decide_confirm":
                taken.append(convert.from_payload(request.input.args.payloads[0],
                                                  ConfirmRequest))
    return taken


async def test_a_rest_confirm_remembers_the_approval_grants_lists_it_and_delete_revokes_it(
        as_: dict[str, httpx.AsyncClient], client: Client, model: ScriptedModelServer,
        activity_settings):
    trigger, (first, second, third) = notes_then_another(model)
    alice, carol = as_["alice"], as_["carol"]
    cid = await started(alice, trigger)
    [call] = (await until_status(alice, cid, "waiting_for_confirmation"))["pending_confirmations"]
    path = f"/conversations/{cid}/confirm"
    grants = f"/conversations/{cid}/grants"
    assert (await alice.get(grants)).json() == []

    # What the schema says: a 422, nothing sent.
    for body in ({"for_s": 60}, {"uses": 2}, {"remember": "call", "uses": 2},
                 {"remember": "forever"}, {"remember": "args", "uses": 0},
                 {"remember": "args", "for_s": 0}, {"remember": "args", "for_s": 31 * 86400},
                 {"remember": "conversation", "uses": 1.5}):
        r = await carol.post(path, json={"call_ids": [call["call_id"]], **body})
        assert r.status_code == 422, (body, r.text)

    taken = await carol.post(path, json={"call_ids": [call["call_id"]],
                                         "remember": "conversation", "uses": 3, "for_s": 600})
    assert taken.status_code == 200 and taken.json()["accepted"], taken.text
    done = await until_status(alice, cid, "idle")
    assert done["final_answer"] == "two notes"
    assert [(d["approver"], d["grant"]) for d in done["decisions"]] == [
        ("carol", None), ("carol", "g1")]
    assert len(note_rows(activity_settings.data_dir, second)) == 1
    # the confirm carried the token's roles
    [confirm] = await confirms_recorded(client, cid)
    assert (confirm.approver, confirm.roles, confirm.remember) == (
        "carol", ["approver"], "conversation")

    # Listed to whoever may read the conversation; another user's is a 404.
    listed = await as_["vic"].get(grants)
    assert listed.status_code == 200, listed.text
    [grant] = listed.json()
    assert (grant["id"], grant["tool"], grant["scope"], grant["by"], grant["uses_left"],
            grant["used"]) == ("g1", "create_note", "conversation", "carol", 2, 1)
    assert (datetime.fromisoformat(grant["expires_at"])
            - datetime.fromisoformat(grant["at"])).total_seconds() == 600
    assert (await as_["bob"].get(grants)).status_code == 404

    # Revoked by who may decide the conversation's calls: a viewer may not, another user
    # does not see it, a grant not in force is the conversation's refusal.
    assert (await as_["vic"].delete(f"{grants}/g1")).status_code == 403
    assert (await as_["bob"].delete(f"{grants}/g1")).status_code == 404
    unknown = await alice.delete(f"{grants}/g9")
    assert unknown.status_code == 409
    assert unknown.json()["detail"] == ("no grant 'g9' in this conversation (grants lists those "
                                        "in force)")
    assert (await as_["vic"].get(grants)).json() == [grant]
    revoked = await alice.delete(f"{grants}/g1")
    assert revoked.status_code == 200 and revoked.json()["accepted"], revoked.text
    assert (await alice.get(grants)).json() == []
    assert (await alice.delete(f"{grants}/g1")).status_code == 409

    # Revoked, it lets nothing run: the next note waits.
    said = await alice.post(f"/conversations/{cid}/messages", json={"text": "one more"})
    assert said.status_code == 200, said.text
    asked = await until_status(alice, cid, "waiting_for_confirmation", turn=2)
    assert [p["args"]["title"] for p in asked["pending_confirmations"]] == [third]
    history = (await alice.get(f"/conversations/{cid}/history")).json()
    assert [(r["kind"], r["by"]) for r in history if r["kind"] in ("grant", "revoke")] == [
        ("grant", "carol"), ("revoke", "alice")]
    assert note_rows(activity_settings.data_dir, first) and not note_rows(
        activity_settings.data_dir, third)
    assert (await alice.post(f"/conversations/{cid}/end", json={})).status_code == 200


async def test_what_may_not_be_remembered_is_refused_whole(
        as_: dict[str, httpx.AsyncClient], model: ScriptedModelServer):
    """A destructive call's approval is not remembered: the whole decision is a 409 with the
    reason, and the call still waits."""
    trigger = script(model, unique("grants-delete"),
                     ScriptedReply(tool_calls=[tool_call("delete_note", {"note_id": 616161})]),
                     ScriptedReply(content="{last_tool}"))
    cid = await started(as_["alice"], trigger)
    waiting = await until_status(as_["alice"], cid, "waiting_for_confirmation")
    [call] = waiting["pending_confirmations"]
    r = await as_["carol"].post(f"/conversations/{cid}/confirm",
                                json={"call_ids": [call["call_id"]], "remember": "args"})
    assert r.status_code == 409
    assert r.json()["detail"] == ("an approval of delete_note may not be remembered: it is "
                                  "destructive")
    still = await until_status(as_["alice"], cid, "waiting_for_confirmation")
    assert still["pending_confirmations"] == [call] and still["decisions"] == []
    assert (await as_["alice"].get(f"/conversations/{cid}/grants")).json() == []
    assert (await as_["alice"].post(f"/conversations/{cid}/end", json={})).status_code == 200


async def test_an_agui_resume_remembers_the_approval_with_the_principals_roles(
        as_: dict[str, httpx.AsyncClient], client: Client, model: ScriptedModelServer,
        activity_settings):
    trigger, (_, second, _) = notes_then_another(model)
    thread = unique("agui-grant")
    events = await agui_run(as_["alice"], thread, [user("m1", trigger)])
    [interrupt] = events[-1].outcome.interrupts
    schema = interrupt.response_schema["properties"]
    assert schema["remember"]["enum"] == ["call", "args", "conversation", "owner"]
    assert {"for_s", "uses"} <= schema.keys()

    bad = await agui_run(as_["carol"], thread, [], resume=[{
        "interruptId": interrupt.id, "status": "resolved",
        "payload": {"approved": True, "uses": 2}}])
    assert bad[-1].type == EventType.RUN_ERROR and "for and uses apply" in bad[-1].message
    events = await agui_run(as_["carol"], thread, [], resume=[{
        "interruptId": interrupt.id, "status": "resolved",
        "payload": {"approved": True, "remember": "conversation", "uses": 2}}])
    assert events[-1].type == EventType.RUN_FINISHED, events[-1]
    assert events[-1].result["answer"] == "two notes"
    assert len(note_rows(activity_settings.data_dir, second)) == 1
    [grant] = (await as_["alice"].get(f"/conversations/{thread}/grants")).json()
    assert (grant["by"], grant["scope"], grant["uses_left"]) == ("carol", "conversation", 1)
    [confirm] = await confirms_recorded(client, thread)
    assert (confirm.roles, confirm.remember, confirm.uses) == (["approver"], "conversation", 2)
    assert (await as_["alice"].post(f"/conversations/{thread}/end", json={})).status_code == 200


# ----- without a server -----

def waiting_for(*calls: str) -> ConversationStatus:
    return ConversationStatus(
        workflow_id="t1", status="waiting_for_confirmation", turn=1, steps=1, llm_calls=1,
        tools_used=[], stop_reason=None, final_answer=None, usage=Usage(), error=None,
        pending_question=None,
        pending_confirmations=[PendingConfirmation(call_id=c, ref=c, tool="create_note",
                                                   args={"title": c}, risk="sensitive")
                               for c in calls])


def resumed(**payload: Any) -> ConfirmRequest | RejectRequest:
    plan = plan_resume([ResumeEntry(interrupt_id="c1", status="resolved", payload=payload)],
                       waiting_for("c1"), "carol", "run-1", roles=["approver"])
    return plan.requests["c1"]


def test_a_resume_carries_what_to_remember_and_the_roles():
    plain = resumed(approved=True)
    assert (plain.remember, plain.for_s, plain.uses, plain.roles) == (
        None, None, None, ["approver"])
    remembered = resumed(approved=True, remember="args", for_s=90, uses=2.0)
    assert isinstance(remembered, ConfirmRequest)
    assert (remembered.remember, remembered.for_s, remembered.uses) == ("args", 90, 2)


@pytest.mark.parametrize("payload, why", [
    ({"approved": True, "remember": "forever"}, "remember must be one of"),
    ({"approved": True, "remember": 3}, "remember is one of"),
    ({"approved": True, "for_s": 60}, "for and uses apply"),
    ({"approved": True, "remember": "call", "uses": 1}, "for and uses apply"),
    ({"approved": True, "remember": "args", "for_s": "1h"}, "for_s is a number"),
    ({"approved": True, "remember": "args", "uses": 0}, "uses must be between"),
    ({"approved": True, "remember": "args", "uses": True}, "uses is a whole number"),
    ({"approved": False, "remember": "conversation"}, "not a rejection"),
])
def test_a_resume_that_cannot_be_remembered_sends_nothing(payload: dict, why: str):
    with pytest.raises(UsageError, match=why):
        resumed(**payload)


def test_the_openapi_document_describes_grants():
    doc = create_app(ApiSettings(), TemporalSettings()).openapi()
    paths = doc["paths"]
    assert set(paths["/conversations/{cid}/grants"]) == {"get"}
    assert set(paths["/conversations/{cid}/grants/{grant_id}"]) == {"delete"}
    listed = paths["/conversations/{cid}/grants"]["get"]["responses"]["200"]
    assert listed["content"]["application/json"]["schema"]["items"]["$ref"].endswith("/Grant")
    revoke = paths["/conversations/{cid}/grants/{grant_id}"]["delete"]["responses"]
    assert {"200", "404", "409"} <= revoke.keys()
    body = doc["components"]["schemas"]["ConfirmBody"]
    assert {"remember", "for_s", "uses"} <= body["properties"].keys()
    assert body["then"]["properties"]["remember"]["enum"] == ["args", "conversation", "owner"]
