"""AG-UI over SSE (`POST /agui`): every event parsed with the `ag-ui-protocol` package's own
models. An interrupt and its resume go to two different API processes."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
from ag_ui.core import EventType
from temporalio.service import RPCError

from durable_react_agent.testing import ScriptedModelServer, ScriptedReply
from tests.api_support import ApiServer, agui_run, of, user
from tests.helpers import first_token, note_rows, replay, script, tool_call, unique, until

run = agui_run


@pytest.fixture
async def http(api: ApiServer):
    async with httpx.AsyncClient(base_url=api.url, timeout=60) as c:
        yield c


@pytest.fixture
async def two_apis(api: ApiServer, temporal_address: str, task_queue: str):
    """The session's API and a second API process: a run and its resume may reach either."""
    second = ApiServer(temporal_address, task_queue).start()
    try:
        async with httpx.AsyncClient(base_url=api.url, timeout=60) as a, \
                httpx.AsyncClient(base_url=second.url, timeout=60) as b:
            yield a, b
    finally:
        second.stop()


async def test_interrupt_on_one_api_resumed_on_another(two_apis, model: ScriptedModelServer,
                                                       activity_settings, client):
    first, second = two_apis
    title = unique("agui-note")
    trigger = script(model, unique("agui"),
                     ScriptedReply(content="Let me save that.",
                                   tool_calls=[tool_call("create_note", {"title": "draft",
                                                                         "body": "b"})]),
                     ScriptedReply(content="Saved: {last_tool}"),
                     ScriptedReply(content="You are welcome."))
    thread = unique("agui-thread")
    messages = [user("m1", trigger)]

    events = await run(first, thread, messages)
    text = "".join(e.delta for e in of(events, EventType.TEXT_MESSAGE_CONTENT))
    assert text == "Let me save that."
    assert len(of(events, EventType.TEXT_MESSAGE_START)) == len(of(events, EventType.TEXT_MESSAGE_END))
    start, = of(events, EventType.TOOL_CALL_START)
    assert start.tool_call_name == "create_note"
    args = "".join(e.delta for e in of(events, EventType.TOOL_CALL_ARGS))
    assert json.loads(args) == {"title": "draft", "body": "b"}
    assert of(events, EventType.TOOL_CALL_END)[0].tool_call_id == start.tool_call_id
    finished = events[-1]
    assert finished.type == EventType.RUN_FINISHED and finished.outcome.type == "interrupt"
    interrupt, = finished.outcome.interrupts
    assert interrupt.id == interrupt.tool_call_id == start.tool_call_id
    assert interrupt.reason == "tool_approval"
    schema = interrupt.response_schema
    assert schema["required"] == ["approved"]
    assert schema["properties"]["args"]["properties"]["title"]["type"] == "string"

    approve = [{"interruptId": interrupt.id, "status": "resolved",
                "payload": {"approved": True, "args": {"title": title, "body": "via AG-UI"}}}]
    resume_run = unique("run")
    events = await run(second, thread, messages, resume=approve, run_id=resume_run)
    assert not of(events, EventType.TOOL_CALL_START)  # announced by the first run
    result, = of(events, EventType.TOOL_CALL_RESULT)
    assert result.tool_call_id == interrupt.id and result.content.startswith("Created note")
    assert "".join(e.delta for e in of(events, EventType.TEXT_MESSAGE_CONTENT)).startswith("Saved:")
    assert events[-1].type == EventType.RUN_FINISHED and events[-1].outcome.type == "success"
    assert events[-1].result["answer"].startswith("Saved: Created note")
    assert [r[1:] for r in note_rows(activity_settings.data_dir, title)] == [(title, "via AG-UI")]
    history = (await first.get(f"/conversations/{thread}/history")).json()
    decision = next(a["decision"] for r in history for a in r["actions"] if a["decision"])
    assert decision["approver"] == "anonymous"

    # The same resume sent again (its response was lost) answers as the first did, and a client
    # still holding the old interrupt is told it is gone, not refused: it is never stuck.
    again = await run(first, thread, messages, resume=approve, run_id=resume_run)
    assert again[-1].type == EventType.RUN_FINISHED and again[-1].result == events[-1].result
    ignored, = again[-1].metadata["ignoredResume"]
    assert ignored["interruptId"] == interrupt.id and "no open interrupt" in ignored["reason"]
    stale = await run(second, thread, messages, resume=approve)
    assert stale[-1].type == EventType.RUN_FINISHED and stale[-1].result == events[-1].result
    assert len(note_rows(activity_settings.data_dir, title)) == 1

    calls = model.count(trigger)
    retried = await run(second, thread, messages)  # the first run's message, sent again
    assert retried[-1].type == EventType.RUN_FINISHED and model.count(trigger) == calls

    messages.append(user("m2", "thanks"))
    events = await run(first, thread, messages)
    assert events[-1].type == EventType.RUN_FINISHED
    assert events[-1].result["answer"] == "You are welcome."
    status = (await first.get(f"/conversations/{thread}")).json()
    assert status["turn"] == 2 and status["status"] == "idle"

    assert (await first.post(f"/conversations/{thread}/end", json={})).status_code == 200
    handle = client.get_workflow_handle(thread)
    await handle.result()
    await replay(handle, "agui_interrupt_resume")  # a start with a request id, two Update decisions


