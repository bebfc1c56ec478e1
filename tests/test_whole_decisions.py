"""A human's input is applied whole or reported exactly: a decision over calls of two subagents
that one part of would refuse decides nothing (REST and AG-UI alike), and one refused after
other parts were taken says which were; an answer names the question the person saw and is
refused when another is open; and a request that waited for a result is answered as soon as
nothing more is on its way, not at the next decision."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import pytest_asyncio
from ag_ui.core import EventType
from temporalio.client import Client

from durable_react_agent.activities.profiles import AgentProfile, Profiles
from durable_react_agent.activities.settings import ActivitySettings
from durable_react_agent.client.checks import Refused
from durable_react_agent.client.decisions import PartlyApplied
from durable_react_agent.client.session import Session
from durable_react_agent.contract import (
    ConfirmRequest,
    ConversationStatus,
    PendingConfirmation,
    SignalOutcome,
    Usage,
)
from durable_react_agent.testing import ScriptedModelServer, ScriptedReply, ScriptedToolCall
from durable_react_agent.worker.app import build_worker
from durable_react_agent.workflows.conversation import ConversationWorkflow
from tests.api_support import ApiProcess, agui_run, of, user
from tests.fake_tools import registry_with_test_tools
from tests.helpers import (
    note_rows,
    outcome_of,
    reaches,
    replay,
    script,
    settled,
    start,
    tool_call,
    unique,
)

WRITER = AgentProfile(description="Writes notes", system_prompt="You write notes.",
                      tools=["create_note", "delete_note", "ask_confirm"], max_steps=3)


@pytest_asyncio.fixture(scope="module")
async def desk(client: Client, activity_settings: ActivitySettings, temporal_address: str
               ) -> AsyncIterator[tuple[str, ApiProcess]]:
    """A worker with writer subagents, destructive calls under four eyes; an API on it."""
    queue = unique("whole")
    settings = dataclasses.replace(activity_settings, profiles=Profiles({"writer": WRITER}),
                                   four_eyes=("destructive",))
    api = ApiProcess(temporal_address, queue).start()
    try:
        async with httpx.AsyncClient(timeout=10) as http:
            async with build_worker(client, queue, settings, http, registry_with_test_tools()):
                yield queue, api
    finally:
        api.stop()


def two_writers(model: ScriptedModelServer, *calls: ScriptedToolCall) -> str:
    """A parent whose writers p1, p2... each make one call (as `call_0`: ids repeat across
    them, as a provider that numbers calls per request does), then report."""
    kids = [script(model, unique("kid"), ScriptedReply(tool_calls=[call]),
                   ScriptedReply(content="{last_tool}")) for call in calls]
    return script(model, unique("writers"), ScriptedReply(tool_calls=[
        ScriptedToolCall(name="agent__writer", arguments={"task": f"{kid}: go"}, id=f"p{n + 1}")
        for n, kid in enumerate(kids)]), ScriptedReply(content="all: {last_tool}"))


def note(title: str) -> ScriptedToolCall:
    return ScriptedToolCall(name="create_note", arguments={"title": title, "body": "b"},
                            id="call_0")


async def until_waiting(handle, count: int) -> ConversationStatus:
    deadline = time.monotonic() + 60
    while True:
        status = await handle.query(ConversationWorkflow.status)
        if len(status.pending_confirmations) == count:
            return status
        assert time.monotonic() < deadline, status
        await asyncio.sleep(0.1)


async def test_a_decision_over_two_subagents_is_refused_whole_if_a_part_would_be(
        client: Client, desk, model: ScriptedModelServer, activity_settings: ActivitySettings):
    queue, api = desk
    titles = [unique("whole-a"), unique("whole-b")]
    handle = await start(client, queue, two_writers(model, *map(note, titles)))
    status = await until_waiting(handle, 2)
    seen = {p.ref: p.args_hash for p in status.pending_confirmations}
    async with httpx.AsyncClient(base_url=api.url, timeout=30) as http:
        stale = await http.post(f"/conversations/{handle.id}/confirm", json={
            "call_ids": ["p1/call_0", "p2/call_0"],
            "seen": {**seen, "p2/call_0": "sha256:" + "0" * 64}})
        assert stale.status_code == 409 and "nothing was decided" in stale.text, stale.text
        assert len((await until_waiting(handle, 2)).pending_confirmations) == 2
        assert [note_rows(activity_settings.data_dir, t) for t in titles] == [[], []]
        whole = await http.post(f"/conversations/{handle.id}/confirm",
                                json={"call_ids": ["p1/call_0", "p2/call_0"], "seen": seen})
        assert whole.status_code == 200, whole.text
    assert (await reaches(handle, "idle", timeout_s=60)).stop_reason == "answered"
    assert [len(note_rows(activity_settings.data_dir, t)) for t in titles] == [1, 1]


async def test_an_agui_resume_over_two_subagents_is_refused_whole(
        desk, model: ScriptedModelServer, activity_settings: ActivitySettings):
    """The owner resumes both interrupts; one is a destructive call under four eyes: the run
    ends in RUN_ERROR and the other call is not approved either."""
    _, api = desk
    title = unique("agui-whole")
    trigger = two_writers(model, note(title), ScriptedToolCall(
        name="delete_note", arguments={"note_id": 424242}, id="call_0"))
    thread = unique("agui-whole")
    async with httpx.AsyncClient(base_url=api.url, timeout=60) as http:
        started = await agui_run(http, thread, [user("m1", trigger)])
        interrupts = of(started, EventType.RUN_FINISHED)[0].outcome.interrupts
        while len(interrupts) < 2:  # the second child's call may surface a moment later
            again = await agui_run(http, thread, [user("m1", trigger)])
            interrupts = of(again, EventType.RUN_FINISHED)[0].outcome.interrupts
        events = await agui_run(http, thread, [user("m1", trigger)], resume=[
            {"interruptId": i.id, "status": "resolved", "payload": {"approved": True}}
            for i in interrupts])
        assert events[-1].type == EventType.RUN_ERROR and "four eyes" in events[-1].message
        assert "nothing was decided" in events[-1].message
        status = (await http.get(f"/conversations/{thread}")).json()
    assert sorted(p["ref"] for p in status["pending_confirmations"]) == ["p1/call_0",
                                                                         "p2/call_0"]
    assert note_rows(activity_settings.data_dir, title) == []


class ScriptedSession(Session):
    """A session whose conversations answer from a script: statuses by id, and the outcome of
    each request sent by Update, in order."""

    def __init__(self, statuses: dict[str, ConversationStatus], answers: list[bool]) -> None:
        self.statuses, self.answers, self.sent = statuses, answers, []

    async def status(self, workflow_id: str) -> ConversationStatus:
        return self.statuses[workflow_id]

    async def update(self, workflow_id: str, request: Any) -> SignalOutcome:
        self.sent.append((workflow_id, request.call_ids))
        if not self.answers.pop(0):
            raise Refused("the conversation changed meanwhile")
        return SignalOutcome(request_id=request.request_id or "", accepted=True)


def waiting(cid: str, *calls: PendingConfirmation, owner: str = "alice") -> ConversationStatus:
    return ConversationStatus(workflow_id=cid, status="waiting_for_confirmation", turn=1,
                              steps=1, llm_calls=1, tools_used=[], stop_reason=None,
                              final_answer=None, pending_confirmations=list(calls),
                              usage=Usage(), error=None, owner=owner)


def call(ref: str, owner: str | None = None, **fields: Any) -> PendingConfirmation:
    return PendingConfirmation(call_id=ref.rsplit("/", 1)[-1], tool="create_note", args={},
                               risk="sensitive", conversation_id=owner, ref=ref,
                               args_hash="sha256:a", **fields)


async def test_a_part_refused_after_others_were_taken_says_exactly_which_were():
    top = waiting("top", call("p1/call_0", "top/p1"), call("p2/call_0", "top/p2"))
    kids = {"top/p1": waiting("top/p1", call("call_0")),
            "top/p2": waiting("top/p2", call("call_0"))}
    request = ConfirmRequest(request_id="r", call_ids=["p1/call_0", "p2/call_0"],
                             approver="carol")
    session = ScriptedSession({"top": top, **kids}, answers=[True, False])
    with pytest.raises(PartlyApplied) as refused:
        await session.decide("top", request, by_update=True)
    assert str(refused.value) == ("partly applied: approved call_0 in top/p1; not applied: "
                                  "approved call_0 in top/p2, refused: the conversation "
                                  "changed meanwhile")
    assert session.sent == [("top/p1", ["call_0"]), ("top/p2", ["call_0"])]
    # Checked whole first: a part its own conversation no longer shows sends nothing at all.
    gone = ScriptedSession({"top": top, **kids, "top/p2": waiting("top/p2")}, answers=[True])
    with pytest.raises(Refused, match="no longer waiting in top/p2; nothing was decided"):
        await gone.decide("top", request, by_update=True)
    assert gone.sent == []
    # So does a part under four eyes that its owner would decide.
    owned = {"top/p2": waiting("top/p2", call("call_0", four_eyes=True))}
    mine = ScriptedSession({"top": top, **kids, **owned}, answers=[True, True])
    with pytest.raises(Refused, match="four eyes"):
        await mine.decide("top", request.model_copy(update={"approver": "alice"}),
                          by_update=True)
    assert mine.sent == []


async def test_an_answer_names_its_question_and_a_late_one_is_refused(
        client: Client, desk, model: ScriptedModelServer):
    """A "yes" sent for question 1 once question 2 is open (a second person, a retried
    request) is refused, not given to question 2."""
    queue, api = desk
    trigger = script(model, unique("answers"), ScriptedReply(tool_calls=[
        tool_call("ask_confirm", {"message": "Metric units?"}),
        tool_call("ask_input", {"message": "Your name?"})]), ScriptedReply(content="thanks"))
    handle = await start(client, queue, trigger)
    first = (await reaches(handle, "waiting_for_input")).pending_question
    async with httpx.AsyncClient(base_url=api.url, timeout=30) as http:
        path = f"/conversations/{handle.id}/answer"
        taken = await http.post(path, json={"values": ["yes"], "call_id": first.ref})
        assert taken.status_code == 200, taken.text
        second = await until_asked(handle, "input")
        late = await http.post(path, json={"values": ["yes"], "call_id": first.ref})
        assert late.status_code == 409 and "not the one open" in late.text, late.text
        assert (await handle.query(ConversationWorkflow.status)).pending_question == second
        right = await http.post(path, json={"values": ["Ada"], "call_id": second.ref})
        assert right.status_code == 200, right.text
    assert (await settled(handle)).final_answer == "thanks"
    await replay(handle, "answers_bound_to_their_question")


async def until_asked(handle, kind: str):
    deadline = time.monotonic() + 30
    while True:
        q = (await handle.query(ConversationWorkflow.status)).pending_question
        if q is not None and q.kind == kind:
            return q
        assert time.monotonic() < deadline, q
        await asyncio.sleep(0.05)


async def test_a_waiting_request_is_answered_once_nothing_more_is_on_its_way(
        client: Client, odd_tools_queue: str, model: ScriptedModelServer):
    """A's tool runs (two seconds) while B waits for a person; a decision naming an unknown
    call arrives meanwhile, and waits for the tool's result (which could have named it). Once
    A's tool is done nothing more is on its way, so it is refused then, with B still waiting:
    not at B's decision."""
    trigger = script(model, unique("settles"), ScriptedReply(tool_calls=[
        ScriptedToolCall(name="slow_write", arguments={}, id="A"),
        tool_call("create_note", {"title": unique("B"), "body": "b"})]),
        ScriptedReply(content="done"))
    handle = await start(client, odd_tools_queue, trigger)
    await until_waiting(handle, 2)
    await handle.signal(ConversationWorkflow.confirm, ConfirmRequest(request_id="a",
                                                                     call_ids=["A"]))
    await running(handle, "slow_write")
    await handle.signal(ConversationWorkflow.confirm, ConfirmRequest(request_id="nope",
                                                                     call_ids=["nope"]))
    refused = await outcome_of(handle, "nope", timeout_s=15)
    assert not refused.accepted and refused.reason == "unknown call id nope"
    status = await handle.query(ConversationWorkflow.status)
    assert [p.tool for p in status.pending_confirmations] == ["create_note"]
    assert "slow_write" in status.tools_used  # A ran
    await handle.signal(ConversationWorkflow.confirm, ConfirmRequest(
        request_id="b", call_ids=[status.pending_confirmations[0].call_id]))
    assert (await settled(handle)).final_answer == "done"
    await replay(handle, "waiting_request_settled_by_a_tool_result")


async def running(handle, activity: str) -> None:
    deadline = time.monotonic() + 30
    while not any(a.activity_type.name == activity
                  for a in (await handle.describe()).raw_description.pending_activities):
        assert time.monotonic() < deadline, f"{activity} never ran"
        await asyncio.sleep(0.05)
