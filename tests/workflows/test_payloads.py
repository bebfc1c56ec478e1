"""Payloads as the product keeps them (`client.payloads`): sealed with AES-GCM, and over the
threshold kept by reference in the file store. A tool that returns 5 MB, a message of 1 MB and
20 subagents that read 200 KB each never fail a workflow task; the model sees the cut view it
always saw, and the whole result is read back by reference (`agent result`, export, evals); a
history read without the key shows no word of the conversation. The S3 store is in
tests/e2e/test_payload_s3.py, a worker killed while it stores in tests/e2e/test_worker_killed.py."""

from __future__ import annotations

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHistory
from temporalio.worker import Replayer

from durable_react_agent.client.cases import export, full_result
from durable_react_agent.client.payloads import PayloadSettings, data_converter
from durable_react_agent.contract import ConversationInput, EndRequest, SayRequest
from durable_react_agent.contract.names import WORKFLOW_TYPE
from durable_react_agent.testing import ScriptedModelServer, ScriptedReply
from durable_react_agent.worker.app import WORKFLOWS
from durable_react_agent.workflows.conversation import ConversationWorkflow
from durable_react_agent.workflows.signal_guard import SignalGuard
from tests.fake_tools import report_text
from tests.helpers import (
    HISTORIES,
    RECORDED_PAYLOADS,
    TEST_PAYLOAD_KEYS,
    kept_history,
    outcome_of,
    replay,
    scheduled,
    script,
    settled,
    start,
    stored_keys,
    tool_call,
    unique,
)
from tests.payload_support import Sealed, sealed_worker
from tests.subagent_support import delegate

SECRET = "SECRET-LEDGER"


def tool_messages(model: ScriptedModelServer, trigger: str) -> list[str]:
    last = [r.body for r in model.requests if r.trigger == trigger and r.kind == "chat"][-1]
    return [m["content"] for m in last["messages"] if m["role"] == "tool"]


def task_failures(history: WorkflowHistory) -> int:
    return sum(e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED for e in history.events)


async def raw_history(client: Client, workflow_id: str) -> WorkflowHistory:
    """The history as Temporal keeps it, read by a client without the key."""
    return await client.get_workflow_handle(workflow_id).fetch_history()


async def test_a_5_mb_result_is_kept_by_reference_sealed_and_read_back_whole(
        client: Client, sealed: Sealed, model: ScriptedModelServer):
    trigger = script(model, unique("five-mb"),
                     ScriptedReply(tool_calls=[tool_call("big_report", {"size": 5_000_000})]),
                     ScriptedReply(content="read it"))
    handle = await start(sealed.client, sealed.queue, f"{trigger}: summarize the ledger")
    status = await settled(handle, timeout_s=60)
    assert status.final_answer == "read it"
    [seen] = tool_messages(model, trigger)  # the view the model always had
    assert seen.startswith(report_text(100)) and "…[truncated: 5068493 bytes" in seen
    assert len(seen.encode()) < 20_000

    raw = await raw_history(client, handle.id)
    text = raw.to_json()
    assert SECRET not in text and trigger not in text and "ledger" not in text
    assert len(text) < 200_000 and task_failures(raw) == 0
    [key] = stored_keys(raw)  # the result, by reference
    assert key.startswith(f"v0/ns/default/wt/{WORKFLOW_TYPE}/wi/{handle.id}/ri/{handle.result_run_id}/")
    assert SECRET.encode() not in (sealed.store / key).read_bytes()  # sealed before it is stored

    whole = report_text(5_000_000)
    case = await export(sealed.session, handle.id)
    [call] = case.calls()
    assert (call.result, call.full_result) == (seen, whole)
    found = await full_result(sealed.session, handle.id, call.id)
    assert (found.whole, found.text) == (True, whole)
    [step] = [r for r in await handle.query(ConversationWorkflow.history) if r.actions]
    assert step.actions[0].full_bytes == 5_068_493  # JSON bytes: a newline is two
    await handle.signal(ConversationWorkflow.end, EndRequest())
    await handle.result()


async def test_a_sealed_history_by_reference_replays(
        client: Client, sealed: Sealed, model: ScriptedModelServer):
    """Recorded with a small threshold of its own, so that its stored payloads are small enough
    to keep beside it (tests/histories/payloads/)."""
    store = sealed.store / "recorded"
    tight = PayloadSettings(path=store, keys=TEST_PAYLOAD_KEYS, threshold_bytes=4096)
    trigger = script(model, unique("by-reference"),
                     ScriptedReply(tool_calls=[tool_call("big_report", {"size": 30_000})]),
                     ScriptedReply(content="done"))
    async with sealed_worker(client.service_client.config.target_host, tight, sealed.settings,
                             "sealed-tight") as worker:
        handle = await start(worker.client, worker.queue, trigger, one_shot=True)
        status = await settled(handle, timeout_s=60)
    assert status.final_answer == "done"
    assert len(stored_keys(await raw_history(client, handle.id))) >= 1
    await replay(handle, "result_kept_by_reference_sealed", store=store)


