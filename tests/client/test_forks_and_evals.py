"""Forks and evals over recorded conversations: a conversation exports to a case, a fork goes on
from the original's messages before a step and runs none of them again, and an eval runs a
case again as a real conversation, answered from its recording: green against the model that
recorded it (no tool run, no Open-Meteo reached), red with the differing call named against one
that behaves differently."""

from __future__ import annotations

import asyncio
import json
import os
from datetime import UTC, datetime
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest
from playwright.async_api import expect
from temporalio.client import WorkflowExecutionStatus

from durable_react_agent.activities.tools import default_registry
from durable_react_agent.client.cases import export
from durable_react_agent.client.connection import TemporalSettings
from durable_react_agent.client.session import Session
from durable_react_agent.contract import ConfirmRequest, RejectRequest
from durable_react_agent.contract.case import Case, load_case
from durable_react_agent.testing import ScriptedModelServer, ScriptedReply
from durable_react_agent.worker.evals import JUDGE_MARK
from durable_react_agent.workflows.conversation import ConversationWorkflow
from tests.cli_support import EVALS, eval_env
from tests.console_support import call, screenshot
from tests.helpers import (
    note_rows,
    replay,
    script,
    settled,
    start,
    tool_call,
    unique,
)


def evaluating(cli, env: dict[str, str]):
    """`agent eval ...` as the `cli` fixture runs it, with the eval worker's `env`."""
    return lambda *args: cli("eval", *args, extra_env=env, timeout=180)


async def weather_note(client, task_queue: str, tag: str) -> str:
    """The offline model's weather-and-note conversation, its write approved by alice."""
    handle = await start(client, task_queue, f"Check the weather in Paris and save it as a "
                         f"note titled '{tag}'", owner="alice")
    waiting = await settled(handle)
    assert waiting.status == "waiting_for_confirmation", waiting
    await handle.signal(ConversationWorkflow.confirm,
                        ConfirmRequest(request_id="r1", all=True, approver="alice"))
    done = await settled(handle, turn=1)
    for _ in range(100):
        if done.status == "idle":
            break
        await asyncio.sleep(0.1)
        done = await settled(handle, turn=1)
    assert done.status == "idle" and done.final_answer, done
    return handle.id


async def test_a_conversation_exports_then_evals_green_without_tools_and_red_when_it_differs(
        client, task_queue, model, cli, tmp_path):
    tag = unique("weather")
    cid = await weather_note(client, task_queue, tag)
    path = tmp_path / "case.json"
    exported = await cli("export", cid, "--out", str(path))
    assert exported.returncode == 0, exported.stderr
    case = load_case(path.read_text())
    assert [c.tool for c in case.calls()] == ["get_weather", "create_note"]
    weather, note = case.calls()
    assert "Paris" in json.dumps(weather.args) and "°C" in (weather.result or "")
    assert note.decision is not None and note.decision.approved and note.decision.by == "alice"
    assert note.result and "Created note" in note.result
    assert [s.index for s in case.steps] == [1, 2, 3] and case.turns[0].message.endswith(f"'{tag}'")
    assert case.final_answer and "Saved" in case.final_answer and case.usage.total_tokens > 0
    assert "sk-" not in path.read_text()

    data = tmp_path / "eval-data"
    evaluate = evaluating(cli, eval_env(model, data))
    geocoded = model.geocoding_calls
    report, junit = tmp_path / "report.json", tmp_path / "junit.xml"
    green = await evaluate(str(path), "--report", str(report), "--junit", str(junit))
    assert green.returncode == 0, green.stdout + green.stderr
    result = json.loads(report.read_text())
    assert result["passed"] == 1 and result["results"][0]["passed"]
    assert note_rows(data) == [] and model.geocoding_calls == geocoded  # none ran or reached
    assert ET.parse(junit).getroot().get("failures") == "0"

    # an LLM judge of the final answer (here the scripted model, keyed on the judge's request)
    script(model, JUDGE_MARK, ScriptedReply(content="PASS: it says the same."))
    judged = await evaluate(str(path), "--answer", "judge", "--report", str(report))
    assert judged.returncode == 0, judged.stdout + judged.stderr
    checks = json.loads(report.read_text())["results"][0]["checks"]
    assert [c["detail"] for c in checks if c["name"] == "final answer"] == [
        "the judge (default) said: PASS: it says the same."]

    # a recorded decision the gate refuses (edited args the schema refuses) ends the case, and
    # its conversation, which would otherwise wait for a decision on a queue nobody polls
    note.decision.edited_args = {"title": 5}
    (odd := tmp_path / "refused.json").write_text(case.dump())
    refused = await evaluate(str(odd), "--report", str(report))
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert "error: the decision on create_note the case recorded was refused" in refused.stdout
    left = json.loads(report.read_text())["results"][0]["conversation_id"]
    ended = await client.get_workflow_handle(left).describe()
    assert ended.status == WorkflowExecutionStatus.COMPLETED, ended.status

    # The same case against a model that checks Lyon's weather instead: red, the call named
    script(model, tag, ScriptedReply(tool_calls=[tool_call("get_weather", {"location": "Lyon"})]),
           ScriptedReply(content="Lyon is fine."))
    red = await evaluate(str(path), "--report", str(report), "--junit", str(junit))
    assert red.returncode == 1, red.stdout + red.stderr
    assert 'call 1: expected get_weather({"location":"Paris"' in red.stdout
    assert 'got get_weather({"location":"Lyon"})' in red.stdout
    failed = json.loads(report.read_text())["results"][0]
    assert not failed["passed"] and any(not c["passed"] for c in failed["checks"])
    assert ET.parse(junit).getroot().get("failures") == "1"
    assert note_rows(data) == []
    # it says so when the pass rate is allowed lower
    lenient = await evaluate(str(path), "--min-pass", "0")
    assert lenient.returncode == 0, lenient.stdout + lenient.stderr


