"""What a run hands to the next one arrives whole: the old carried shape (`CarriedState`, still
read for runs begun by earlier versions) and today's handover (`carried`). Pure, no server.

Each test enumerates the models' fields, so a field added to a model and forgotten on the way
fails here, not in a conversation that quietly lost its usage or its decisions."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

from pydantic import BaseModel
from temporalio.contrib.workflow_streams import WorkflowStreamState
from temporalio.contrib.workflow_streams._types import (
    PublisherState,
    _WorkflowStreamWireItem,
)

from durable_react_agent.contract import (
    AuditRecord,
    ChatMessage,
    ChildReport,
    Decision,
    EntryLimits,
    NotifyRequest,
    SignalOutcome,
    ToolDefinition,
    TurnSummary,
    Usage,
    WebhookRef,
)
from durable_react_agent.contract.owner import Lease, TurnShare
from durable_react_agent.contract.policy import Grant
from durable_react_agent.contract.state import (
    CarriedState,
    ContextState,
    ConversationState,
    ModelRoutes,
    RanCall,
    StreamSnapshot,
    TurnState,
)
from durable_react_agent.rules.stopping import call_record_of_key
from durable_react_agent.workflows.handover import carried

NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)


def stream() -> StreamSnapshot:
    """Temporal's stream state, as the contract carries it (the same fields and JSON)."""
    return StreamSnapshot.model_validate(dataclasses.asdict(WorkflowStreamState(
        log=[_WorkflowStreamWireItem(topic="events", data="e30=")], base_offset=41,
        publishers={"llm": PublisherState(sequence=3, last_seen=NOW)})))


def old_carry() -> CarriedState:
    """A carry of the old shape with every field set to what no default gives."""
    return CarriedState(
        messages=[ChatMessage(role="system", content="a custom system prompt"),
                  ChatMessage(role="user", content="hi"),
                  ChatMessage(role="assistant", content="hello")],
        inbox=["a queued message"],
        catalog=[ToolDefinition(name="get_weather", description="d", parameters={"type": "object"})],
        setup_errors=["a tool source was down"],
        turn=7, steps=3, llm_calls=11, turn_llm_calls=2,
        tools_used=["get_weather"], stop_reason="max_steps", final_answer="done", error="oops",
        usage=Usage(prompt_tokens=800, completion_tokens=100, total_tokens=900, cached_tokens=5,
                    cost_usd=0.25, cost_note="priced"),
        turn_usage=Usage(prompt_tokens=100, completion_tokens=20, total_tokens=120, cost_usd=0.01),
        turns=[TurnSummary(turn=6, steps_taken=2, llm_calls=2, tools_used=["get_weather"],
                           stop_reason="answered", usage=Usage(total_tokens=50))],
        in_turn=True, forced_reason="loop_detected",
        call_records=[("get_weather", '{"location":"a"}', "r0"),
                      ("get_weather", '{"location":"b"}', "r1"),
                      ("get_weather", '{"location":"b"}', "r1")],
        seen_call_ids=["call_1"],
        outcomes=[SignalOutcome(request_id="r1", accepted=True, turn=7)],
        past_calls=[("call_0", "it was already approved by ann")],
        decisions=[Decision(call_id="call_1", tool="create_note", approved=True, approver="ann",
                            at=NOW, args_hash="sha256:ab")],
        end_requested=True, runs=4,
        audit=[AuditRecord(at=NOW, turn=7, step=1, thought="t", tokens=Usage(total_tokens=3))],
        audit_dropped=5, stream=stream(),
    )


def same(value: Any) -> Any:
    return value