async def test_questions_refusals_and_cancelled_interrupts(two_apis, model: ScriptedModelServer,
                                                           client):
    first, second = two_apis
    trigger = script(model, unique("agui-ask"),
                     ScriptedReply(tool_calls=[tool_call("ask_confirm", {"message": "Proceed?"})]),
                     ScriptedReply(tool_calls=[tool_call("delete_note", {"note_id": 99})]),
                     ScriptedReply(tool_calls=[tool_call("ask_input", {"message": "Why?"})]),
                     ScriptedReply(content="Heard: {last_tool}"))
    thread = unique("agui-thread")
    messages = [user("q1", trigger)]
    events = await run(first, thread, messages)
    question, = events[-1].outcome.interrupts
    assert question.reason == "input_required" and question.message == "Proceed?"
    assert question.response_schema["properties"]["answer"] == {"type": "boolean"}

    refused = await run(second, thread, messages, resume=[
        {"interruptId": question.id, "status": "resolved", "payload": {"answer": "maybe"}}])
    assert refused[-1].type == EventType.RUN_ERROR and "yes or no" in refused[-1].message
    malformed = await run(second, thread, messages, resume=[
        {"interruptId": question.id, "status": "resolved", "payload": {"answer": {"x": 1}}}])
    assert malformed[-1].type == EventType.RUN_ERROR and malformed[-1].code == "bad_request"
    busy = await run(second, thread, [*messages, user("q2", "hello?")])
    assert busy[-1].type == EventType.RUN_ERROR and "resume its interrupts" in busy[-1].message

    events = await run(second, thread, messages, resume=[
        {"interruptId": question.id, "status": "resolved", "payload": {"answer": True}}])
    approval, = events[-1].outcome.interrupts
    assert approval.reason == "tool_approval" and approval.metadata["tool"] == "delete_note"
    assert approval.metadata["risk"] == "destructive"

    events = await run(first, thread, messages, resume=[
        {"interruptId": approval.id, "status": "cancelled"}])
    result, = of(events, EventType.TOOL_CALL_RESULT)
    assert result.content == "rejected by user: cancelled"
    why, = events[-1].outcome.interrupts
    assert why.reason == "input_required" and why.message == "Why?"

    # A question cancelled is withdrawn: the model reads that the user declined, and goes on.
    events = await run(second, thread, messages, resume=[
        {"interruptId": why.id, "status": "cancelled"}])
    assert events[-1].type == EventType.RUN_FINISHED and events[-1].outcome.type == "success"
    assert events[-1].result["answer"] == "Heard: no answer: the user declined to answer"
    status = (await first.get(f"/conversations/{thread}")).json()
    assert status["status"] == "idle" and status["pending_question"] is None

    assert (await first.post(f"/conversations/{thread}/end", json={})).status_code == 200
    handle = client.get_workflow_handle(thread)
    await handle.result()
    await replay(handle, "agui_question_declined")


