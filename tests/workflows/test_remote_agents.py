"""Remote A2A agents as tools (`AGENT_A2A_AGENTS`, `activities.a2a_calls`): our agent delegates
to an agent built with `a2a-sdk`'s own server classes (streaming and polled) and to a second
instance of ours, a remote question is answered through our CLI, a stopped call cancels its
remote task, and a resent call finds the task its first attempt began."""

from __future__ import annotations

import asyncio
import base64
import json
import re
import shlex
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
import pytest_asyncio
from a2a.client import ClientConfig, create_client
from temporalio.client import Client

from durable_react_agent.activities.a2a_calls import Follow, RemoteAgent, remote_agent_tools
from durable_react_agent.activities.remote_agents import (
    RemoteAgentsError,
    RemoteAgentsFile,
    load_remote_agents,
)
from durable_react_agent.activities.settings import ActivitySettings
from durable_react_agent.activities.tools import ToolContext
from durable_react_agent.activities.tools.loader import ToolLoadError
from durable_react_agent.contract import ConfirmRequest, EndRequest, StopRequest
from durable_react_agent.testing import ScriptedModelServer, ScriptedReply
from durable_react_agent.worker.app import build_worker, tool_registry
from durable_react_agent.workflows.conversation import ConversationWorkflow
from tests.a2a_support import QUESTION, RemoteDesk
from tests.api_support import ApiServer, tokens_env
from tests.fake_tools import registry_with_test_tools
from tests.helpers import (
    reaches,
    replay,
    script,
    settled,
    start,
    stream_events,
    tool_call,
    unique,
    until,
)

OURS_TOKEN = "tok-of-the-caller"


@pytest.fixture(scope="module")
def desk() -> Iterator[RemoteDesk]:
    with RemoteDesk() as remote:
        yield remote


@pytest.fixture(scope="module")
def ours(temporal_address: str, task_queue: str) -> Iterator[ApiServer]:
    """A second instance of our agent: its API, serving the session's worker's queue."""
    with ApiServer(temporal_address, task_queue,
                   AGENT_API_TOKENS=tokens_env({"caller": (OURS_TOKEN, "user")})) as server:
        yield server


def agents(desk: RemoteDesk, ours: ApiServer | None = None, desk_risk: str = "safe"
           ) -> RemoteAgentsFile:
    named = {"desk": {"card": desk.card_url("stream"), "risk": desk_risk},
             "desk_polled": {"card": desk.card_url("poll"), "risk": "safe"},
             "gone": {"card": "http://127.0.0.1:9/.well-known/agent-card.json", "risk": "safe",
                      "description": "An agent that is not there"}}
    if ours is not None:
        named["ours"] = {"card": f"{ours.url}/.well-known/agent-card.json", "auth": "OURS_TOKEN",
                         "risk": "safe"}
    return RemoteAgentsFile.model_validate({"agents": named})


@pytest_asyncio.fixture(scope="module")
async def remote_queue(client: Client, activity_settings: ActivitySettings, desk: RemoteDesk,
                       ours: ApiServer) -> AsyncIterator[str]:
    """A worker whose tools include the remote agents: `desk` (a person approves each
    message), `desk_polled`, `ours` and `gone`."""
    queue = unique("remote-agents")
    tools = await remote_agent_tools(agents(desk, ours, desk_risk="sensitive"),
                                     {"OURS_TOKEN": OURS_TOKEN})
    async with httpx.AsyncClient(timeout=30) as http, build_worker(
            client, queue, activity_settings, http, registry_with_test_tools(*tools)):
        yield queue


async def test_our_agent_delegates_to_a_polled_a2a_sdk_agent(
        client: Client, model: ScriptedModelServer, remote_queue: str, desk: RemoteDesk):
    trigger = script(model, unique("a2a-polled"),
                     ScriptedReply(tool_calls=[tool_call("desk_polled", {"message": "hello"})]),
                     ScriptedReply(content="{last_tool}"))
    handle = await start(client, remote_queue, trigger)
    status = await settled(handle, timeout_s=60)
    assert status.final_answer == "Desk says: hello", status
    await replay(handle, record_as="remote_agent_polled")


