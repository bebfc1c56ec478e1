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
import pytest_asyncio
from ag_ui.core import EventType
from temporalio import client as client_interceptors
from temporalio.client import Client

from durable_react_agent.activities.profiles import AgentProfile, Profiles
from durable_react_agent.activities.settings import ActivitySettings
from durable_react_agent.client.connection import TemporalSettings
from durable_react_agent.client.session import Session
from durable_react_agent.contract import (
    ConfirmRequest,
    ConversationStatus,
    PendingConfirmation,
)
from durable_react_agent.contract.names import (
    CHILD_STATUS_SIGNAL,
    DECISION_REPLY_SIGNAL,
    ROUTED_DECISION_SIGNAL,
)
from durable_react_agent.rules.decisions import held_refusal, partly_applied, route, whole
from durable_react_agent.testing import ScriptedModelServer, ScriptedReply, ScriptedToolCall
from durable_react_agent.worker.app import build_worker
from durable_react_agent.workflows.conversation import ConversationWorkflow
from tests.api_support import ApiServer, agui_run, of, user
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
    until,
)

WRITER = AgentProfile(description="Writes notes", system_prompt="You write notes.",
                      tools=["create_note", "delete_note", "ask_confirm"], max_steps=3)


@pytest_asyncio.fixture(scope="module")
async def desk(client: Client, activity_settings: ActivitySettings, temporal_address: str
               ) -> AsyncIterator[tuple[str, ApiServer]]:
    """A worker with writer subagents, destructive calls under four eyes; an API on it."""
    queue = unique("whole")
    settings = dataclasses.replace(activity_settings, profiles=Profiles({"writer": WRITER}),
                                   four_eyes=("destructive",))
    api = ApiServer(temporal_address, queue).start()
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
    # one Update reached the conversation (the refused one never reached its history), each
    # subagent took its part as a signal from it, and said what became of it
    assert kinds(await handle.fetch_history()) == [
        "update decide_confirm", *[f"signal {DECISION_REPLY_SIGNAL}"] * 2]
    for kid in ("p1", "p2"):
        child = client.get_workflow_handle(f"{handle.id}/{kid}")
        assert kinds(await child.fetch_history()) == [f"signal {ROUTED_DECISION_SIGNAL}"]


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


class Counted(client_interceptors.Interceptor):
    """Counts what a client asks of Temporal: each call is a round trip."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def intercept_client(self, next: client_interceptors.OutboundInterceptor
                         ) -> client_interceptors.OutboundInterceptor:
        calls = self.calls

        class Counting(client_interceptors.OutboundInterceptor):
            async def query_workflow(self, input: Any) -> Any:
                calls.append(f"query {input.query}")
                return await super().query_workflow(input)

            async def signal_workflow(self, input: Any) -> None:
                calls.append(f"signal {input.signal}")
                return await super().signal_workflow(input)

            async def start_workflow_update(self, input: Any) -> Any:
                calls.append(f"update {input.update}")
                return await super().start_workflow_update(input)

            async def describe_workflow(self, input: Any) -> Any:
                calls.append("describe")
                return await super().describe_workflow(input)

        return Counting(next)


def kinds(history) -> list[str]:
    """What a conversation's history received: its Updates and its signals, by name."""
    out = []
    for e in history.events:
        if e.HasField("workflow_execution_update_accepted_event_attributes"):
            out.append("update " + e.workflow_execution_update_accepted_event_attributes
                       .accepted_request.input.name)
        if e.HasField("workflow_execution_signaled_event_attributes"):
            out.append("signal " + e.workflow_execution_signaled_event_attributes.signal_name)
    # a subagent's reports, and the stream's own publishing (a model call may send it), aside
    return [k for k in out if k != f"signal {CHILD_STATUS_SIGNAL}"
            and not k.startswith("signal __temporal")]


