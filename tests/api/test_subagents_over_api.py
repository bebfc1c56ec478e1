"""Subagents over the HTTP API and the CLI: a child's calls are reached from the parent by the API
and by `agent confirm --all`, look-alike ids of two children are told apart, a grandchild's approval
is decided at the top, and a child is rejected and answered through the API."""

from __future__ import annotations

import asyncio

import httpx
from temporalio.client import Client

from durable_react_agent.api.interrupts import interrupts
from durable_react_agent.testing import ScriptedModelServer, ScriptedReply
from durable_react_agent.workflows.conversation import ConversationWorkflow
from tests.api_support import ApiServer
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
from tests.subagent_support import delegate, delegating, writing


async def two_writers(client: Client, queue: str, model: ScriptedModelServer
                      ) -> tuple[object, list[str]]:
    """A parent whose two writer children each wait for approval of their own `call_0`."""
    titles = [unique("twin-a"), unique("twin-b")]
    kids = [writing(model, t) for t in titles]
    parent = script(model, unique("twins"),
                    ScriptedReply(tool_calls=[delegate("writer", f"{kids[0]}: go", "p1"),
                                              delegate("writer", f"{kids[1]}: go", "p2")]),
                    ScriptedReply(content="both: {last_tool}"))
    handle = await start(client, queue, parent)
    for _ in range(150):
        status = await handle.query(ConversationWorkflow.status)
        if len(status.pending_confirmations) == 2:
            return handle, titles
        await asyncio.sleep(0.1)
    raise AssertionError(f"the two children's calls never surfaced: {status}")


async def test_a_child_rejected_and_answered_through_the_api(
        client: Client, agents_queue: str, model: ScriptedModelServer, api: ApiServer):
    parent = delegating(model, "reject", "writer", "r1", [
        ScriptedReply(tool_calls=[tool_call("ask_confirm", {"message": "Write it?"})]),
        ScriptedReply(tool_calls=[tool_call("create_note", {"title": "no", "body": "b"})]),
        ScriptedReply(content="Gave up: {last_tool}")])
    handle = await start(client, agents_queue, parent)
    asking = await reaches(handle, "waiting_for_input", timeout_s=30)
    assert asking.pending_question.conversation_id == f"{handle.id}/r1"
    async with httpx.AsyncClient(base_url=api.url, timeout=30) as http:
        r = await http.post(f"/conversations/{handle.id}/answer", json={"values": ["yes"]})
        assert r.status_code == 200, r.text
        waiting = await reaches(handle, "waiting_for_confirmation", timeout_s=30)
        call_id = waiting.pending_confirmations[0].call_id
        schemas = (await http.get(f"/conversations/{handle.id}/schemas")).json()
        assert schemas[f"r1/{call_id}"]["required"] == ["title", "body"]  # by its parent, by ref
        r = await http.post(f"/conversations/{handle.id}/reject",
                            json={"call_ids": [call_id], "reason": "not now"})
        assert r.status_code == 200, r.text
        again = await http.post(f"/conversations/{handle.id}/reject",
                                json={"call_ids": [call_id], "reason": "twice"})
        assert again.status_code == 409  # the child refuses a decided call
    status = await settled(handle, timeout_s=30)
    assert status.final_answer == "Gave up: rejected by user: not now"


async def test_two_subagents_calls_with_one_id_are_told_apart(
        client: Client, agents_queue: str, model: ScriptedModelServer, api: ApiServer,
        cli, activity_settings):
    handle, titles = await two_writers(client, agents_queue, model)
    status = await handle.query(ConversationWorkflow.status)
    by_ref = {p.ref: p for p in status.pending_confirmations}
    assert set(by_ref) == {"p1/call_0", "p2/call_0"}
    assert by_ref["p2/call_0"].conversation_id == f"{handle.id}/p2"
    assert by_ref["p2/call_0"].args["title"] == titles[1]
    agui_ids = [i.id for i in interrupts(status, {})]
    assert sorted(agui_ids) == ["p1/call_0", "p2/call_0"]  # one interrupt each, told apart
    async with httpx.AsyncClient(base_url=api.url, timeout=30) as http:
        schemas = (await http.get(f"/conversations/{handle.id}/schemas")).json()
        assert set(schemas) == {"p1/call_0", "p2/call_0"}
        # The bare id is refused, naming both and how to pick one; nothing is decided.
        r = await http.post(f"/conversations/{handle.id}/confirm", json={"call_ids": ["call_0"]})
        assert r.status_code == 409, r.text
        assert "p1/call_0" in r.text and "p2/call_0" in r.text and "by its ref" in r.text
        assert len((await handle.query(ConversationWorkflow.status)).pending_confirmations) == 2
        # By its ref, the decision reaches the child whose call the human picked, and only it.
        r = await http.post(f"/conversations/{handle.id}/confirm",
                            json={"call_ids": ["p2/call_0"]})
        assert r.status_code == 200, r.text
        for _ in range(100):
            if note_rows(activity_settings.data_dir, titles[1]):
                break
            await asyncio.sleep(0.1)
        assert len(note_rows(activity_settings.data_dir, titles[1])) == 1
        assert note_rows(activity_settings.data_dir, titles[0]) == []
    # Through the child's own conversation id, its call id is its own.
    done = await cli("confirm", f"{handle.id}/p1", "call_0", "--as", "carol")
    assert done.returncode == 0, done.stderr
    final = await reaches(handle, "idle", timeout_s=60)
    assert final.stop_reason == "answered", final
    assert [len(note_rows(activity_settings.data_dir, t)) for t in titles] == [1, 1]
    await replay(handle, "subagents_with_one_call_id")


