"""The official AG-UI TypeScript client (`@ag-ui/client` 1.0.0, its `HttpAgent`) against
`POST /agui` of a real API process, through tests/agui_client/drive.mjs.

Each test asserts on what the client saw (its events, its `pendingInterrupts`, its messages) and
on the server's state (note rows, the conversation's status, what the model read), and that the
client printed no warning or error at all: a client that warns about what we send is a client
that will drop it one day.

The driver runs with NODE_ENV unset, as an application would in production: the client then
catches a subscriber's exception and prints it (which the quiet check sees) instead of rethrowing
it, and does not deep-freeze its inputs. Nothing here needs the test-mode behaviour.
"""

from __future__ import annotations

import asyncio
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from durable_react_agent.testing import ScriptedModelServer, ScriptedReply, ScriptedToolCall
from tests.api_support import ROOT, ApiServer
from tests.helpers import note_rows, script, unique
from tests.npm_support import npm_installed

CLIENT_DIR = ROOT / "tests" / "agui_client"
STEP_TIMEOUT_S = 30
# What the client itself prints when a run's request fails (index.mjs, AbstractAgent.onError).
LOST_RESPONSE = "Agent execution failed: TypeError: fetch failed (simulated"


# ----- the client, installed from its lock file -----

@dataclass(frozen=True)
class AguiClient:
    node: str
    driver: Path


@pytest.fixture(scope="session")
def agui_client() -> AguiClient:
    """Node and the driver, installed from the lock file (`tests.npm_support`)."""
    node = npm_installed(CLIENT_DIR, "the AG-UI client")
    return AguiClient(node, CLIENT_DIR / "drive.mjs")


async def drive(client: AguiClient, api: ApiServer, thread: str, *steps: dict) -> dict:
    """Run the driver's steps on one HttpAgent; its result (see drive.mjs). Async, so that the
    worker, which shares this event loop, goes on serving the conversation meanwhile."""
    job = {"url": f"{api.url}/agui", "threadId": thread, "steps": list(steps),
           "stepTimeoutMs": STEP_TIMEOUT_S * 1000}
    proc = await asyncio.create_subprocess_exec(
        client.node, str(client.driver), cwd=CLIENT_DIR,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE, env={k: v for k, v in os.environ.items()
                                             if k != "NODE_ENV"})
    budget = STEP_TIMEOUT_S * 2 * len(steps) + 15  # the driver gives up on a step by itself first
    try:
        out, err = await asyncio.wait_for(proc.communicate(json.dumps(job).encode()), budget)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise AssertionError(f"the AG-UI client driver did not finish in {budget}s") from None
    assert proc.returncode == 0, f"the driver failed ({proc.returncode}): {err.decode()[-3000:]}"
    result = json.loads(out)
    for n, step in enumerate(result["steps"]):
        assert not step["attempts"][-1]["timedOut"], f"step {n} hung: {step}"
    assert len(result["steps"]) == len(steps)
    return result


# ----- reading the client's view -----

def only_attempt(step: dict) -> dict:
    attempt, = step["attempts"]
    return attempt


def of(attempt: dict, kind: str) -> list[dict]:
    return [e for e in attempt["events"] if e["type"] == kind]


def kinds(attempt: dict) -> list[str]:
    return [e["type"] for e in attempt["events"]]


def text_of(attempt: dict) -> str:
    return "".join(e["delta"] for e in of(attempt, "TEXT_MESSAGE_CONTENT"))


def announced(attempt: dict) -> dict[str, dict]:
    """The tool calls a run announced, by id: name and arguments, each START/ARGS/END."""
    calls: dict[str, dict] = {}
    for e in attempt["events"]:
        if e["type"] == "TOOL_CALL_START":
            calls[e["toolCallId"]] = {"name": e["toolCallName"], "args": "", "ended": False}
        elif e["type"] == "TOOL_CALL_ARGS":
            calls[e["toolCallId"]]["args"] += e["delta"]
        elif e["type"] == "TOOL_CALL_END":
            calls[e["toolCallId"]]["ended"] = True
    return {cid: {**c, "args": json.loads(c["args"])} for cid, c in calls.items()}


def results(attempt: dict) -> dict[str, str]:
    return {e["toolCallId"]: e["content"] for e in of(attempt, "TOOL_CALL_RESULT")}


