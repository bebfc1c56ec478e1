"""Nothing slips past the gate in a conversation: a policy that asks for more than the worker
allows is refused, and a tool riskier at execution than at discovery goes back before a human
(the worker's own check at execution: tests/activities/test_tool_gate.py)."""

from __future__ import annotations

import dataclasses

import httpx
import pytest
from temporalio.client import Client, WorkflowFailureError

from durable_react_agent.activities.settings import ActivitySettings
from durable_react_agent.contract import ApprovalPolicy, ConfirmRequest, SayRequest
from durable_react_agent.testing import ScriptedModelServer, ScriptedReply
from durable_react_agent.worker.app import build_worker
from durable_react_agent.workflows.conversation import ConversationWorkflow
from tests.fake_tools import registry
from tests.helpers import note_rows, reaches, script, settled, start, tool_call, unique


async def test_a_policy_that_asks_for_more_than_the_worker_allows_is_refused(
    client: Client, model: ScriptedModelServer, activity_settings: ActivitySettings
):
    queue = unique("floor")
    settings = dataclasses.replace(activity_settings, auto_approvable=frozenset({"create_note"}))
    title = unique("allowed")
    trigger = script(model, unique("floor"),
                     ScriptedReply(tool_calls=[tool_call("create_note", {"title": title, "body": "b"})]),
                     ScriptedReply(content="{last_tool}"))
    async with httpx.AsyncClient(timeout=10) as http, build_worker(client, queue, settings, http):
        for policy, beyond in ((ApprovalPolicy(auto_approve=["delete_note"]), "delete_note"),
                               (ApprovalPolicy(require_approval_for=[]), "delete_note")):
            handle = await start(client, queue, trigger, approval=policy)
            with pytest.raises(WorkflowFailureError) as failed:
                await handle.result()
            assert f"would let {beyond} run without a human" in str(failed.value.cause)
            assert "lets a policy approve create_note (AGENT_AUTO_APPROVE)" in str(failed.value.cause)
            status = await handle.query(ConversationWorkflow.status)
            assert status.status == "failed" and status.turn == 0 and "refused:" in status.error

        handle = await start(client, queue, trigger, approval=ApprovalPolicy(auto_approve=["create_note"]))
        status = await settled(handle)
        assert status.final_answer.startswith("Created note #") and status.decisions == []
        assert len(note_rows(settings.data_dir, title)) == 1


async def test_a_tool_riskier_at_execution_than_at_discovery_goes_back_through_approval(
    client: Client, model: ScriptedModelServer, activity_settings: ActivitySettings
):
    """The conversation listed `account_read` as safe; by the time it calls it, the worker that
    runs it (a new version, or a renamed MCP tool) has it as destructive."""
    queue = unique("risk-rose")
    trigger = script(model, unique("risk-rose"), ScriptedReply(content="hello"),
                     ScriptedReply(tool_calls=[tool_call("account_read", {"what": "balance"})]),
                     ScriptedReply(content="{last_tool}"))
    async with httpx.AsyncClient(timeout=10) as http:
        async with build_worker(client, queue, activity_settings, http, registry("safe")):
            handle = await start(client, queue, trigger)
            await settled(handle)
        async with build_worker(client, queue, activity_settings, http, registry("destructive")):
            await handle.signal(ConversationWorkflow.say, SayRequest(text="my balance?"))
            waiting = await reaches(handle, "waiting_for_confirmation")
            [pending] = waiting.pending_confirmations
            assert (pending.tool, pending.risk) == ("account_read", "destructive")
            await handle.signal(ConversationWorkflow.confirm,
                                ConfirmRequest(call_ids=[pending.call_id], approver="ann"))
            status = await settled(handle, turn=2)
    assert status.final_answer == "read balance"
    assert [d.approver for d in status.decisions] == ["ann"]