async def test_a_remote_question_is_approved_and_answered_through_our_cli(
        client: Client, model: ScriptedModelServer, remote_queue: str, desk: RemoteDesk, cli):
    """The desk's risk is `sensitive`: a person approves the message before it is sent; its
    question is ours, answered with the command `status` prints, and goes to the same task."""
    trigger = script(model, unique("a2a-asks"),
                     ScriptedReply(tool_calls=[tool_call("desk", {"message": "ask: forecast"})]),
                     ScriptedReply(content="{last_tool}"))
    before = len(desk.desk.received)
    handle = await start(client, remote_queue, trigger)
    await reaches(handle, "waiting_for_confirmation", timeout_s=60)
    assert len(desk.desk.received) == before  # nothing is sent before a person approves

    async def run_printed(label: str, answer: str | None = None):
        shown = (await cli("status", handle.id)).stdout
        [line] = [ln for ln in shown.splitlines() if ln.strip().startswith(f"{label}:")]
        argv = shlex.split(line.split(":", 1)[1])
        assert argv[0] == "agent", line
        if answer is not None:
            argv[-1] = answer  # the placeholder
        ran = await cli(*argv[1:])
        assert ran.returncode == 0, ran.stdout + ran.stderr
        return shown

    await run_printed("approve")
    waiting = await reaches(handle, "waiting_for_input", timeout_s=60)
    assert waiting.pending_question.message == f"The agent desk asks: {QUESTION}"
    shown = await run_printed("answer", "Rome")
    assert f"The agent desk asks: {QUESTION}" in shown
    status = await settled(handle, timeout_s=60)
    assert status.final_answer == "Forecast for Rome: sunny", status
    first, answer = desk.desk.received[before:]  # one message, then its answer: once each
    assert answer == first.replace(".0", ".1")
    await replay(handle, record_as="remote_agent_asked_and_answered")


async def test_our_agent_delegates_to_a_second_instance_of_ours(
        client: Client, model: ScriptedModelServer, remote_queue: str, ours: ApiServer):
    """The remote conversation runs on the other instance, as the caller's token's owner,
    streamed to the caller; it gets the weather, and its answer is the caller's observation."""
    remote = script(model, unique("a2a-remote-side"),
                    ScriptedReply(tool_calls=[tool_call("get_weather", {"location": "Paris"})]),
                    ScriptedReply(content="Paris: {last_tool}"))
    trigger = script(model, unique("a2a-caller"),
                     ScriptedReply(tool_calls=[tool_call(
                         "ours", {"message": f"{remote}: weather in Paris?"})]),
                     ScriptedReply(content="{last_tool}"))
    handle = await start(client, remote_queue, trigger)
    status = await settled(handle, timeout_s=90)
    assert status.final_answer.startswith("Paris: Paris"), status
    assert model.count(remote, step=0) == 1
    history = (await handle.fetch_history()).to_json()
    decoded = " ".join(base64.b64decode(d).decode(errors="replace")
                       for d in re.findall(r'"data": ?"([A-Za-z0-9+/=]+)"', history))
    assert "a2a-remote-side" in decoded and OURS_TOKEN not in decoded + history  # the worker's
    await replay(handle, record_as="remote_agent_of_ours")


async def test_a_stopped_call_cancels_its_remote_task(
        client: Client, model: ScriptedModelServer, activity_settings: ActivitySettings):
    with RemoteDesk() as slow:
        queue = unique("remote-slow")
        tools = await remote_agent_tools(agents(slow))
        trigger = script(model, unique("a2a-stop"),
                         ScriptedReply(tool_calls=[tool_call("desk", {"message": "slow: x"})]),
                         ScriptedReply(content="not reached"))
        async with httpx.AsyncClient(timeout=30) as http, build_worker(
                client, queue, activity_settings, http, registry_with_test_tools(*tools)):
            handle = await start(client, queue, trigger)
            await until(lambda: bool(slow.desk.received), timeout_s=60, what="the message")
            await handle.signal(ConversationWorkflow.stop, StopRequest(request_id="stop-a2a"))
            status = await settled(handle, timeout_s=60)
            assert status.stop_reason == "stopped", status
            await until(lambda: bool(slow.desk.canceled), timeout_s=30, what="the cancel")
            await handle.signal(ConversationWorkflow.end, EndRequest())
            await handle.result()
            shown = [e.text for e in await stream_events(client, handle.id)
                     if e.kind == "tool_progress"]
        # the agent said "still working" every 0.2 s: shown once, as each new thing it says
        assert shown[-1] == "desk: still working" and len(shown) == len(set(shown)), shown


async def test_an_agent_that_is_not_there_is_an_error_the_model_reads(
        client: Client, model: ScriptedModelServer, remote_queue: str):
    trigger = script(model, unique("a2a-gone"),
                     ScriptedReply(tool_calls=[tool_call("gone", {"message": "hi"})]),
                     ScriptedReply(content="{last_tool}"))
    status = await settled(await start(client, remote_queue, trigger), timeout_s=60)
    assert status.final_answer.startswith("Error: the agent gone's card cannot be read"), status