# Where each field of the old shape lands in the state, and what it must equal there.
LANDS: dict[str, tuple[Callable[[ConversationState], Any], Callable[[Any], Any]]] = {
    "messages": (lambda s: [ChatMessage(role="system", content=s.context.system_prompt),
                            *s.context.messages], same),
    "inbox": (lambda s: s.inbox, same),
    "catalog": (lambda s: list(s.catalog.values()), same),
    "setup_errors": (lambda s: s.notices, same),
    "turn": (lambda s: s.current.number, same),
    "steps": (lambda s: s.current.steps, same),
    "llm_calls": (lambda s: s.llm_calls, same),
    "turn_llm_calls": (lambda s: s.current.llm_calls, same),
    "tools_used": (lambda s: s.current.tools_used, same),
    "stop_reason": (lambda s: s.current.stop_reason, same),
    "final_answer": (lambda s: s.current.final_answer, same),
    "error": (lambda s: s.current.error, same),
    "usage": (lambda s: s.usage, same),
    "turn_usage": (lambda s: s.current.usage, same),
    "turns": (lambda s: s.turns, same),
    "in_turn": (lambda s: s.current.in_progress, same),
    "forced_reason": (lambda s: s.current.forced_reason, same),
    "call_records": (lambda s: s.current.call_records,  # the latest two: loop detection's window
                     lambda records: [call_record_of_key(*r) for r in records[-2:]]),
    "seen_call_ids": (lambda s: s.seen_call_ids, same),
    "outcomes": (lambda s: s.outcomes, same),
    "past_calls": (lambda s: s.past_calls, same),
    "decisions": (lambda s: s.current.decisions, same),
    "end_requested": (lambda s: s.end_requested, same),
    "runs": (lambda s: s.runs, same),
    "audit": (lambda s: s.audit, same),
    "audit_dropped": (lambda s: s.audit_dropped, same),
    "stream": (lambda s: s.stream, same),
}

# What the old shape never held: these start from their defaults.
NOT_IN_THE_OLD_SHAPE = {
    "context.summary", "context.folded_turns", "context.folded_steps", "context.dropped_turns",
    "context.drop_reason", "context.token_ratio", "context.prompt_tokens", "current.children",
    "context.window_tokens",
    "current.final_output", "current.corrections", "current.reminders",
    "four_eyes",  # a conversation from before four eyes has none (nor an owner to hold to it)
    "current.trace", "current.started_at",  # a turn from before traces has none: no spans
    "current.fallbacks", "models", "tool_queue",  # from before model entries: routed as ever
    "webhooks", "webhook_retry_s", "outbox", "notified",  # from before webhooks: none
    "pushes",  # from before A2A push notifications: none
    "reported",  # a subagent from before numbered reports
    "memory",  # a conversation from before memory recalls nothing
    "handshake_version",  # from before versioned workers: unversioned
    "mcp_listing",  # from before tool list changes were heard: never looks
    # from before the real models' shapes: no call ran this turn, no question asked in a row,
    # no message counted by the model's server
    "current.ran", "current.questions_in_a_row", "context.counted",
    # from before policies and grants: none, nothing granted, nothing to keep
    "policy_revision", "grants", "grants_made", "owner_grants", "grants_to_keep", "kept_uses",
    "steering",  # from before steering: nothing steered into the turn
    # from before owners' limits: no share held, none to keep to, no grant come early
    "current.share", "owner_limits", "early_grants",
}


def leaves(model: BaseModel, default: BaseModel, prefix: str = "") -> list[tuple[str, Any, Any]]:
    """(dotted name, value, default) of every field, into the nested state models."""
    out = []
    for name in type(model).model_fields:
        value, empty = getattr(model, name), getattr(default, name)
        if isinstance(value, (ContextState, TurnState)):
            out += leaves(value, empty, f"{prefix}{name}.")
        else:
            out.append((f"{prefix}{name}", value, empty))
    return out


def empty_state() -> ConversationState:
    return ConversationState(context=ContextState(system_prompt=""))


def test_every_field_of_an_old_carry_arrives_in_the_state():
    carry = old_carry()
    assert set(LANDS) == set(CarriedState.model_fields), "a field of CarriedState has no place here"
    fresh = CarriedState.model_construct()  # only the defaults
    for name in CarriedState.model_fields:
        value = getattr(carry, name)
        assert value not in (None, 0, False, "", [], Usage()), f"set {name} to a telling value"
        assert name not in fresh.__dict__ or value != fresh.__dict__[name], name

    state = carry.to_state("the default system prompt")
    for name, (arrived, expected) in LANDS.items():
        assert arrived(state) == expected(getattr(carry, name)), f"{name} did not arrive"
    left = [name for name, value, default in leaves(state, empty_state())
            if value == default and name not in NOT_IN_THE_OLD_SHAPE]
    assert left == [], f"to_state left these at their defaults: {left}"