async def test_a_decision_over_subagents_is_one_round_trip_from_any_client(
        client: Client, desk, model: ScriptedModelServer, activity_settings: ActivitySettings):
    """By Update (the API, AG-UI, a link) or by signal (the CLI), a decision naming calls of two
    subagents is one request to the conversation the person sees: no status read first, no
    request to each subagent. The conversation routes each part to the subagent that owns it,
    which takes it as its own: its history holds the routed part, and no Update."""
    queue, _ = desk
    counted = Counted()
    config = client.config()
    config["interceptors"] = [*config["interceptors"], counted]
    session = Session(Client(**config), TemporalSettings(task_queue=queue), timeout_s=30)
    for by_update in (True, False):
        titles = [unique("trip-a"), unique("trip-b")]
        handle = await start(client, queue, two_writers(model, *map(note, titles)))
        await until_waiting(handle, 2)
        counted.calls.clear()
        outcome = await session.decide(handle.id, ConfirmRequest(
            request_id=unique("trip"), call_ids=["p1/call_0", "p2/call_0"], approver="carol"),
            by_update=by_update)
        assert outcome.accepted, outcome
        if by_update:
            assert counted.calls == ["update decide_confirm"]
        else:  # the signal, then its outcome, read until the conversation records it (and
            # whether it closed meanwhile)
            assert counted.calls[0] == "signal confirm" and set(counted.calls[1:]) <= {
                "query signal_outcome", "describe"}, counted.calls
        assert (await reaches(handle, "idle", timeout_s=60)).stop_reason == "answered"
        assert [len(note_rows(activity_settings.data_dir, t)) for t in titles] == [1, 1]
        decided = "update decide_confirm" if by_update else "signal confirm"
        assert kinds(await handle.fetch_history()).count(decided) == 1
        for kid in ("p1", "p2"):
            child = client.get_workflow_handle(f"{handle.id}/{kid}")
            assert kinds(await child.fetch_history()) == [f"signal {ROUTED_DECISION_SIGNAL}"]
        await replay(handle, "decision_routed_to_subagents" if by_update
                     else "decision_routed_to_subagents_by_signal")
        if by_update:  # a subagent's side: the part taken, and what became of it sent back
            await replay(client.get_workflow_handle(f"{handle.id}/p1"),
                         "decision_part_taken_from_the_parent")


def call(ref: str, owner: str | None = None, **fields: Any) -> PendingConfirmation:
    return PendingConfirmation(call_id=ref.rsplit("/", 1)[-1], tool="create_note", args={},
                               risk="sensitive", conversation_id=owner, ref=ref,
                               args_hash="sha256:a", **fields)


def test_a_decision_is_split_by_owner_and_checked_whole_against_what_subagents_reported():
    shown = [call("call_1"), call("p1/call_0", "top/p1"), call("p2/call_0", "top/p2")]
    request = ConfirmRequest(request_id="r", call_ids=["p1/call_0", "call_1", "p2/call_0"],
                             approver="carol")
    parts = route(request, shown, None)
    assert [(p.owner, p.request.call_ids, p.request.request_id, p.request.seen)
            for p in parts] == [("top/p1", ["call_0"], "r", {"call_0": "sha256:a"}),
                                (None, ["call_1"], "r-1", {}),
                                ("top/p2", ["call_0"], "r-2", {"call_0": "sha256:a"})]
    assert [held_refusal(p, shown, "alice") for p in parts if p.owner] == [None, None]
    # a call its subagent no longer reports, arguments other than those seen, four eyes
    assert held_refusal(parts[2], shown[:2], "alice") == "call call_0 is no longer waiting in top/p2"
    seen = route(request.model_copy(update={"seen": {"p2/call_0": "sha256:b"}}), shown, None)
    assert "not the ones this decision saw" in held_refusal(seen[2], shown, "alice")
    guarded = [*shown[:2], call("p2/call_0", "top/p2", four_eyes=True)]
    mine = route(request.model_copy(update={"approver": "alice"}), guarded, None)
    assert held_refusal(mine[2], guarded, "alice").startswith("four eyes: call call_0")
    assert whole("four eyes", 3) == "four eyes; nothing was decided"
    # refused after others were taken: exactly which were
    assert partly_applied(parts[:2], [(parts[2], "the conversation changed meanwhile")],
                          3) == (
        "partly applied: approved call_0 in top/p1; approved call_1; not applied: approved "
        "call_0 in top/p2, refused: the conversation changed meanwhile")
    assert partly_applied([], [(parts[2], "gone"), (parts[0], "gone too")], 3) == (
        "gone; nothing was decided")
    # `all` is every call shown; a bare id two conversations use is refused, naming both
    everything = route(ConfirmRequest(all=True), shown, None)
    assert [(p.owner, p.request.call_ids) for p in everything] == [
        (None, ["call_1"]), ("top/p1", ["call_0"]), ("top/p2", ["call_0"])]
    assert "call_0 names 2 waiting calls" in route(ConfirmRequest(call_ids=["call_0"]), shown,
                                                   None).reason


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
    async def pending() -> bool:
        described = await handle.describe()
        return any(a.activity_type.name == activity
                   for a in described.raw_description.pending_activities)

    await until(pending, what=f"{activity} running")
