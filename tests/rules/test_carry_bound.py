"""The carried state at continue-as-new stays under its budget whatever the conversation did:
every section filled to its bound with the costliest text (control characters, six JSON bytes
each), through the same clips the workflow applies."""

from __future__ import annotations

import dataclasses
from datetime import datetime, timezone

from temporalio.contrib.workflow_streams import WorkflowStreamState
from temporalio.contrib.workflow_streams._types import (
    PublisherState,
    _WorkflowStreamWireItem,
)

from durable_react_agent.contract import (
    ApprovalPolicy,
    AuditAction,
    AuditRecord,
    ChatMessage,
    ConversationInput,
    Decision,
    FunctionCall,
    SignalOutcome,
    ToolCall,
    ToolDefinition,
    TurnSummary,
    Usage,
)
from durable_react_agent.contract.bounds import (
    AUDIT_BYTES,
    CARRY_BUDGET_BYTES,
    CATALOG_BYTES,
    CONTEXT_CARRY_BYTES,
    DEFAULT_MESSAGE_BYTES,
    INBOX_BYTES,
    MAX_APPROVER_BYTES,
    MAX_AUDIT_RECORDS,
    MAX_CALL_ID_BYTES,
    MAX_CALLS_PER_REPLY,
    MAX_ERROR_BYTES,
    MAX_EVENT_TEXT_BYTES,
    MAX_NOTICES,
    MAX_OBSERVATION_BYTES,
    MAX_QUEUED_MESSAGES,
    MAX_REASON_BYTES,
    MAX_REMEMBERED_CALLS,
    MAX_REMEMBERED_SIGNALS,
    MAX_REPLY_TEXT_BYTES,
    MAX_REQUEST_ID_BYTES,
    MAX_SEEN_CALL_IDS,
    MAX_STREAM_ITEMS,
    MAX_SUMMARY_BYTES,
    MAX_SYSTEM_PROMPT_BYTES,
    MAX_TOOL_NAME_BYTES,
    MAX_TOOLS_LISTED,
    MAX_TOOLS_USED,
    MAX_TURN_DECISIONS,
    MAX_TURN_SUMMARIES,
    Limits,
    Tail,
    clip,
    clip_bytes,
    json_size,
    text_size,
)
from durable_react_agent.contract.state import (
    ContextState,
    ConversationState,
    StreamSnapshot,
    TurnState,
)
from durable_react_agent.rules.repair import bound_reply
from durable_react_agent.rules.start_input import admitted_tools, settled_input
from durable_react_agent.rules.stopping import call_record
from durable_react_agent.workflows.handover import carried, next_input
from durable_react_agent.workflows.reporting import _clipped, carried_stream

NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)
CTRL = "\x01"  # costs six bytes in JSON ("\u0001")


def costly(size: int) -> str:
    """The costliest text the clips let through at `size` JSON bytes."""
    return clip(CTRL * size, size) or ""


def name(i: int, size: int = MAX_TOOL_NAME_BYTES) -> str:
    return f"t{i}_".ljust(size, "x")


def worst_context() -> ContextState:
    older = []
    for turn in range(200):
        older += [ChatMessage(role="user", content=costly(DEFAULT_MESSAGE_BYTES)),
                  ChatMessage(role="assistant", content=costly(MAX_REPLY_TEXT_BYTES))]
    calls = [ToolCall(id=costly(MAX_CALL_ID_BYTES)[:-2] + f"{i:02}",
                      function=FunctionCall(name=name(i), arguments=CTRL * 1000))
             for i in range(2 * MAX_CALLS_PER_REPLY)]
    reply, _ = bound_reply(ChatMessage(role="assistant", content=CTRL * 100_000, tool_calls=calls),
                           Limits.bounded(DEFAULT_MESSAGE_BYTES))
    rounds = []
    for _ in range(3):  # older rounds of the current turn, then the latest one
        rounds.append(reply)
        rounds += [ChatMessage(role="tool", tool_call_id=c.id,
                               content="x" * MAX_OBSERVATION_BYTES) for c in reply.tool_calls]
    current = [ChatMessage(role="user", content=costly(DEFAULT_MESSAGE_BYTES)), *rounds]
    return ContextState(
        system_prompt=clip_bytes(CTRL * 100_000, MAX_SYSTEM_PROMPT_BYTES),
        summary=clip_bytes(CTRL * 100_000, MAX_SUMMARY_BYTES), folded_turns=10**6,
        folded_steps=10**7, dropped_turns=10**6, drop_reason=costly(MAX_ERROR_BYTES),
        messages=[*older, *current], token_ratio=1.23456789,
    )


def worst_decision(i: int) -> Decision:
    return Decision(call_id=costly(MAX_CALL_ID_BYTES), tool=name(i), approved=False,
                    approver=costly(MAX_APPROVER_BYTES), at=NOW, args_hash="sha256:" + "f" * 64,
                    reason=costly(MAX_REASON_BYTES))


def worst_audit() -> list[AuditRecord]:
    audit = Tail([], MAX_AUDIT_RECORDS, AUDIT_BYTES)
    for i in range(20):
        actions = [AuditAction(call_id=costly(MAX_CALL_ID_BYTES), tool=name(j),
                               input={"a": CTRL * 10_000}, decision=worst_decision(j),
                               status="error", observation_bytes=10**9, full_bytes=10**9, ms=10**9)
                   for j in range(MAX_CALLS_PER_REPLY)]
        audit.append(_clipped(AuditRecord(at=NOW, turn=i, step=i, thought=CTRL * 10_000,
                                          actions=actions, tokens=Usage(total_tokens=10**9))))
    return audit.items