def test_an_old_carry_without_a_system_message_gets_the_default_prompt():
    carry = old_carry().model_copy(update={"messages": [ChatMessage(role="user", content="hi")]})
    state = carry.to_state("the default system prompt")
    assert state.context.system_prompt == "the default system prompt"
    assert state.context.messages == carry.messages


def full_state() -> ConversationState:
    state = old_carry().to_state("s")
    state.context = state.context.model_copy(update={
        "summary": "the gist", "folded_turns": 3, "folded_steps": 4, "dropped_turns": 1,
        "drop_reason": "why", "token_ratio": 1.5, "prompt_tokens": 99, "window_tokens": 8192,
        "counted": {"5f1c2a9d0e4b7c36": 4981}})
    state.current.children = [ChildReport(workflow_id="conv/w1", profile="writer",
                                          status="waiting_for_confirmation")]
    state.current.final_output, state.current.corrections = {"typed": True}, 1
    state.current.reminders = 1
    state.current.ran = [RanCall(tool="create_note", key="k" * 32, call_id="call_1")]
    state.current.questions_in_a_row = 2
    state.four_eyes = ["destructive"]
    state.current.trace = "00-000000000000000000000000000000ab-00000000000000cd-01"
    state.current.started_at = NOW
    state.current.fallbacks = 1
    state.models = ModelRoutes(entries=["main", "backup"], default="main",
                               fallbacks={"main": ["backup"]}, queues={"main": "q.model.main"},
                               shared="q.models",
                               limits={"main": EntryLimits(context_tokens=8192, timeout_s=600)})
    state.tool_queue = "q.tools"
    state.memory = True
    state.handshake_version = "agents:b7"
    state.mcp_listing = {"asking": "a4374ffe9712f4d7"}
    state.webhooks = [WebhookRef(index=0, host="hooks.example", events=["turn_finished"])]
    state.pushes = [WebhookRef(index=-1, host="client.example", events=["turn_finished"],
                               push="push-1")]
    state.webhook_retry_s, state.notified, state.reported = 60.0, 3, 2
    state.outbox = [NotifyRequest(webhook=0, host="hooks.example", event="turn_finished",
                                  key="k" * 32, payload={"turn": 1})]
    state.policy_revision = "3f2a" * 16
    state.steering = ["in Celsius, please"]
    state.grants = [Grant(id="g1", tool="create_note", scope="conversation", by="alice", at=NOW,
                          expires_at=NOW, uses_left=2, used=1)]
    state.grants_made, state.owner_grants = 2, True
    state.owner_limits = True
    state.current.share = TurnShare(key="conv#1", seq=2, slot=True, tokens=9000, used_tokens=1446,
                                    granted=2)
    state.early_grants = [Lease(key="conv#2", seq=1, granted=True, tokens=1000)]
    state.grants_to_keep = [Grant(id="o-0123456789ab", tool="create_note", scope="owner",
                                  by="alice", at=NOW, used=1)]
    state.kept_uses = [("o-0123456789ab", "conv:1:1:call_0")]
    return state


def test_the_handover_carries_every_field_and_changes_only_what_it_must():
    state = full_state()
    after = carried(state, stream())
    changed = {name for name, value, before in leaves(after, state) if value != before}
    # The context is fitted to its byte bound (it fits: unchanged here), the audit re-tailed,
    # the stream replaced by its carried tail, and the run counted.
    assert changed <= {"stream", "runs", "audit", "audit_dropped"}, changed
    assert after.runs == state.runs + 1 and after.stream == stream()
    assert after.usage == state.usage and after.current.usage == state.current.usage
    left = [name for name, value, default in leaves(after, empty_state()) if value == default]
    assert left == [], f"the handover left these at their defaults: {left}"