async def test_an_eval_serves_the_queue_of_a_rate_limited_model_entry(
        client, model, cli, tmp_path):
    """With `max_requests_per_s` on the entry, a case's model calls go to the entry's own task
    queue beside the eval's: the eval's workers serve it, as `agent-worker` does."""
    models = tmp_path / "models.json"
    models.write_text(json.dumps({"models": {"limited": {
        "model": "scripted", "base_url": model.base_url, "max_requests_per_s": 20}}}))
    evaluate = evaluating(cli, {**eval_env(model, tmp_path), "AGENT_MODELS": str(models)})
    done = await evaluate(str(EVALS / "passing" / "weather_paris.json"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "passed 1/1" in done.stdout


async def test_a_fork_sends_the_original_prefix_to_its_model_and_reruns_nothing(
        client, task_queue, model, cli):
    tag = unique("fork")
    handle = await start(client, task_queue, f"How warm is it? {tag}", owner="alice")
    script(model, tag,
           ScriptedReply(content="Let me look.",
                         tool_calls=[tool_call("get_weather", {"location": "Paris"})]),
           ScriptedReply(content="It is mild in Paris."))
    done = await settled(handle)
    assert done.final_answer == "It is mild in Paris.", done
    original = [r for r in model.requests if r.trigger == tag]
    assert len(original) == 2
    geocoded = model.geocoding_calls

    forked = await cli("fork", handle.id, "--at-step", "2", "--id", f"{tag}-b",
                       "--system-prompt", "You are terse.", "--as", "bob", "--json")
    assert forked.returncode == 0, forked.stderr
    fork = client.get_workflow_handle(f"{tag}-b")
    status = await settled(fork)
    # the scripted model answers by the prompt's steps: the fork's prompt is the original's
    assert status.final_answer == "It is mild in Paris.", status
    assert (status.forked_from, status.at_step, status.owner) == (handle.id, 2, "bob")
    asked = [r for r in model.requests if r.trigger == tag][2:]
    assert len(asked) == 1  # one model call, the fork's, and no tool run again
    sent, before = asked[0].body["messages"], original[1].body["messages"]
    assert sent[0] == {"role": "system", "content": "You are terse."}
    assert sent[1:] == before[1:]  # the original's prefix, the weather's observation in it
    assert model.geocoding_calls == geocoded
    history = await fork.fetch_history()
    assert not [e for e in history.events if e.activity_task_scheduled_event_attributes
                .activity_type.name == "get_weather"]
    await replay(fork, "fork")


async def test_bad_cases_and_forks_are_refused_with_nothing_started(
        client, task_queue, model, cli, tmp_path):
    tag = unique("bad")
    handle = await start(client, task_queue, f"Just answer. {tag}")
    script(model, tag, ScriptedReply(content="Answered."))
    await settled(handle)
    past = await cli("fork", handle.id, "--at-step", "2")
    assert past.returncode == 2 and "has 1 step(s)" in past.stderr, past.stderr
    unknown = await cli("fork", f"no-such-{tag}", "--at-step", "1")
    assert unknown.returncode == 1 and "no such conversation" in unknown.stderr

    evaluate = evaluating(cli, eval_env(model, tmp_path))
    since = datetime.now(UTC).isoformat()
    good = json.loads((await cli("export", handle.id)).stdout)
    files = {  # each with what its refusal says
        "future.json": (json.dumps({**good, "version": 99}), "version 99"),
        "cut.json": (json.dumps(good)[:200], "cut short"),
        "alien.json": (json.dumps({**good, "steps": [{**good["steps"][0], "calls": [
            {"id": "c1", "tool": "launch_rockets", "args": {}}]}]}), "launch_rockets"),
        # the rest of what a case file may hold is generated in tests/client/test_eval_cases.py
        "deep.json": ("[" * 100_000 + "]" * 100_000, "deep.json nests too deeply"),
    }
    for name, (text, said) in files.items():
        (tmp_path / name).write_text(text)
        refused = await evaluate(str(tmp_path / name))
        assert refused.returncode == 2 and said in refused.stderr, (name, refused.stderr)
    listed = [w async for w in client.list_workflows(
        f'TaskQueue STARTS_WITH "{task_queue}-eval" AND StartTime > "{since}"')]
    assert listed == []  # nothing was started


def test_a_case_of_another_schema_is_refused_clearly():
    with pytest.raises(Exception, match="not a case"):
        load_case('{"schema": "something-else", "version": 1}')
    case = Case(name="n", conversation_id="c")
    assert load_case(case.dump()) == case


async def test_the_console_exports_a_case_and_forks_from_a_step_of_the_audit(
        api, model: ScriptedModelServer, console):
    """In a real browser: the audit trail offers "Fork from here" on each step and "Export as a
    case"; the fork opens, says where it came from, and answers from the original's prefix."""
    tag = unique("console-fork")
    script(model, tag,
           ScriptedReply(content="Looking.",
                         tool_calls=[tool_call("get_weather", {"location": "Oslo"})]),
           ScriptedReply(content="Oslo is cold."))
    page = console.page
    await page.goto(f"{api.url}/")
    cid = await console.start(f"Weather please ({tag}).")
    await expect(page.get_by_test_id("chat").get_by_test_id("final-answer")).to_have_text(
        "Oslo is cold.")
    await page.get_by_test_id("tab-audit").click()
    forks = page.get_by_test_id("audit").get_by_test_id("fork-here")
    await expect(forks).to_have_count(2)
    async with page.expect_download() as download:
        await page.get_by_test_id("export-case").click()
    case = load_case(Path(await (await download.value).path()).read_text())
    assert case.conversation_id == cid and [c.tool for c in case.calls()] == ["get_weather"]

    await forks.nth(1).click()  # turn 1, step 2: after the weather came back
    await expect(page.get_by_test_id("conversation")).not_to_have_attribute("data-id", cid)
    await expect(page.get_by_test_id("facts")).to_contain_text(
        f"forked from {cid} at step 2")
    await expect(page.get_by_test_id("chat").get_by_test_id("final-answer")).to_have_text(
        "Oslo is cold.")
    await screenshot(page, "fork.png")
    assert console.errors == []
    # the API: another's conversation is not there to export or fork (404)
    other = await call("GET", f"{api.url}/conversations/no-such-{tag}/export")
    assert other.status_code == 404
    past = await call("POST", f"{api.url}/conversations/{cid}/fork", json={"at_step": 9})
    assert past.status_code == 409 and "has 2 step(s)" in past.text


EXAMPLES = {  # evals/passing: recorded from the offline model (UPDATE_EVALS=1 records them again)
    "weather_paris": ("What is the weather in Paris?", None),
    "weather_note_approved": ("Check the weather in Tokyo and save it as a note titled 'Tokyo'",
                              True),
    "note_rejected": ("Save a note titled 'Groceries' saying: milk, eggs", False),
}


async def record_examples(client, task_queue: str) -> None:
    """Record the example cases of evals/ from the offline model, and the one that fails on
    purpose: the weather case, edited to expect Lyon's weather."""
    session = Session(client, TemporalSettings(task_queue=task_queue), 30)
    for name, (prompt, approve) in EXAMPLES.items():
        handle = await start(client, task_queue, prompt, owner="alice")
        status = await settled(handle)
        if approve is not None:
            assert status.status == "waiting_for_confirmation", status
            request = (ConfirmRequest(request_id="r", all=True, approver="alice") if approve
                       else RejectRequest(request_id="r", all=True, approver="bob",
                                          reason="not now, I will write it myself"))
            await session.decide(handle.id, request, by_update=False)
            for _ in range(100):
                if (status := await settled(handle)).status == "idle":
                    break
                await asyncio.sleep(0.1)
        case = await export(session, handle.id, name)
        case = case.model_copy(update={  # the product's tools, not the test worker's extras
            "exported_at": None, "conversation_id": name,
            "tools": [t for t in case.tools if t in default_registry().names()]})
        (EVALS / "passing" / f"{name}.json").write_text(case.dump())
    case = load_case((EVALS / "passing" / "weather_paris.json").read_text())
    case.name = "weather_expects_lyon"
    case.steps[0].calls[0].args = {"location": "Lyon"}
    (EVALS / "failing" / "weather_expects_lyon.json").write_text(case.dump())


async def test_the_example_evals_pass_and_the_one_meant_to_fail_fails_readably(
        client, task_queue, model, cli, tmp_path):
    if os.environ.get("UPDATE_EVALS"):
        await record_examples(client, task_queue)
    evaluate = evaluating(cli, eval_env(model, tmp_path))
    green = await evaluate(str(EVALS / "passing"), "--concurrency", "3")
    assert green.returncode == 0, green.stdout + green.stderr
    assert "passed 3/3" in green.stdout and note_rows(tmp_path) == []
    red = await evaluate(str(EVALS / "failing"))
    assert red.returncode == 1, red.stdout + red.stderr
    assert ('weather_expects_lyon: tool calls: call 1: expected get_weather({"location":"Lyon"})'
            in red.stdout), red.stdout
