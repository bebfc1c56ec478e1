"""Human in the loop through a real server: approvals, rejections, edits, staging, questions."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from temporalio.api.sdk.v1 import WorkflowMetadata
from temporalio.client import Client, WorkflowUpdateFailedError

from durable_react_agent.activities.settings import ActivitySettings
from durable_react_agent.contract import (
    AnswerRequest,
    ApprovalPolicy,
    ConfirmRequest,
    EndRequest,
    RejectRequest,
    SayRequest,
)
from durable_react_agent.rules.gate import args_hash
from durable_react_agent.testing import ScriptedModelServer, ScriptedReply
from durable_react_agent.workflows.conversation import ConversationWorkflow
from tests.helpers import (
    note_rows,
    outcome_of,
    reaches,
    replay,
    script,
    settled,
    start,
    tool_call,
    tool_messages,
    unique,
)


def rid() -> str:
    return uuid.uuid4().hex


async def test_sensitive_call_waits_and_runs_once_after_confirm(
    client: Client, task_queue: str, model: ScriptedModelServer, activity_settings: ActivitySettings
):
    title = unique("groceries")
    trigger = script(
        model, unique("create"),
        ScriptedReply(tool_calls=[tool_call("create_note", {"title": title, "body": "milk"})]),
        ScriptedReply(content="Done: {last_tool}"),
    )
    handle = await start(client, task_queue, f"{trigger}: note my groceries")
    waiting = await reaches(handle, "waiting_for_confirmation")
    [pending] = waiting.pending_confirmations
    assert (pending.tool, pending.args, pending.risk) == ("create_note", {"title": title, "body": "milk"}, "sensitive")
    assert note_rows(activity_settings.data_dir, title) == []

    await handle.signal(ConversationWorkflow.confirm,
                        ConfirmRequest(request_id=(r := rid()), call_ids=[pending.call_id], approver="alice"))
    assert (await outcome_of(handle, r)).accepted
    status = await settled(handle)
    assert status.final_answer.startswith("Done: Created note #")
    assert len(note_rows(activity_settings.data_dir, title)) == 1
    [decision] = status.decisions
    assert (decision.approved, decision.approver, decision.call_id) == (True, "alice", pending.call_id)
    assert decision.args_hash == args_hash({"title": title, "body": "milk"})


async def test_reject_leaves_the_db_untouched_and_tells_the_model_why(
    client: Client, task_queue: str, model: ScriptedModelServer, activity_settings: ActivitySettings
):
    title = unique("secret")
    trigger = script(
        model, unique("reject"),
        ScriptedReply(tool_calls=[tool_call("create_note", {"title": title, "body": "x"})]),
        ScriptedReply(content="Understood: {last_tool}"),
    )
    handle = await start(client, task_queue, f"{trigger}")
    [pending] = (await reaches(handle, "waiting_for_confirmation")).pending_confirmations
    await handle.signal(ConversationWorkflow.reject, RejectRequest(
        request_id=(r := rid()), call_ids=[pending.call_id], reason="not this one", approver="bob"))
    assert (await outcome_of(handle, r)).accepted
    status = await settled(handle)
    assert status.final_answer == "Understood: rejected by user: not this one"
    assert note_rows(activity_settings.data_dir, title) == []
    assert status.decisions[0].approved is False and status.decisions[0].approver == "bob"


async def test_edited_args_run_instead_and_invalid_edits_are_refused(
    client: Client, task_queue: str, model: ScriptedModelServer, activity_settings: ActivitySettings
):
    original, edited = unique("typo"), unique("fixed")
    trigger = script(
        model, unique("edit"),
        ScriptedReply(tool_calls=[tool_call("create_note", {"title": original, "body": "b"})]),
        ScriptedReply(content="{last_tool}"),
    )
    handle = await start(client, task_queue, f"{trigger}")
    [pending] = (await reaches(handle, "waiting_for_confirmation")).pending_confirmations

    await handle.signal(ConversationWorkflow.confirm, ConfirmRequest(
        request_id=(bad := rid()), call_ids=[pending.call_id], args={"title": edited}))
    refused = await outcome_of(handle, bad)
    assert not refused.accepted and "'body' is a required property" in refused.reason
    assert (await handle.query(ConversationWorkflow.status)).pending_confirmations == [pending]

    new_args = {"title": edited, "body": "edited body"}
    await handle.signal(ConversationWorkflow.confirm, ConfirmRequest(
        request_id=rid(), call_ids=[pending.call_id], args=new_args, approver="carol"))
    status = await settled(handle)
    assert note_rows(activity_settings.data_dir, original) == []
    assert [r[1:] for r in note_rows(activity_settings.data_dir, edited)] == [(edited, "edited body")]
    assert status.decisions[0].args_hash == args_hash(new_args)


async def test_mixed_turn_runs_reads_first_and_keeps_message_order(
    client: Client, task_queue: str, model: ScriptedModelServer, activity_settings: ActivitySettings
):
    trigger = script(
        model, unique("mixed"),
        ScriptedReply(tool_calls=[
            tool_call("delete_note", {"note_id": 987654}),
            tool_call("get_weather", {"location": "Sydney"}),
        ]),
        ScriptedReply(content="ok"),
    )
    forecasts_before = model.forecast_calls
    handle = await start(client, task_queue, f"{trigger}")
    waiting = await reaches(handle, "waiting_for_confirmation")
    assert model.forecast_calls == forecasts_before + 1  # the read ran before any decision
    assert [p.tool for p in waiting.pending_confirmations] == ["delete_note"]
    assert waiting.pending_confirmations[0].risk == "destructive"

    await handle.signal(ConversationWorkflow.confirm, ConfirmRequest(request_id=rid(), all=True))
    await settled(handle)
    messages = await handle.query(ConversationWorkflow.messages)
    assistant = next(m for m in messages if m.tool_calls)
    tools = await tool_messages(handle)
    assert [m.tool_call_id for m in tools] == [c.id for c in assistant.tool_calls]
    assert tools[0].content == "Error: there is no note #987654"
    assert tools[1].content.startswith("Sydney, Australia")


async def test_parallel_risky_calls_decided_one_by_one_in_reverse_order(
    client: Client, task_queue: str, model: ScriptedModelServer, activity_settings: ActivitySettings
):
    titles = [unique(f"par{i}") for i in range(3)]
    trigger = script(
        model, unique("parallel"),
        ScriptedReply(tool_calls=[tool_call("create_note", {"title": t, "body": "p"}) for t in titles]),
        ScriptedReply(content="all decided"),
    )
    handle = await start(client, task_queue, f"{trigger}")
    pending = (await reaches(handle, "waiting_for_confirmation")).pending_confirmations
    assert len(pending) == 3

    await handle.signal(ConversationWorkflow.confirm, ConfirmRequest(request_id=rid(), call_ids=[pending[2].call_id]))
    await handle.signal(ConversationWorkflow.reject, RejectRequest(request_id=rid(), call_ids=[pending[1].call_id], reason="dup"))
    middle = await reaches(handle, "waiting_for_confirmation")
    assert [p.call_id for p in middle.pending_confirmations] == [pending[0].call_id]
    await handle.signal(ConversationWorkflow.confirm, ConfirmRequest(request_id=rid(), call_ids=[pending[0].call_id]))
    status = await settled(handle)
    assert status.final_answer == "all decided"
    data = activity_settings.data_dir
    assert [len(note_rows(data, t)) for t in titles] == [1, 0, 1]
    tools = await tool_messages(handle)
    assert [m.tool_call_id for m in tools] == [p.call_id for p in pending]
    assert tools[1].content == "rejected by user: dup"


async def test_stale_double_unknown_and_malformed_decisions_are_refused(
    client: Client, task_queue: str, model: ScriptedModelServer, activity_settings: ActivitySettings
):
    trigger = script(
        model, unique("refusals"),
        ScriptedReply(tool_calls=[tool_call("create_note", {"title": unique("a"), "body": "1"}),
                                  tool_call("create_note", {"title": unique("b"), "body": "2"})]),
        ScriptedReply(content="first turn done"),
        ScriptedReply(content="second turn done"),
    )
    handle = await start(client, task_queue, f"{trigger}")
    first, second = (await reaches(handle, "waiting_for_confirmation")).pending_confirmations

    async def refused(signal, request) -> str:
        before = await handle.query(ConversationWorkflow.status)
        await handle.signal(signal, request)
        outcome = await outcome_of(handle, request.request_id)
        assert not outcome.accepted
        after = await handle.query(ConversationWorkflow.status)
        assert after == before, "a refused signal changed the state"
        return outcome.reason

    await handle.signal(ConversationWorkflow.confirm, ConfirmRequest(request_id=rid(), call_ids=[first.call_id]))
    assert "already approved" in await refused(ConversationWorkflow.reject, RejectRequest(request_id=rid(), call_ids=[first.call_id]))
    assert "unknown call id nope" == await refused(ConversationWorkflow.confirm, ConfirmRequest(request_id=rid(), call_ids=["nope"]))
    assert "not both" in await refused(ConversationWorkflow.confirm, ConfirmRequest(request_id=rid(), call_ids=[second.call_id], all=True))
    assert "exactly one call" in await refused(ConversationWorkflow.confirm, ConfirmRequest(
        request_id=rid(), all=True, args={"title": "x", "body": "y"}))
    assert "no question" in await refused(ConversationWorkflow.answer, AnswerRequest(request_id=rid(), values=["x"]))

    await handle.signal(ConversationWorkflow.confirm, ConfirmRequest(request_id=rid(), call_ids=[second.call_id]))
    await settled(handle)
    assert "stale" in await refused(ConversationWorkflow.confirm, ConfirmRequest(request_id=rid(), call_ids=[second.call_id]))
    assert "no call is waiting" in await refused(ConversationWorkflow.reject, RejectRequest(request_id=rid(), all=True))


async def test_questions_validate_answers_and_the_answer_is_the_observation(
    client: Client, task_queue: str, model: ScriptedModelServer
):
    trigger = script(
        model, unique("ask"),
        ScriptedReply(tool_calls=[
            tool_call("ask_choice", {"message": "Which city?", "options": ["Paris", "Tokyo"]}),
            tool_call("ask_multi_choice", {"message": "Which extras?", "options": ["wind", "humidity", "uv"]}),
            tool_call("ask_confirm", {"message": "Metric units?"}),
            tool_call("ask_input", {"message": "Your name?", "placeholder": "Ada"}),
        ]),
        ScriptedReply(content="thanks"),
    )
    handle = await start(client, task_queue, f"{trigger}")

    async def answer(*values: str) -> tuple[bool, str | None]:
        await handle.signal(ConversationWorkflow.answer, AnswerRequest(request_id=(r := rid()), values=list(values)))
        outcome = await outcome_of(handle, r)
        return outcome.accepted, outcome.reason

    async def next_question(kind: str):
        for _ in range(300):
            q = (await reaches(handle, "waiting_for_input")).pending_question
            if q.kind == kind:
                return q
            await asyncio.sleep(0.1)
        raise AssertionError(f"no {kind} question came: the last was {q}")

    q = await next_question("choice")
    assert (q.kind, q.message, q.options) == ("choice", "Which city?", ["Paris", "Tokyo"])
    assert await answer("Berlin") == (False, "'Berlin' is not one of the options: Paris, Tokyo")
    assert (await handle.query(ConversationWorkflow.status)).pending_question == q
    assert (await answer("Tokyo"))[0]

    await next_question("multi_choice")
    assert not (await answer("wind", "rain"))[0]
    assert (await answer("wind", "uv"))[0]

    await next_question("confirm")
    assert await answer("maybe") == (False, "answer yes or no")
    assert (await answer("Y"))[0]

    q = await next_question("input")
    assert q.message == "Your name? (e.g. Ada)"
    assert (await answer("Ada", "Lovelace"))[0]
    await settled(handle)
    assert [m.content for m in await tool_messages(handle)] == ["Tokyo", '["wind", "uv"]', "yes", "Ada Lovelace"]


async def test_ambiguous_delete_asks_which_note_then_deletes_it(
    client: Client, task_queue: str, model: ScriptedModelServer, activity_settings: ActivitySettings
):
    title = unique("dup-title")
    trigger = script(
        model, unique("ambiguous"),
        ScriptedReply(tool_calls=[tool_call("create_note", {"title": title, "body": "one"}),
                                  tool_call("create_note", {"title": title, "body": "two"})]),
        ScriptedReply(tool_calls=[tool_call("delete_note", {"title": title})]),
        ScriptedReply(content="{last_tool}"),
    )
    handle = await start(client, task_queue, f"{trigger}", approval=ApprovalPolicy(auto_approve=["create_note"]))
    waiting = await reaches(handle, "waiting_for_confirmation")
    assert [p.tool for p in waiting.pending_confirmations] == ["delete_note"]  # creates were auto-approved
    one, two = note_rows(activity_settings.data_dir, title)
    await handle.signal(ConversationWorkflow.confirm, ConfirmRequest(request_id=rid(), all=True))

    question = (await reaches(handle, "waiting_for_input")).pending_question
    assert question.kind == "choice" and len(question.options) == 2
    assert question.options[1].startswith(f"#{two[0]} {title}")
    await handle.signal(ConversationWorkflow.answer, AnswerRequest(request_id=rid(), values=[question.options[1]]))
    status = await settled(handle)
    assert status.final_answer == f"Deleted note #{two[0]} {title!r}."
    assert note_rows(activity_settings.data_dir, title) == [one]
    await handle.signal(ConversationWorkflow.end, EndRequest())
    await handle.result()
    await replay(handle, record_as="auto_approve_confirm_then_mid_run_question")


async def test_search_attribute_finds_the_waiting_conversation(
    client: Client, task_queue: str, model: ScriptedModelServer
):
    trigger = script(
        model, unique("visible"),
        ScriptedReply(tool_calls=[tool_call("create_note", {"title": "t", "body": "b"})]),
        ScriptedReply(content="never mind"),
    )
    handle = await start(client, task_queue, f"{trigger}")
    await reaches(handle, "waiting_for_confirmation")
    query = f'AgentStatus = "waiting_for_confirmation" AND WorkflowId = "{handle.id}"'
    for _ in range(100):
        found = [wf.id async for wf in client.list_workflows(query)]
        if found:
            break
        await reaches(handle, "waiting_for_confirmation", timeout_s=1)
    assert found == [handle.id]
    metadata = await handle.query("__temporal_workflow_metadata", result_type=WorkflowMetadata)
    assert "**Waiting for approval:** `create_note` (sensitive)" in metadata.current_details
    assert f"agent confirm {handle.id} call_0_0" in metadata.current_details
    await handle.signal(ConversationWorkflow.reject, RejectRequest(request_id=rid(), all=True, reason="test over"))
    await settled(handle)


async def test_say_while_busy_is_queued_and_answered_in_order(
    client: Client, task_queue: str, model: ScriptedModelServer
):
    trigger = script(
        model, unique("queue"),
        ScriptedReply(tool_calls=[tool_call("create_note", {"title": "q", "body": "b"})]),
        ScriptedReply(content="first"),
        ScriptedReply(content="second: {last_user}"),
    )
    handle = await start(client, task_queue, f"{trigger}")
    await reaches(handle, "waiting_for_confirmation")
    await handle.signal(ConversationWorkflow.say, SayRequest(text="are you there?", request_id=(r := rid())))
    assert (await outcome_of(handle, r)).turn == 2
    assert (await handle.query(ConversationWorkflow.status)).queued_messages == 1
    await handle.signal(ConversationWorkflow.reject, RejectRequest(request_id=rid(), all=True))
    status = await settled(handle, turn=2)
    assert (status.turn, status.final_answer) == (2, "second: are you there?")


async def test_end_while_waiting_rejects_the_pending_call_and_completes(
    client: Client, task_queue: str, model: ScriptedModelServer, activity_settings: ActivitySettings
):
    title = unique("ended")
    trigger = script(
        model, unique("end-pending"),
        ScriptedReply(tool_calls=[tool_call("create_note", {"title": title, "body": "b"})]),
        ScriptedReply(content="unused"),
    )
    handle = await start(client, task_queue, f"{trigger}")
    await reaches(handle, "waiting_for_confirmation")
    await handle.signal(ConversationWorkflow.end, EndRequest(request_id=rid()))
    result = await handle.result()
    assert (result.status, result.stop_reason) == ("completed", "ended")
    assert result.decisions[0].reason == "the conversation was ended"
    assert note_rows(activity_settings.data_dir, title) == []
    assert model.count(trigger, step=1) == 0  # no model call after the end


async def test_update_twins_answer_synchronously_and_refuse_before_history(
    client: Client, task_queue: str, model: ScriptedModelServer, activity_settings: ActivitySettings
):
    title = unique("via-update")
    trigger = script(
        model, unique("updates"),
        ScriptedReply(tool_calls=[tool_call("create_note", {"title": title, "body": "b"}),
                                  tool_call("delete_note", {"note_id": 424243})]),
        ScriptedReply(tool_calls=[tool_call("ask_confirm", {"message": "Sure?"})]),
        ScriptedReply(content="{last_tool}"),
    )
    handle = await start(client, task_queue, trigger)
    create, delete = (await reaches(handle, "waiting_for_confirmation")).pending_confirmations
    events_before = len((await handle.fetch_history()).events)
    with pytest.raises(WorkflowUpdateFailedError) as refused:
        await handle.execute_update(ConversationWorkflow.decide_confirm,
                                    ConfirmRequest(call_ids=["nope"], request_id="u0"))
    assert "unknown call id nope" in str(refused.value.cause)
    assert len((await handle.fetch_history()).events) == events_before  # rejected before history

    taken = await handle.execute_update(ConversationWorkflow.decide_confirm,
                                        ConfirmRequest(call_ids=[create.call_id], request_id="u1"))
    assert (taken.accepted, taken.request_id) == (True, "u1")
    rejected = await handle.execute_update(ConversationWorkflow.decide_reject,
                                           RejectRequest(call_ids=[delete.call_id], reason="no"))
    assert rejected.accepted
    await reaches(handle, "waiting_for_input")
    with pytest.raises(WorkflowUpdateFailedError):
        await handle.execute_update(ConversationWorkflow.give_answer, AnswerRequest(values=["maybe"]))
    answered = await handle.execute_update(ConversationWorkflow.give_answer, AnswerRequest(values=["yes"]))
    assert answered.accepted
    status = await settled(handle)
    assert status.final_answer == "yes" and len(note_rows(activity_settings.data_dir, title)) == 1