def ended(attempt: dict) -> None:
    """A run the client completed, from RUN_STARTED to RUN_FINISHED."""
    assert attempt["rejected"] is None and attempt["runError"] is None, attempt
    assert kinds(attempt)[0] == "RUN_STARTED", kinds(attempt)
    assert kinds(attempt)[-1] == "RUN_FINISHED", kinds(attempt)


def succeeded(attempt: dict) -> str:
    """The answer of a run that ended in RUN_FINISHED with outcome success."""
    ended(attempt)
    assert attempt["finished"]["outcome"] == "success", attempt["finished"]
    return attempt["finished"]["result"]["answer"]


def interrupted(attempt: dict) -> list[dict]:
    """The interrupts of a run that ended in RUN_FINISHED with outcome interrupt."""
    ended(attempt)
    assert attempt["finished"]["outcome"] == "interrupt", attempt["finished"]
    return attempt["finished"]["interrupts"]


def assert_quiet(result: dict, lost: tuple[int, ...] = ()) -> None:
    """Nothing printed by the client, but for its own error on the attempts whose response the
    test lost on purpose (step n, attempt 0)."""
    expected = [p for p in result["console"] if p["step"] in lost and p["attempt"] == 0
                and p["level"] == "error" and p["text"].startswith(LOST_RESPONSE)]
    assert len(expected) == len(lost), result["console"]
    others = [p for p in result["console"] if p not in expected]
    assert others == [], "the AG-UI client printed:\n" + "\n".join(
        f"[{p['level']} step {p['step']} attempt {p['attempt']}] {p['text']}" for p in others)


# ----- the server's view -----

def model_read(model: ScriptedModelServer, trigger: str, call_id: str) -> str:
    """The tool message for `call_id` in the last request the model got for `trigger`."""
    last = [r for r in model.requests if r.trigger == trigger][-1]
    return next(m["content"] for m in last.body["messages"]
                if m.get("role") == "tool" and m.get("tool_call_id") == call_id)


async def conversation_status(api: ApiServer, thread: str) -> str:
    async with httpx.AsyncClient(base_url=api.url, timeout=30) as http:
        r = await http.get(f"/conversations/{thread}")
        assert r.status_code == 200, r.text
        return r.json()["status"]


def create_note(call_id: str, title: str, body: str = "b") -> ScriptedToolCall:
    return ScriptedToolCall(id=call_id, name="create_note",
                            arguments={"title": title, "body": body})


def approve(call_id: str, **payload: Any) -> dict:
    return {"interruptId": call_id, "status": "resolved", "payload": {"approved": True, **payload}}


def reject(call_id: str, reason: str) -> dict:
    return {"interruptId": call_id, "status": "resolved",
            "payload": {"approved": False, "reason": reason}}


def answer(call_id: str, value: Any) -> dict:
    return {"interruptId": call_id, "status": "resolved", "payload": {"answer": value}}


# ----- the flows -----

async def test_approve_with_edited_args(agui_client, api, model, activity_settings):
    call, title = unique("call"), unique("agui-client-note")
    trigger = script(model, unique("agui-client-approve"),
                     ScriptedReply(content="Let me save that.",
                                   tool_calls=[create_note(call, "draft")]),
                     ScriptedReply(content="Saved: {last_tool}"))
    thread = unique("agui-client")
    out = await drive(agui_client, api, thread, {"message": trigger},
                      {"resume": [approve(call, args={"title": title, "body": "from TS"})]})
    first, second = (only_attempt(s) for s in out["steps"])

    assert text_of(first) == "Let me save that."
    assert announced(first) == {call: {"name": "create_note",
                                       "args": {"title": "draft", "body": "b"}, "ended": True}}
    interrupt, = interrupted(first)
    assert interrupt["id"] == interrupt["toolCallId"] == call
    assert interrupt["reason"] == "tool_approval"
    assert out["steps"][0]["pendingInterrupts"] == [interrupt]

    assert announced(second) == {}  # announced by the first run
    assert results(second)[call].startswith("Created note")
    assert succeeded(second).startswith("Saved: Created note")
    assert out["steps"][1]["pendingInterrupts"] == []
    assert [r[1:] for r in note_rows(activity_settings.data_dir, title)] == [(title, "from TS")]
    assert await conversation_status(api, thread) == "idle"

    # The client's own transcript: the call on an assistant message, its result after it.
    holder = next(m for m in out["messages"]
                  if any(c["id"] == call for c in m.get("toolCalls", [])))
    tool = next(m for m in out["messages"] if m["role"] == "tool" and m["toolCallId"] == call)
    assert holder["role"] == "assistant"
    assert out["messages"].index(tool) > out["messages"].index(holder)
    assert_quiet(out)


