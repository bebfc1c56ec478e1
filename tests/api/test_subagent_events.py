"""The API's event stream with subagents: their events come inline, marked with the agent and its
conversation, without ids, so resuming by Last-Event-ID works on the parent's events as before."""

from __future__ import annotations

import json

import httpx
from temporalio.client import Client

from durable_react_agent.testing import ScriptedModelServer, ScriptedReply
from tests.api_support import ApiServer, sse_events
from tests.helpers import script, start, unique
from tests.subagent_support import delegate, delegating


async def whole_stream(http: httpx.AsyncClient, cid: str, last_event_id: int | None = None
                       ) -> tuple[list[dict], list[dict]]:
    """A finished conversation's stream: its own events (with their ids) and its subagents'."""
    headers = {} if last_event_id is None else {"Last-Event-ID": str(last_event_id)}
    async with http.stream("GET", f"/conversations/{cid}/events", headers=headers) as r:
        assert r.status_code == 200
        body = "".join([chunk async for chunk in r.aiter_text()])
    *events, end = sse_events(body)
    assert end["event"] == "end"
    own = [{"id": int(e["id"]), **json.loads(e["data"])} for e in events if "id" in e]
    subs = [json.loads(e["data"]) for e in events if "id" not in e]
    assert all(e["event"] == d["kind"] for e, d in zip([e for e in events if "id" not in e], subs))
    return own, subs


def by_agent(subs: list[dict]) -> dict[str, list[dict]]:
    agents: dict[str, list[dict]] = {}
    for d in subs:
        agents.setdefault(d["agent"], []).append(d)
    return agents


async def test_a_subagents_events_come_inline_and_resuming_follows_the_parents_ids(
        client: Client, agents_queue: str, model: ScriptedModelServer,
        api: ApiServer):
    writer = script(model, unique("tree-writer"), ScriptedReply(content="drafted"))
    parent = delegating(model, "tree", "manager", "m1", [
        ScriptedReply(tool_calls=[delegate("writer", f"{writer}: go", "w1")]),
        ScriptedReply(content="manager: {last_tool}")], "top: {last_tool}")
    handle = await start(client, agents_queue, parent, one_shot=True)
    cid = handle.id
    async with httpx.AsyncClient(base_url=api.url, timeout=60) as http:
        own, subs = await whole_stream(http, cid)  # followed live, from the start
        assert [e["id"] for e in own] == list(range(len(own)))
        assert not any("agent" in e or "conversation_id" in e for e in own)
        assert own[-1]["kind"] == "turn_finished" and own[-1]["text"] == "top: manager: drafted"
        # Each subagent's whole stream, marked with its path and its own conversation.
        agents = by_agent(subs)
        assert {a: {d["conversation_id"] for d in ds} for a, ds in agents.items()} == {
            "manager": {f"{cid}/m1"}, "manager/writer": {f"{cid}/m1/w1"}}
        for agent, answer in (("manager", "manager: drafted"), ("manager/writer", "drafted")):
            mine = agents[agent]
            assert mine[0]["kind"] == "turn_started" and mine[-1]["kind"] == "turn_finished"
            assert mine[-1]["text"] == answer
        assert [d["kind"] for d in agents["manager"]].count("child_started") == 1

        # Resumed just before the parent announced its subagent: the subagents again, in full.
        [announced] = [e["id"] for e in own if e["kind"] == "child_started"]
        again, subs_again = await whole_stream(http, cid, last_event_id=announced - 1)
        assert [e["id"] for e in again] == [e["id"] for e in own if e["id"] >= announced]
        assert by_agent(subs_again) == agents
        # Resumed after it: the parent's later events, by id, and none of its subagent's.
        after, subs_after = await whole_stream(http, cid, last_event_id=announced)
        assert after == [e for e in own if e["id"] > announced]
        assert subs_after == []