@pytest.mark.parametrize("binding", ["stream", "poll"])
async def test_an_attempt_after_a_lost_worker_finds_the_task_instead_of_sending_again(
        desk: RemoteDesk, binding: str):
    """What a retry does when the attempt before it died before it could say which task it
    began: the task is found in the context the call's key names, and not sent again."""
    [spec] = await remote_agent_tools(RemoteAgentsFile.model_validate(
        {"agents": {"desk": {"card": desk.card_url(binding)}}}))
    agent: RemoteAgent = spec.handler.__self__
    key = unique("key")
    async with httpx.AsyncClient() as http:
        ctx = ToolContext(settings=None, http=http, call_id="c", idempotency_key=key)
        assert await spec.handler(spec.args_model(message="once"), ctx) == "Desk says: once"
        sent = len(desk.desk.received)
        client = await create_client(agent.card, client_config=ClientConfig(httpx_client=http))
        follow = agent.follow_of(ctx)
        found = await agent._sent_before(client, follow)
        assert found is not None and found.id and len(desk.desk.received) == sent
        fresh = agent.follow_of(ToolContext(settings=None, http=http, call_id="c",
                                            idempotency_key=unique("other")))
        assert await agent._sent_before(client, fresh) is None
        assert isinstance(follow, Follow)


def test_the_agents_file_says_what_is_wrong(tmp_path: Path, activity_settings):
    path = tmp_path / "agents.json"
    path.write_text(json.dumps({"agents": {"desk": {"card": "https://x/c.json", "auth": "TOK"}}}))
    with pytest.raises(RemoteAgentsError, match="takes its token from TOK, which is not set"):
        load_remote_agents(path, {})
    assert load_remote_agents(path, {"TOK": "t"}).agents["desk"].risk == "sensitive"
    for bad, why in (({"desk": {"card": "ftp://x"}}, "should match pattern"),
                     ({"desk": {"card": "https://x", "risk": "lethal"}}, "risk")):
        path.write_text(json.dumps({"agents": bad}))
        with pytest.raises(RemoteAgentsError, match=why):
            load_remote_agents(path, {})
    named_as_builtin, badly_named = asyncio.run(remote_agent_tools(RemoteAgentsFile.model_validate(
        {"agents": {"get_weather": {"card": "http://127.0.0.1:9/c.json"},
                    "a__b": {"card": "http://127.0.0.1:9/c.json"}}})))
    with pytest.raises(ToolLoadError, match="AGENT_A2A_AGENTS: tool 'get_weather' is already "
                                            "defined by the built-in tools"):
        tool_registry(activity_settings, [named_as_builtin])
    with pytest.raises(ToolLoadError, match="'__' is kept"):
        tool_registry(activity_settings, [badly_named])


@pytest.mark.parametrize(("message", "error"), [
    ("reject: please", "Error: the agent desk_polled rejected the task: not my department"),
    ("auth: please", "Error: the agent desk_polled requires authentication this worker does not "
                     "have: sign in at the desk first")])
async def test_a_rejected_task_or_one_that_wants_sign_in_is_an_error_the_model_reads(
        client: Client, model: ScriptedModelServer, remote_queue: str, message: str, error: str):
    trigger = script(model, unique("a2a-refused"),
                     ScriptedReply(tool_calls=[tool_call("desk_polled", {"message": message})]),
                     ScriptedReply(content="{last_tool}"))
    status = await settled(await start(client, remote_queue, trigger), timeout_s=60)
    assert status.final_answer == error, status


async def test_a_large_remote_answer_is_cut_for_the_model_as_any_tool_s_result(
        client: Client, model: ScriptedModelServer, remote_queue: str):
    """300 KB in three streamed chunks of one artifact: put together, then cut to the
    conversation's observation bound with how much there was (kept whole by reference where
    the worker has External Storage, as `tests/workflows/test_payloads.py` shows)."""
    trigger = script(model, unique("a2a-big"),
                     ScriptedReply(tool_calls=[tool_call("desk", {"message": "big: all of it"})]),
                     ScriptedReply(content="{last_tool}"))
    handle = await start(client, remote_queue, trigger)
    [call] = (await reaches(handle, "waiting_for_confirmation", timeout_s=60)
              ).pending_confirmations  # (the desk's risk is sensitive)
    await handle.signal(ConversationWorkflow.confirm, ConfirmRequest(call_ids=[call.call_id]))
    status = await settled(handle, timeout_s=60)
    seen = status.final_answer
    # the three chunks as one text of 300,000 characters (no line between them), then cut
    assert seen.startswith("0" * 1000) and "[truncated: 300000 bytes" in seen, seen[-200:]
    assert len(seen.encode()) < 20_000