async def test_every_pending_call_is_announced_and_a_resume_applies_as_a_whole(
        two_apis, model: ScriptedModelServer, activity_settings):
    first, second = two_apis
    kept, dropped = unique("agui-kept"), unique("agui-dropped")
    trigger = script(model, unique("agui-two"),
                     ScriptedReply(tool_calls=[
                         tool_call("create_note", {"title": kept, "body": "1"}),
                         tool_call("create_note", {"title": dropped, "body": "2"})]),
                     ScriptedReply(content="Done: {last_tool}"))
    thread = unique("agui-thread")
    messages = [user("t1", trigger)]
    events = await run(first, thread, messages)
    starts = of(events, EventType.TOOL_CALL_START)
    assert [s.tool_call_name for s in starts] == ["create_note", "create_note"]
    assert [e.tool_call_id for e in of(events, EventType.TOOL_CALL_END)] == \
        [s.tool_call_id for s in starts]
    args = {e.tool_call_id: json.loads(e.delta) for e in of(events, EventType.TOOL_CALL_ARGS)}
    a, b = events[-1].outcome.interrupts
    assert [a.id, b.id] == [s.tool_call_id for s in starts]
    assert args[a.id]["title"] == kept and args[b.id]["title"] == dropped

    async def pending() -> list[str]:
        status = (await first.get(f"/conversations/{thread}")).json()
        return [p["call_id"] for p in status["pending_confirmations"]]

    approve_a = {"interruptId": a.id, "status": "resolved", "payload": {"approved": True}}
    # Checked as a whole before anything is sent: a bad entry after a good one applies neither,
    bad = await run(second, thread, messages, resume=[
        approve_a, {"interruptId": b.id, "status": "resolved", "payload": {"approved": "yes"}}])
    assert bad[-1].type == EventType.RUN_ERROR and bad[-1].code == "bad_request"
    # and so does a resume that leaves an open interrupt unanswered.
    partial = await run(second, thread, messages, resume=[approve_a])
    assert partial[-1].type == EventType.RUN_ERROR and b.id in partial[-1].message
    assert await pending() == [a.id, b.id] and not note_rows(activity_settings.data_dir, kept)

    # An entry naming no open interrupt is ignored (and said so); the order does not matter.
    events = await run(first, thread, messages, resume=[
        {"interruptId": "call_nope", "status": "resolved", "payload": {"approved": True}},
        {"interruptId": b.id, "status": "resolved",
         "payload": {"approved": False, "reason": "one is enough"}},
        approve_a])
    assert events[-1].type == EventType.RUN_FINISHED and events[-1].outcome.type == "success"
    assert [i["interruptId"] for i in events[-1].metadata["ignoredResume"]] == ["call_nope"]
    results = {r.tool_call_id: r.content for r in of(events, EventType.TOOL_CALL_RESULT)}
    assert results[b.id] == "rejected by user: one is enough"
    assert results[a.id].startswith("Created note")
    assert len(note_rows(activity_settings.data_dir, kept)) == 1
    assert not note_rows(activity_settings.data_dir, dropped)


@pytest.mark.parametrize("thread", ["a/b", "../x", "with space", "a?b", "a#b", "line\nbreak",
                                    "%d%s", "", "x" * 201, "conv-\u00e9"])
async def test_a_thread_id_is_checked_like_a_rest_id(http: httpx.AsyncClient, client,
                                                     thread: str):
    events = await run(http, thread, [user("m1", "hello")])
    assert events[-1].type == EventType.RUN_ERROR and events[-1].code == "bad_request"
    assert "threadId" in events[-1].message
    if thread:
        with pytest.raises(RPCError):  # nothing started
            await client.get_workflow_handle(thread).describe()


@pytest.mark.parametrize("text", ["", "   \n\t", "x" * (256 * 1024 + 1)])
async def test_a_first_message_refused_ends_the_run(http: httpx.AsyncClient, client, text: str):
    """Not RUN_STARTED and then silence: the run ends, and no conversation is left at turn 0."""
    thread = unique("agui-refused")
    events = await run(http, thread, [user("m1", text)])
    assert events[-1].type == EventType.RUN_ERROR and events[-1].code == "bad_request"
    assert "message" in events[-1].message
    with pytest.raises(RPCError):
        await client.get_workflow_handle(thread).describe()


async def test_a_new_thread_needs_a_message(http: httpx.AsyncClient):
    events = await run(http, unique("agui-empty"), [])
    assert events[-1].type == EventType.RUN_ERROR and "user message" in events[-1].message
    unknown = await run(http, unique("agui-none"), [], resume=[
        {"interruptId": "call_x", "status": "resolved", "payload": {"approved": True}}])
    assert unknown[-1].code == "not_found"
    bad = await http.post("/agui", json={"threadId": "t"})
    assert bad.status_code == 422


async def test_a_run_whose_turn_is_stopped_finishes_cancelled(http: httpx.AsyncClient, client,
                                                           model: ScriptedModelServer):
    """`stop` (issue 50) ends the run with AG-UI's `cancelled` outcome: neither a success nor an
    interrupt, so the next run on the thread is a new one."""
    thread = unique("agui-stop")
    trigger = script(model, unique("agui-stop"),
                     ScriptedReply(content="A long reply, said slowly.", stream_pause_s=60))
    running = asyncio.create_task(run(http, thread, [user("m1", trigger)]))

    async def started() -> bool:
        try:
            return bool(await client.get_workflow_handle(thread).describe())
        except RPCError:
            return False

    await until(started, what="the run's conversation")
    await first_token(client, thread)
    stopped = await http.post(f"/conversations/{thread}/stop", json={})
    assert stopped.json()["reason"] == "turn 1 stopped"
    events = await asyncio.wait_for(running, 60)
    assert events[-1].type == EventType.RUN_FINISHED and events[-1].outcome.type == "cancelled"
    assert events[-1].result["stop_reason"] == "stopped"
    await http.post(f"/conversations/{thread}/end", json={})