def worst_stream() -> WorkflowStreamState:
    log = [_WorkflowStreamWireItem(topic="tokens", data="A" * (MAX_EVENT_TEXT_BYTES * 2))
           for _ in range(MAX_STREAM_ITEMS)]
    publishers = {f"publisher-{i}": PublisherState(sequence=i, last_seen=NOW) for i in range(500)}
    return WorkflowStreamState(log=log, base_offset=10**9, publishers=publishers)


def worst_state() -> ConversationState:
    inbox = Tail([], MAX_QUEUED_MESSAGES, INBOX_BYTES, text_size)
    while inbox.fits(text_size(text := costly(DEFAULT_MESSAGE_BYTES // 4))):
        inbox.append(text)
    tools, _ = admitted_tools(
        [ToolDefinition(name=name(i), description=CTRL * 100, parameters={"x": CTRL * 100})
         for i in range(1000)], Limits.bounded(DEFAULT_MESSAGE_BYTES))
    summary = TurnSummary(turn=10**9, steps_taken=10**9, llm_calls=10**9,
                          tools_used=[name(i) for i in range(MAX_TOOLS_LISTED)],
                          stop_reason="budget_exceeded", usage=Usage(total_tokens=10**9),
                          error=costly(MAX_ERROR_BYTES))
    state = ConversationState(
        context=worst_context(),
        current=TurnState(
            number=10**9, in_progress=True, steps=10**9, llm_calls=10**9,
            usage=Usage(prompt_tokens=10**12, completion_tokens=10**12, total_tokens=10**12),
            tools_used=[name(i) for i in range(MAX_TOOLS_USED)], stop_reason="loop_detected",
            final_answer=clip_bytes(CTRL * 100_000, MAX_REPLY_TEXT_BYTES),
            error=costly(MAX_ERROR_BYTES), forced_reason="loop_detected",
            call_records=[call_record(name(0), {"a": CTRL * 10_000}, CTRL * 10_000)] * 2,
            decisions=[worst_decision(i) for i in range(MAX_TURN_DECISIONS)],
        ),
        inbox=inbox.items, catalog={t.name: t for t in tools},
        llm_calls=10**9, usage=Usage(total_tokens=10**12),
        turns=[summary] * MAX_TURN_SUMMARIES,
        seen_call_ids=[costly(MAX_CALL_ID_BYTES)] * MAX_SEEN_CALL_IDS,
        past_calls=[(costly(MAX_CALL_ID_BYTES), "it was already approved by "
                     + costly(MAX_APPROVER_BYTES))] * MAX_REMEMBERED_CALLS,
        outcomes=[SignalOutcome(request_id=costly(MAX_REQUEST_ID_BYTES), accepted=False,
                                reason=costly(MAX_REASON_BYTES), turn=10**9)] * MAX_REMEMBERED_SIGNALS,
        end_requested=True, runs=10**9, audit=worst_audit(), audit_dropped=10**9,
    )
    for _ in range(2 * MAX_NOTICES):
        state.notice(CTRL * 10_000)
    return state


def test_the_worst_carry_fits_its_budget():
    inp, _ = settled_input(ConversationInput(
        prompt=CTRL * DEFAULT_MESSAGE_BYTES, system_prompt=CTRL * 10**6, model=CTRL * 10**5,
        approval=ApprovalPolicy(auto_approve=[name(i) for i in range(1000)]),
        max_observation_bytes=10**9, context_budget_tokens=10**9,
    ), Limits.bounded(DEFAULT_MESSAGE_BYTES))
    state = worst_state()
    assert json_size(state) > 4 * CARRY_BUDGET_BYTES  # the run's own state, before the fitting

    handed = next_input(inp, carried(state, StreamSnapshot.model_validate(
        dataclasses.asdict(carried_stream(worst_stream())))))
    size = json_size(handed)
    assert size <= CARRY_BUDGET_BYTES, f"the carry is {size:,} bytes"
    assert json_size(handed.state.context) <= CONTEXT_CARRY_BYTES
    assert json_size(handed.state.catalog) <= CATALOG_BYTES + 4096
    assert handed.state.inbox == state.inbox  # accepted messages are never dropped
    print(f"worst carry: {size:,} of {CARRY_BUDGET_BYTES:,} bytes")


def test_fitting_the_context_keeps_the_current_turn_whole_in_structure():
    before = worst_state()
    ctx = carried(before, StreamSnapshot()).context
    messages = ctx.messages
    current_user = [m for m in before.context.messages if m.role == "user"][-1]
    assert messages[0] == current_user and [m.role for m in messages].count("user") == 1
    calls = [c.id for m in messages for c in (m.tool_calls or [])]
    assert calls == [m.tool_call_id for m in messages if m.role == "tool"]  # every call has its result
    assert ctx.dropped_turns > 10**6 and "size bound" in (ctx.drop_reason or "")
    assert any(m.role == "system" and "earlier tool steps dropped" in (m.content or "") for m in messages)
    assert all("[cut: observation of" in (m.content or "") for m in messages if m.role == "tool")