async def test_two_calls_one_approved_one_rejected(agui_client, api, model, activity_settings):
    keep, drop = unique("call"), unique("call")
    kept, dropped = unique("agui-client-kept"), unique("agui-client-dropped")
    trigger = script(model, unique("agui-client-two"),
                     ScriptedReply(content="Two notes.", tool_calls=[create_note(keep, kept),
                                                                    create_note(drop, dropped)]),
                     ScriptedReply(content="Done."))
    thread = unique("agui-client")
    out = await drive(agui_client, api, thread, {"message": trigger},
                      {"resume": [approve(keep), reject(drop, "one is enough")]})
    first, second = (only_attempt(s) for s in out["steps"])

    calls = announced(first)
    assert list(calls) == [keep, drop] and all(c["ended"] for c in calls.values())
    interrupts = interrupted(first)
    assert [(i["id"], i["toolCallId"], i["reason"]) for i in interrupts] == [
        (keep, keep, "tool_approval"), (drop, drop, "tool_approval")]

    got = results(second)
    assert got[keep].startswith("Created note")
    assert got[drop] == "rejected by user: one is enough"
    assert succeeded(second) == "Done."
    assert model_read(model, trigger, drop) == "rejected by user: one is enough"
    assert len(note_rows(activity_settings.data_dir, kept)) == 1
    assert note_rows(activity_settings.data_dir, dropped) == []
    assert_quiet(out)


async def test_reject_with_a_reason(agui_client, api, model, activity_settings):
    call, title = unique("call"), unique("agui-client-note")
    trigger = script(model, unique("agui-client-reject"),
                     ScriptedReply(tool_calls=[create_note(call, title)]),
                     ScriptedReply(content="Heard: {last_tool}"))
    thread = unique("agui-client")
    out = await drive(agui_client, api, thread, {"message": trigger},
                      {"resume": [reject(call, "not today")]})
    first, second = (only_attempt(s) for s in out["steps"])

    assert [i["id"] for i in interrupted(first)] == [call]
    assert results(second) == {call: "rejected by user: not today"}
    assert succeeded(second) == "Heard: rejected by user: not today"
    assert model_read(model, trigger, call) == "rejected by user: not today"
    assert note_rows(activity_settings.data_dir, title) == []
    assert await conversation_status(api, thread) == "idle"
    assert_quiet(out)


async def test_questions_answered(agui_client, api, model):
    choice, confirm = unique("call"), unique("call")
    trigger = script(model, unique("agui-client-ask"),
                     ScriptedReply(tool_calls=[ScriptedToolCall(
                         id=choice, name="ask_choice",
                         arguments={"message": "Which colour?", "options": ["red", "green"]})]),
                     ScriptedReply(tool_calls=[ScriptedToolCall(
                         id=confirm, name="ask_confirm", arguments={"message": "Paint it?"})]),
                     ScriptedReply(content="Heard: {last_tool}"))
    thread = unique("agui-client")
    out = await drive(agui_client, api, thread, {"message": trigger},
                      {"resume": [answer(choice, "green")]},
                      {"resume": [answer(confirm, True)]})
    first, second, third = (only_attempt(s) for s in out["steps"])

    question, = interrupted(first)
    assert question["id"] == choice and question["reason"] == "input_required"
    assert question["message"] == "Which colour?"
    assert question["responseSchema"]["properties"]["answer"]["enum"] == ["red", "green"]
    assert out["steps"][0]["pendingInterrupts"] == [question]

    question, = interrupted(second)
    assert question["id"] == confirm and question["reason"] == "input_required"
    assert question["responseSchema"]["properties"]["answer"] == {"type": "boolean"}
    assert model_read(model, trigger, choice) == "green"

    assert succeeded(third) == "Heard: yes"
    assert out["steps"][2]["pendingInterrupts"] == []
    assert await conversation_status(api, thread) == "idle"
    assert_quiet(out)


