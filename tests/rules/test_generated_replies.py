"""Generated model replies through everything that reads them, without a server: the activity
assembling the streamed chunks, the workflow making the reply usable (ids, bounds, recovered
calls), checking each call against its tool, holding the risky ones for a person, and the
status, the Temporal UI's details and the CLI's rendering of what waits. For any reply: nothing
raises, every id is of the safe alphabet, everything serializes to valid UTF-8, and every
command printed is one shell command. Hundreds of examples in `make test`;
AGENT_GENERATED_EXAMPLES raises the count for a long run."""

from __future__ import annotations

import json
import os
from typing import Any

from hypothesis import HealthCheck, given, settings

from durable_react_agent.activities.llm_stream import ReplyAssembler
from durable_react_agent.client.render import render_status
from durable_react_agent.contract import ApprovalPolicy, ConversationStatus, Usage
from durable_react_agent.contract.bounds import Limits, preview_args
from durable_react_agent.contract.state import ContextState, ConversationState
from durable_react_agent.rules import gate, loop
from durable_react_agent.rules.commands import details_markdown
from durable_react_agent.rules.questions import ASK_TOOLS
from durable_react_agent.rules.repair import (
    SAFE_ID_CHARS,
    bound_reply,
    recover_tool_calls,
    unique_call_ids,
)
from durable_react_agent.testing import ScriptedReply
from durable_react_agent.testing.script import tool_call_payloads
from tests.decisions_support import decisions
from tests.fake_tools import registry_with_test_tools
from tests.generated import one_command, printed_commands, replies

EXAMPLES = int(os.environ.get("AGENT_GENERATED_EXAMPLES", "300"))
CATALOG = {t.name: t for t in [*ASK_TOOLS, *registry_with_test_tools().definitions()]}
LIMITS = Limits.bounded(256 * 1024)


def wire(value: Any) -> Any:
    """A value as the endpoint's JSON carries it and the SDK decodes it."""
    return json.loads(json.dumps(value))


def streamed(reply: ScriptedReply) -> list[dict[str, Any]]:
    """The chunks' JSON, as the scripted server streams `reply` and the worker reads it."""
    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return wire({"model": "scripted", "usage": None,
                     "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
    chunks = [chunk({"content": wire(reply.content)})] if reply.content else []
    for i, call in enumerate(tool_call_payloads(1, reply)):
        chunks.append(chunk({"tool_calls": [{"index": i, "id": wire(call["id"]), "function": {
            "name": wire(call["function"]["name"]),
            "arguments": wire(call["function"]["arguments"])}}]}))
    chunks.append(chunk({}, reply.effective_finish_reason()))
    return chunks


@settings(max_examples=EXAMPLES, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(reply=replies)
def test_any_reply_is_usable_serializable_and_printed_as_one_command(reply: ScriptedReply):
    assembler = ReplyAssembler("scripted")
    for chunk in streamed(reply):
        assembler.add(chunk)
    message = recover_tool_calls(assembler.result().message, CATALOG)
    state = ConversationState(context=ContextState(system_prompt="s"), catalog=dict(CATALOG))
    if message.tool_calls:
        calls = unique_call_ids(message.tool_calls, ["dup"], 1, 1)
        message = message.model_copy(update={"tool_calls": calls})
    message, refused = bound_reply(message, LIMITS)
    desk = decisions(state, owner="alice", limits=LIMITS)
    for call in message.tool_calls or []:
        assert SAFE_ID_CHARS.issuperset(call.id) and 0 < len(call.id) <= 64, call.id
        assert not call.id.startswith("-"), call.id  # a printed command would take it as an option
        checked = loop.check_tool_call(call, CATALOG)
        if call.id in refused or isinstance(checked, loop.InvalidCall):
            continue
        preview_args(checked.arguments)
        loop.describe_call(checked.tool.name, checked.arguments)
        if gate.needs_approval(checked.tool, ApprovalPolicy()):
            desk.approvals.hold(call.id, checked.tool, checked.arguments, ticket="t")
    status = ConversationStatus(
        workflow_id="conv-1", status=desk.waiting_status() or "idle", turn=1, steps=1,
        llm_calls=1, tools_used=[], stop_reason=None, final_answer=message.content,
        pending_confirmations=desk.approvals.pending_confirmations(), usage=Usage(), error=None,
        owner="alice")
    status.model_dump_json().encode()
    message.model_dump_json().encode()
    details = details_markdown("conv-1", status.status, 1, None, None,
                               desk.approvals.pending_confirmations(),
                               desk.question.pending_question(), desk.approvals.owner)
    commands = printed_commands(render_status(status), details)
    assert len(commands) >= 3 * len(status.pending_confirmations)
    for command in commands:
        assert one_command(command), command