async def test_a_1_mb_message_is_refused_and_no_workflow_task_fails(
        client: Client, sealed: Sealed, model: ScriptedModelServer):
    """Sent straight to Temporal, past the CLI's and the API's own refusal: the conversation
    refuses it as it would any message over its limit, and goes on."""
    trigger = script(model, unique("mega-message"), ScriptedReply(content="fine"))
    huge = f"{SECRET} " + "y" * 1_000_000
    handle = await start(sealed.client, sealed.queue, huge)
    status = await settled(handle, turn=0, timeout_s=60)
    assert "the first message was refused" in (status.error or "")
    await handle.signal(ConversationWorkflow.say, SayRequest(text=huge, request_id="huge"))
    outcome = await outcome_of(handle, "huge")
    assert not outcome.accepted and "over the limit" in outcome.reason
    await handle.signal(ConversationWorkflow.say, SayRequest(text=f"{trigger}: hello"))
    assert (await settled(handle, turn=1, timeout_s=60)).final_answer == "fine"
    raw = await raw_history(client, handle.id)
    assert task_failures(raw) == 0 and SECRET not in raw.to_json()
    assert len(stored_keys(raw)) == 2  # the start's input and the signal, by reference
    await handle.signal(ConversationWorkflow.end, EndRequest())
    await handle.result()


async def test_20_subagents_reading_200_kb_each_fail_no_workflow_task(
        client: Client, sealed: Sealed, model: ScriptedModelServer):
    child = script(model, unique("reads-200k"),
                   ScriptedReply(tool_calls=[tool_call("big_report", {"size": 200_000})]),
                   ScriptedReply(content="read"))
    parent = script(model, unique("fan-out-20"),
                    ScriptedReply(tool_calls=[delegate("reader", f"{child}: part {n}", f"c{n}")
                                              for n in range(20)]),
                    ScriptedReply(content="all read"))
    handle = await start(sealed.client, sealed.queue, parent, max_parallel_subagents=20)
    status = await settled(handle, timeout_s=180)
    assert status.final_answer == "all read"
    assert [c.status for c in status.children] == ["completed"] * 16  # the last 16 listed
    assert task_failures(await raw_history(client, handle.id)) == 0
    for n in (0, 19):
        child_id = f"{handle.id}/c{n}"
        assert task_failures(await raw_history(client, child_id)) == 0
        case = await export(sealed.session, child_id)
        [call] = case.calls()
        found = await full_result(sealed.session, child_id, call.id)
        assert found.whole and found.text == report_text(200_000)
    await handle.signal(ConversationWorkflow.end, EndRequest())
    await handle.result()


async def test_the_recorded_sealed_history_reads_only_with_its_key_listed():
    """The recorded history replays while its key is listed, first or retired behind a newer
    one; without it, not a payload of it is read."""
    history = kept_history(HISTORIES / "result_kept_by_reference_sealed.json")
    newer = {"tests-2027": bytes(32), **TEST_PAYLOAD_KEYS}  # rotated: the old key decrypts still
    for keys, replays in ((newer, True), ({"other": bytes(32)}, False), ({}, False)):
        replayer = Replayer(workflows=WORKFLOWS, interceptors=[SignalGuard()],
                            data_converter=data_converter(PayloadSettings(
                                path=RECORDED_PAYLOADS, keys=keys)))
        result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
        assert (result.replay_failure is None) == replays, (keys.keys(), result.replay_failure)


async def test_a_conversation_started_as_the_cli_does_keeps_no_word_in_clear(
        client: Client, sealed: Sealed, model: ScriptedModelServer):
    """Its memo (what `list` shows), its summary and details in the Temporal UI, the tools'
    summaries, the model's reply: all sealed; the owner, a search attribute, is not (Temporal
    indexes it). `list` reads the memo back through the key."""
    trigger = script(model, unique("cli-sealed"),
                     ScriptedReply(tool_calls=[tool_call("get_weather", {"location": "Oslo"})]),
                     ScriptedReply(content="Oslo is cold and quiet."))
    owner, workflow_id = unique("sealer"), unique("conv")
    await sealed.session.start(ConversationInput(prompt=f"{trigger}: the Oslo plans",
                                                 owner=owner, one_shot=True), workflow_id)
    handle = sealed.client.get_workflow_handle(workflow_id)
    assert (await settled(handle, timeout_s=60)).final_answer == "Oslo is cold and quiet."
    text = (await raw_history(client, workflow_id)).to_json()
    description = await client.get_workflow_handle(workflow_id).describe()
    seen = text + str(description.raw_description)
    assert owner in seen  # AgentOwner
    for word in ("Oslo", trigger, "quiet"):
        assert word not in seen, word
    [row] = await sealed.session.conversations(owner=owner)
    assert row.prompt == f"{trigger}: the Oslo plans"


async def test_a_quick_read_s_large_result_is_kept_by_reference_too(
        client: Client, sealed: Sealed, model: ScriptedModelServer):
    """A safe read run as a local activity, in the workflow task: its 3 MB result is in the
    history's marker by reference, and read back from there."""
    trigger = script(model, unique("local-3mb"),
                     ScriptedReply(tool_calls=[tool_call("big_output", {"size": 3_000_000})]),
                     ScriptedReply(content="seen"))
    handle = await start(sealed.client, sealed.queue, trigger, one_shot=True)
    assert (await settled(handle, timeout_s=60)).final_answer == "seen"
    raw = await raw_history(client, handle.id)
    assert "big_output" not in scheduled(raw)  # it ran in the workflow task
    assert len(stored_keys(raw)) == 1 and task_failures(raw) == 0
    found = await full_result(sealed.session, handle.id, (await export(
        sealed.session, handle.id)).calls()[0].id)
    assert found.whole and found.text == "é" + "x" * (3_000_000 - 2)
