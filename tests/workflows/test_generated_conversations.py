"""Real conversations driven by generated model replies (`tests.generated`), through the scripted
model, a real worker and the dev server, several at once: replies of any text, calls of any
name, id and arguments (a subagent's ids repeating its parent's), usage left out or odd, and
streams cut anywhere. A person approves or rejects each risky call and answers (or declines)
each question. Whatever the model sent:
- no workflow task fails (so no deadlock either), and every history replays;
- the conversation comes to rest (idle) without anyone's help but those decisions;
- a risky tool ran only for a call a person approved, with the arguments they saw;
- status, history and the live events serialize as valid UTF-8;
- every command the CLI and the Temporal UI print is one shell command.

`make test` runs one batch, `make test-long` three; AGENT_GENERATED_CONVERSATIONS sets how many."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import httpx
import pytest_asyncio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from temporalio.api.common.v1 import Payload
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.contrib.workflow_streams import PollInput, PollResult

from durable_react_agent.activities.profiles import AgentProfile, Profiles
from durable_react_agent.activities.settings import ActivitySettings
from durable_react_agent.client.checks import Refused
from durable_react_agent.client.connection import TemporalSettings
from durable_react_agent.client.render import render_status
from durable_react_agent.client.session import STREAM_POLL_QUERY, STREAM_TOPICS, Session
from durable_react_agent.contract import (
    AnswerRequest,
    ConfirmRequest,
    RejectRequest,
    StreamEvent,
    ToolInvocation,
)
from durable_react_agent.rules.gate import args_hash
from durable_react_agent.testing import ScriptedModelServer, ScriptedReply, ScriptedToolCall
from durable_react_agent.worker.app import build_worker
from durable_react_agent.workflows.conversation import ConversationWorkflow
from tests.fake_tools import registry_with_test_tools
from tests.generated import RISKY_TOOLS, one_command, printed_commands, replies
from tests.helpers import FAST_LLM, LONG, REPLAYER, script, settled, start, unique

BATCHES = int(os.environ.get("AGENT_GENERATED_CONVERSATIONS", "3" if LONG else "1"))
AT_ONCE = 6  # conversations a batch runs together
WRITER = AgentProfile(description="Writes notes", system_prompt="You write notes.",
                      tools=["create_note", "get_weather", "ask_confirm"], max_steps=3)
RISKY = set(RISKY_TOOLS)


@pytest_asyncio.fixture(scope="module")
async def generated_queue(client: Client, activity_settings: ActivitySettings
                          ) -> AsyncIterator[str]:
    queue = unique("generated")
    settings = dataclasses.replace(activity_settings, profiles=Profiles({"writer": WRITER}))
    async with httpx.AsyncClient(timeout=10) as http:
        async with build_worker(client, queue, settings, http, registry_with_test_tools()):
            yield queue


@dataclass
class Plan:
    """One conversation: the parent's replies, a writer subagent's (delegated to by the first
    reply, with a call id the child's first call uses too), and the person's verdicts in turn."""

    replies: list[ScriptedReply]
    child: list[ScriptedReply] = field(default_factory=list)
    verdicts: list[bool] = field(default_factory=list)


@st.composite
def plans(draw) -> Plan:
    child = draw(st.lists(replies, max_size=2))
    if child:  # the child's first call reuses the id its parent gave the delegation
        child[0] = child[0].model_copy(update={"tool_calls": [
            ScriptedToolCall(name="create_note", arguments={"title": "t", "body": "b"},
                             id="dup"), *child[0].tool_calls]})
    return Plan(draw(st.lists(replies, min_size=1, max_size=3)), child,
                draw(st.lists(st.booleans(), min_size=8, max_size=8)))


@dataclass
class Seen:
    """What the person did: the calls they approved (conversation, call id -> args hash)."""

    approved: dict[tuple[str, str], str] = field(default_factory=dict)
    decided: int = 0


async def drive(client: Client, session: Session, queue: str, model: ScriptedModelServer,
                plan: Plan) -> tuple[WorkflowHandle, Seen]:
    replies_ = list(plan.replies)
    if plan.child:
        child = script(model, unique("gen-child"), *plan.child, ScriptedReply(content="kid done"))
        replies_[0] = replies_[0].model_copy(update={"tool_calls": [ScriptedToolCall(
            name="agent__writer", arguments={"task": f"{child}: go"}, id="dup"),
            *replies_[0].tool_calls]})
    trigger = script(model, unique("gen"), *replies_, ScriptedReply(content="done"))
    handle = await start(client, queue, trigger, owner="alice", max_steps=4, llm=FAST_LLM)
    seen, verdicts = Seen(), iter(plan.verdicts * 8)
    for _ in range(40):
        try:
            status = await settled(handle, timeout_s=90)
        except AssertionError as stuck:  # say where: the children's own statuses
            kids = [await client.get_workflow_handle(c.workflow_id).query(
                ConversationWorkflow.status) for c in
                (await handle.query(ConversationWorkflow.status)).children]
            raise AssertionError(f"{stuck}; its subagents: {kids}; plan: {plan}") from None
        if status.status in ("idle", "completed", "failed"):
            return handle, seen
        for p in status.pending_confirmations:
            approve = next(verdicts)
            kind = ConfirmRequest if approve else RejectRequest
            request = kind(request_id=unique("d"), call_ids=[p.ref or p.call_id],
                           approver="carol", seen={p.ref or p.call_id: p.args_hash or ""})
            try:
                await session.decide(handle.id, request, by_update=True)
            except Refused:  # decided meanwhile, or its subagent ended: the status says next
                continue
            seen.decided += 1
            if approve:
                seen.approved[(p.conversation_id or handle.id, p.call_id)] = args_hash(p.args)
        if (q := status.pending_question) is not None:
            values = q.options[:1] if q.options else ["yes" if q.kind == "confirm" else "x"]
            for request in (AnswerRequest(request_id=unique("a"), values=values, call_id=q.ref),
                            AnswerRequest(request_id=unique("a"), values=[], call_id=q.ref,
                                          declined=True)):
                try:
                    await session.decide(handle.id, request, by_update=True)
                    break
                except Refused:  # not an answer it takes: withdraw the question instead
                    continue
        await asyncio.sleep(0.1)  # a child's report of what it waits for comes a moment later
    raise AssertionError(f"{handle.id} never came to rest: {status}")


async def check(client: Client, handle: WorkflowHandle, seen: Seen) -> None:
    status = await handle.query(ConversationWorkflow.status)
    assert status.status == "idle", status
    ids = [handle.id, *(c.workflow_id for c in status.children)]
    for wid in ids:
        history = await client.get_workflow_handle(wid).fetch_history()
        failed = [e for e in history.events
                  if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED]
        assert not failed, f"{wid}: {failed[0].workflow_task_failed_event_attributes.failure}"
        for event in history.events:
            scheduled = event.activity_task_scheduled_event_attributes
            if (event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
                    and scheduled.activity_type.name in RISKY):
                invocation = pydantic_data_converter.payload_converter.from_payload(
                    scheduled.input.payloads[0], ToolInvocation)
                key = (wid, invocation.call_id)
                assert invocation.approval is not None and invocation.approval.approver == "carol"
                assert seen.approved.get(key) == args_hash(invocation.arguments), (
                    f"{scheduled.activity_type.name} ran in {wid} without its approval")
        await REPLAYER.replay_workflow(history)
        own = await client.get_workflow_handle(wid).query(ConversationWorkflow.status)
        for value in (own, *await client.get_workflow_handle(wid).query(
                ConversationWorkflow.history)):
            value.model_dump_json().encode()
        await events_serialize(client, wid)
    details = (await handle.query("__temporal_workflow_metadata")).current_details
    for command in printed_commands(render_status(status), details):
        assert one_command(command), command


async def events_serialize(client: Client, wid: str) -> None:
    """Every event of the conversation's live stream, as a watcher reads them."""
    result = await client.get_workflow_handle(wid).query(
        STREAM_POLL_QUERY, PollInput(STREAM_TOPICS, 0), result_type=PollResult)
    for wire in result.items:
        payload = Payload()
        payload.ParseFromString(base64.b64decode(wire.data))
        event = pydantic_data_converter.payload_converter.from_payload(payload, StreamEvent)
        event.model_dump_json().encode()


@settings(max_examples=BATCHES, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                 HealthCheck.function_scoped_fixture])
@given(batch=st.lists(plans(), min_size=AT_ONCE, max_size=AT_ONCE))
async def test_generated_conversations_keep_every_promise(
        batch: list[Plan], client: Client, generated_queue: str, model: ScriptedModelServer,
        temporal_address: str):
    session = Session(client, TemporalSettings(address=temporal_address,
                                               task_queue=generated_queue), timeout_s=30)
    driven = await asyncio.gather(*(drive(client, session, generated_queue, model, plan)
                                    for plan in batch))
    for handle, seen in driven:
        await check(client, handle, seen)