async def test_a_question_declined_goes_on(agui_client, api, model):
    call = unique("call")
    trigger = script(model, unique("agui-client-decline"),
                     ScriptedReply(tool_calls=[ScriptedToolCall(
                         id=call, name="ask_confirm", arguments={"message": "Proceed?"})]),
                     ScriptedReply(content="Heard: {last_tool}"))
    thread = unique("agui-client")
    out = await drive(agui_client, api, thread, {"message": trigger},
                      {"resume": [{"interruptId": call, "status": "cancelled"}]})
    first, second = (only_attempt(s) for s in out["steps"])

    assert [i["reason"] for i in interrupted(first)] == ["input_required"]
    assert of(second, "RUN_ERROR") == []
    assert succeeded(second).startswith("Heard: no answer: the user declined")
    assert model_read(model, trigger, call).startswith("no answer: the user declined")
    assert out["steps"][1]["pendingInterrupts"] == []
    assert await conversation_status(api, thread) == "idle"
    assert_quiet(out)


async def test_a_lost_response_retried(agui_client, api, model, activity_settings):
    """The approval's response is lost after the server ran it; the client sends the same
    resume under the same runId, and must see what the first attempt would have shown: here the
    next interrupt. Then the second approval is lost too, and its retry ends in the answer."""
    first_call, second_call = unique("call"), unique("call")
    first_title, second_title = unique("agui-client-first"), unique("agui-client-second")
    trigger = script(model, unique("agui-client-lost"),
                     ScriptedReply(tool_calls=[create_note(first_call, first_title)]),
                     ScriptedReply(tool_calls=[create_note(second_call, second_title)]),
                     ScriptedReply(content="Both saved."),
                     ScriptedReply(content="You are welcome."))
    thread = unique("agui-client")
    out = await drive(agui_client, api, thread, {"message": trigger},
                      {"resume": [approve(first_call)], "loseResponse": True},
                      {"resume": [approve(second_call)], "loseResponse": True},
                      {"message": "thanks"})
    start, first, second, thanks = out["steps"]

    assert [i["id"] for i in interrupted(only_attempt(start))] == [first_call]
    for step in (first, second):
        lost, retried = step["attempts"]
        assert lost["rejected"]["name"] == "TypeError" and lost["events"] == []
        assert of(retried, "RUN_ERROR") == [], of(retried, "RUN_ERROR")
    assert [i["id"] for i in interrupted(first["attempts"][1])] == [second_call]
    assert first["pendingInterrupts"][0]["id"] == second_call
    assert succeeded(second["attempts"][1]) == "Both saved."
    assert second["pendingInterrupts"] == []
    assert succeeded(only_attempt(thanks)) == "You are welcome."  # the client is not stuck

    assert len(note_rows(activity_settings.data_dir, first_title)) == 1
    assert len(note_rows(activity_settings.data_dir, second_title)) == 1
    assert model.count(trigger) == 4  # no step of the turn ran twice
    assert await conversation_status(api, thread) == "idle"
    assert_quiet(out, lost=(1, 2))


async def test_an_unknown_interrupt_in_a_resume_is_ignored(agui_client, api, model,
                                                           activity_settings):
    call, title, stranger = unique("call"), unique("agui-client-note"), unique("call-unknown")
    trigger = script(model, unique("agui-client-unknown"),
                     ScriptedReply(tool_calls=[create_note(call, title)]),
                     ScriptedReply(content="Saved."))
    thread = unique("agui-client")
    out = await drive(agui_client, api, thread, {"message": trigger},
                      {"resume": [approve(stranger), approve(call)]})
    first, second = (only_attempt(s) for s in out["steps"])

    assert [i["id"] for i in interrupted(first)] == [call]
    assert of(second, "RUN_ERROR") == []
    assert results(second)[call].startswith("Created note")
    assert succeeded(second) == "Saved."
    finished, = of(second, "RUN_FINISHED")
    assert stranger in json.dumps(finished.get("metadata")), finished
    assert len(note_rows(activity_settings.data_dir, title)) == 1
    assert_quiet(out)


async def test_run_started_names_the_protocol_version(agui_client, api, model):
    trigger = script(model, unique("agui-client-hello"), ScriptedReply(content="Hello."),
                     ScriptedReply(content="Again."))
    out = await drive(agui_client, api, unique("agui-client"), {"message": trigger},
                      {"message": "once more"})
    runs = [only_attempt(s) for s in out["steps"]]
    assert [succeeded(r) for r in runs] == ["Hello.", "Again."]
    for run in runs:
        started, = of(run, "RUN_STARTED")
        assert started.get("protocolVersion") == "1.0", started
    assert_quiet(out)
