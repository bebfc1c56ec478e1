"""`stop` (issue 50): the turn in flight ends now (its model call cut with the text it had
streamed kept, its tools cancelled, what waits for a person closed), the conversation goes on and
answers the next message; a stop with no turn to stop, or sent again, does nothing and says so."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections import Counter

import httpx
from temporalio.client import Client, WorkflowHandle

from durable_react_agent.activities.settings import ActivitySettings
from durable_react_agent.activities.tools import ToolSpec
from durable_react_agent.contract import (
    ApprovalPolicy,
    EndRequest,
    SayRequest,
    StopRequest,
)
from durable_react_agent.rules.stopping import STOPPED
from durable_react_agent.testing import ScriptedModelServer, ScriptedReply
from durable_react_agent.worker.app import build_worker
from durable_react_agent.workflows.conversation import ConversationWorkflow
from tests.fake_tools import ATTEMPTS, NoArgs, registry_with_test_tools
from tests.helpers import (
    first_token,
    outcome_of,
    reaches,
    replay,
    script,
    settled,
    start,
    tool_call,
    tool_messages,
    unique,
    until,
)

COUNTS: Counter[str] = Counter()


async def slow_payment(args: NoArgs, ctx) -> str:
    """A write that may run only once (not keyed), and takes two minutes."""
    COUNTS["began"] += 1
    try:
        await asyncio.sleep(120)
    except asyncio.CancelledError:
        COUNTS["cancelled"] += 1
        raise
    return "paid"


SLOW_PAYMENT = ToolSpec("slow_payment", "Pays, in two minutes.", NoArgs, slow_payment,
                        risk="sensitive", idempotent=False, timeout_s=300)


async def stop(handle: WorkflowHandle, request_id: str) -> str | None:
    """Stop the turn; what the conversation says it did."""
    await handle.signal(ConversationWorkflow.stop, StopRequest(request_id=request_id,
                                                               sender="alice"))
    outcome = await outcome_of(handle, request_id, timeout_s=30)
    assert outcome.accepted
    return outcome.reason


async def test_a_stop_during_a_long_streamed_reply_keeps_what_it_said_and_the_next_message_is_answered(
        client: Client, task_queue: str, model: ScriptedModelServer):
    long = "The first part of a long answer, " + "then more of it, " * 5 + "and its end."
    trigger = script(model, unique("stop-stream"),
                     ScriptedReply(content=long, stream_pause_s=60),
                     ScriptedReply(content="Here is the short one."))
    handle = await start(client, task_queue, trigger)
    said = (await first_token(client, handle.id)).text
    asked = time.monotonic()
    assert await stop(handle, "stop-1") == "turn 1 stopped"
    status = await settled(handle)
    took = time.monotonic() - asked
    assert (status.status, status.stop_reason, status.turn) == ("idle", "stopped", 1)
    assert took < 10, f"the stop took {took:.1f} s"  # not the reply's two minutes
    assert long.startswith(status.final_answer) and said in status.final_answer
    assert status.usage.failed_calls == 0  # a stopped call is no failure of the model's

    # The next message is answered, and its model reads what the cut reply had said.
    await handle.signal(ConversationWorkflow.say, SayRequest(text="short, please"))
    status = await settled(handle, turn=2)
    assert (status.stop_reason, status.final_answer) == ("answered", "Here is the short one.")
    last = [r for r in model.requests if r.trigger == trigger][-1]
    cut = [m for m in last.body["messages"] if m.get("role") == "assistant"]
    assert cut[-1]["content"].endswith(f"[interrupted: {STOPPED}]")
    assert cut[-1]["content"].startswith(said)

    # After the turn, and sent again: harmless, and says so.
    assert await stop(handle, "stop-2") == "no turn was running: nothing to stop"
    assert await stop(handle, "stop-1") == "turn 1 stopped"  # its outcome, as it was
    audit = [r for r in await handle.query(ConversationWorkflow.history) if r.kind == "stop"]
    assert [(r.turn, r.by) for r in audit] == [(1, "alice")]
    await handle.signal(ConversationWorkflow.end, EndRequest())
    await handle.result()
    await replay(handle, record_as="stop_during_streamed_reply")


async def test_a_stop_during_slow_tools_cancels_them_and_a_write_says_it_may_have_run(
        client: Client, model: ScriptedModelServer, activity_settings: ActivitySettings):
    queue = unique("stop-tools")
    trigger = script(model, unique("stop-tools"),
                     ScriptedReply(tool_calls=[tool_call("slow_tool", {}),
                                               tool_call("slow_payment", {})]),
                     ScriptedReply(content="Still here."))
    before, began = ATTEMPTS.copy(), COUNTS["began"]
    # (approved by AGENT_AUTO_APPROVE: the two run at once)
    settings = dataclasses.replace(activity_settings, auto_approvable=frozenset({"slow_payment"}),
                                   auto_approve_set=True)
    async with httpx.AsyncClient(timeout=10) as http, build_worker(
            client, queue, settings, http, registry_with_test_tools(SLOW_PAYMENT)):
        handle = await start(client, queue, trigger,
                             approval=ApprovalPolicy(auto_approve=["slow_payment"]))
        await until(lambda: COUNTS["began"] > began and ATTEMPTS["slow_tool"] > before["slow_tool"],
                    what="both tools running")
        assert await stop(handle, "stop-tools") == "turn 1 stopped"
        status = await settled(handle)
        assert (status.status, status.stop_reason) == ("idle", "stopped")
        slow, payment = await tool_messages(handle)
        assert slow.content == f"interrupted: {STOPPED}"
        assert payment.content.startswith(f"stopped: slow_payment may have run ({STOPPED} while "
                                          "it ran; idempotency key ")
        # each tool sees the cancel at its next heartbeat
        await until(lambda: COUNTS["cancelled"] >= 1
                    and ATTEMPTS["slow_tool_cancelled"] > before["slow_tool_cancelled"],
                    what="both tools cancelled")
        assert model.count(trigger, step=1) == 0  # no model call after the stop
        await handle.signal(ConversationWorkflow.say, SayRequest(text="are you there?"))
        status = await settled(handle, turn=2)
        assert status.final_answer == "Still here."
        await handle.signal(ConversationWorkflow.end, EndRequest())
        await handle.result()
        await replay(handle, record_as="stop_during_slow_tools")


async def test_a_stop_while_a_call_waits_for_approval_closes_it(
        client: Client, task_queue: str, model: ScriptedModelServer):
    title = unique("never-written")
    trigger = script(model, unique("stop-wait"),
                     ScriptedReply(tool_calls=[tool_call("create_note", {"title": title,
                                                                         "body": "b"})]),
                     ScriptedReply(content="Fine, no note."))
    handle = await start(client, task_queue, trigger)
    await reaches(handle, "waiting_for_confirmation")
    assert await stop(handle, "stop-wait") == "turn 1 stopped"
    status = await settled(handle)
    assert (status.status, status.stop_reason, status.pending_confirmations) == (
        "idle", "stopped", [])
    [decision] = status.decisions
    assert (decision.approved, decision.approver, decision.reason) == (False, "system", STOPPED)
    [message] = await tool_messages(handle)
    assert message.content == f"interrupted: {STOPPED}"  # (never run: its decision says why)
    await handle.signal(ConversationWorkflow.say, SayRequest(text="forget it"))
    assert (await settled(handle, turn=2)).final_answer == "Fine, no note."
    await handle.signal(ConversationWorkflow.end, EndRequest())
    await handle.result()