async def test_all_reaches_the_subagents_calls_from_the_api_and_the_cli(
        client: Client, agents_queue: str, model: ScriptedModelServer, api: ApiServer,
        cli, activity_settings):
    handle, titles = await two_writers(client, agents_queue, model)
    async with httpx.AsyncClient(base_url=api.url, timeout=30) as http:
        r = await http.post(f"/conversations/{handle.id}/confirm", json={"all": True})
        assert r.status_code == 200, r.text
    assert (await reaches(handle, "idle", timeout_s=60)).stop_reason == "answered"
    assert [len(note_rows(activity_settings.data_dir, t)) for t in titles] == [1, 1]

    handle, titles = await two_writers(client, agents_queue, model)
    done = await cli("reject", handle.id, "--all", "--reason", "no", "--as", "dan")
    assert done.returncode == 0, done.stderr
    final = await reaches(handle, "idle", timeout_s=60)
    assert final.stop_reason == "answered" and final.final_answer.count("rejected by user: no") == 1
    for kid in ("p1", "p2"):
        kid_status = await client.get_workflow_handle(f"{handle.id}/{kid}").query(
            ConversationWorkflow.status)
        assert [(d.approved, d.approver) for d in kid_status.decisions] == [(False, "dan")]
    assert [note_rows(activity_settings.data_dir, t) for t in titles] == [[], []]


async def test_a_grandchilds_approval_surfaces_at_the_top_and_is_decided_there(
        client: Client, agents_queue: str, model: ScriptedModelServer, api: ApiServer,
        activity_settings):
    title = unique("grandchild-note")
    writer = writing(model, title, call_id="g0")
    manager = script(model, unique("manager"),
                     ScriptedReply(tool_calls=[delegate("writer", f"{writer}: go", "w1")]),
                     ScriptedReply(content="manager: {last_tool}"))
    parent = script(model, unique("top"),
                    ScriptedReply(tool_calls=[delegate("manager", f"{manager}: go", "m1")]),
                    ScriptedReply(content="top: {last_tool}"))
    handle = await start(client, agents_queue, parent)
    waiting = await reaches(handle, "waiting_for_confirmation", timeout_s=60)
    [pending] = waiting.pending_confirmations
    assert (pending.ref, pending.conversation_id) == ("m1/w1/g0", f"{handle.id}/m1/w1")
    assert [c.status for c in waiting.children] == ["waiting_for_confirmation"]
    assert [i.id for i in interrupts(waiting, {})] == ["m1/w1/g0"]
    async with httpx.AsyncClient(base_url=api.url, timeout=30) as http:
        schemas = (await http.get(f"/conversations/{handle.id}/schemas")).json()
        assert schemas["m1/w1/g0"]["required"] == ["title", "body"]
        r = await http.post(f"/conversations/{handle.id}/confirm", json={"call_ids": ["m1/w1/g0"]})
        assert r.status_code == 200, r.text
    final = await reaches(handle, "idle", timeout_s=60)
    assert final.final_answer.startswith("top: manager: Created note"), final
    assert len(note_rows(activity_settings.data_dir, title)) == 1
    await replay(handle, "subagent_depth_two_approval_parent")
    await replay(client.get_workflow_handle(f"{handle.id}/m1"), "subagent_depth_two_approval_child")
