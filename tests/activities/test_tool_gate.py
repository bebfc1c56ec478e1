"""The worker's own check at execution, under the workflow's gate: it holds the floor of what
may run without a human, a tool activity runs a non-safe tool only with an approval of those
exact arguments (whoever scheduled it), and an MCP tool no server lists counts as destructive."""

from __future__ import annotations

import dataclasses
import json
import sys
from datetime import datetime, timezone
from pathlib import Path

import httpx
from temporalio.common import RawValue
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import ActivityEnvironment

from durable_react_agent.activities.mcp import McpToolbox, load_mcp_config
from durable_react_agent.activities.policy import parse_policy
from durable_react_agent.activities.settings import ActivitySettings, auto_approvable
from durable_react_agent.activities.tool_runner import ToolActivities
from durable_react_agent.activities.tools import ToolRegistry
from durable_react_agent.activities.tools.notes import NOTES_TOOLS
from durable_react_agent.contract import Decision, ToolInvocation, ToolOutcome
from durable_react_agent.rules.gate import POLICY, args_hash, execution_refusal
from tests.helpers import note_rows, unique

NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)


def approval(args: dict, approver: str = "ann", approved: bool = True) -> Decision:
    return Decision(call_id="c", tool="create_note", approved=approved, approver=approver, at=NOW,
                    args_hash=args_hash(args))


def invocation(args: dict, **kw) -> ToolInvocation:
    return ToolInvocation(call_id="c", arguments=args, idempotency_key=unique("key"), **kw)


def test_the_floor_comes_from_the_worker_environment():
    assert auto_approvable("") == frozenset() and auto_approvable("*") is None
    assert auto_approvable(" create_note, delete_note ,") == {"create_note", "delete_note"}


def test_a_non_safe_tool_runs_only_with_an_approval_of_these_arguments():
    args = {"title": "t", "body": "b"}
    ok = invocation(args, approval=approval(args), risk="sensitive")
    assert execution_refusal("create_note", "sensitive", ok, frozenset()) is None
    assert execution_refusal("get_weather", "safe", invocation(args), frozenset()) is None
    assert "carries no approval" in execution_refusal("create_note", "sensitive", invocation(args), None)
    rejected = invocation(args, approval=approval(args, approved=False), risk="sensitive")
    assert "carries no approval" in execution_refusal("create_note", "sensitive", rejected, None)
    edited = invocation({"title": "t", "body": "other"}, approval=approval(args), risk="sensitive")
    assert "not the ones ann approved" in execution_refusal("create_note", "sensitive", edited, None)
    policy = invocation(args, approval=approval(args, approver=POLICY), risk="sensitive")
    assert execution_refusal("create_note", "sensitive", policy, None) is None
    assert execution_refusal("create_note", "sensitive", policy, {"create_note"}) is None
    assert "does not let a policy approve" in execution_refusal("create_note", "sensitive", policy,
                                                               frozenset())
    assert "destructive now, not sensitive" in execution_refusal("create_note", "destructive", ok, None)


async def test_the_tool_activity_refuses_what_the_gate_did_not_approve(tmp_path):
    """Defence in depth: the activity itself, called directly as a forged schedule would."""
    settings = ActivitySettings(data_dir=tmp_path, auto_approvable=frozenset())
    async with httpx.AsyncClient() as http:
        tools = ToolActivities(ToolRegistry(NOTES_TOOLS), settings, http)
        env = ActivityEnvironment()
        env.payload_converter = pydantic_data_converter.payload_converter
        env.info = dataclasses.replace(env.info, activity_type="create_note")

        async def run(inv: ToolInvocation) -> ToolOutcome:
            payload = env.payload_converter.to_payloads([inv])[0]
            return await env.run(tools.run_tool, [RawValue(payload)])

        args = {"title": unique("forged"), "body": "b"}
        for forged in (invocation(args),
                       invocation(args, approval=approval({"title": "x", "body": "b"}),
                                  risk="sensitive"),
                       invocation(args, approval=approval(args, approver=POLICY), risk="sensitive")):
            refused = await run(forged)
            assert (refused.status, refused.risk) == ("needs_approval", "sensitive")
            assert refused.observation.startswith("Error: not run: ")
        assert note_rows(tmp_path, args["title"]) == []
        done = await run(invocation(args, approval=approval(args), risk="sensitive"))
        assert done.status == "ok" and len(note_rows(tmp_path, args["title"])) == 1



async def test_the_tool_activity_holds_the_policys_deny_and_checks_its_allow_again(tmp_path):
    """Where the call would run, the worker's policy (AGENT_POLICY) is judged again: a deny
    holds over a person's approval (arguments edited into a denied call, a conversation judged
    before the rule came), and a rule's approval counts only if the rule allows the call now."""
    policy = parse_policy({"rules": [
        {"name": "keep the index", "tools": ["delete_note"], "when": "args.note_id == 1",
         "effect": "deny"},
        {"name": "drafts", "tools": ["create_note"], "when": "args.title.startsWith('draft')",
         "effect": "allow"}]})
    rule = f"rule 'drafts' of policy {policy.revision[:12]}"
    async with httpx.AsyncClient() as http:
        for settings, draft_runs in ((ActivitySettings(data_dir=tmp_path, policy=policy), True),
                                     (ActivitySettings(data_dir=tmp_path), False)):
            tools = ToolActivities(ToolRegistry(NOTES_TOOLS), settings, http)
            env = ActivityEnvironment()
            env.payload_converter = pydantic_data_converter.payload_converter

            async def run(name: str, inv: ToolInvocation, env=env, tools=tools) -> ToolOutcome:
                env.info = dataclasses.replace(env.info, activity_type=name)
                payload = env.payload_converter.to_payloads([inv])[0]
                return await env.run(tools.run_tool, [RawValue(payload)])

            index = {"note_id": 1}
            denied = await run("delete_note", invocation(index, approval=approval(index),
                                                         risk="destructive"))
            if settings.policy is not None:
                assert denied.status == "error"
                assert denied.observation == ("Error: not run: denied by rule 'keep the index' "
                                              f"of policy {policy.revision[:12]}")
            draft = {"title": "draft " + unique("d"), "body": "b"}
            by_rule = approval(draft, approver=POLICY).model_copy(update={"rule": rule})
            outcome = await run("create_note", invocation(draft, approval=by_rule,
                                                          risk="sensitive"))
            assert (outcome.status == "ok") is draft_runs, outcome
            final = {"title": unique("final"), "body": "b"}  # no rule allows it
            by_rule = approval(final, approver=POLICY).model_copy(update={"rule": rule})
            outcome = await run("create_note", invocation(final, approval=by_rule,
                                                          risk="sensitive"))
            assert outcome.status == "needs_approval" and note_rows(tmp_path, final["title"]) == []


async def test_an_mcp_tool_no_server_lists_now_runs_only_as_destructive(tmp_path: Path):
    """A flapping server cannot list its tools when the call comes: the worker cannot tell the
    tool's risk, so it counts as destructive. Listed safe before, or approved as sensitive, it
    goes back before a human; approved for destructive, it runs once the server is back."""
    listings, runs = tmp_path / "failing-listings", tmp_path / "runs"
    config = tmp_path / "mcp.json"
    config.write_text(json.dumps({"mcpServers": {"flaky": {
        "command": sys.executable,
        "args": [str(Path(__file__).parents[1] / "mcp_servers" / "flaky_listing.py")],
        "env": {"FLAKY_LISTINGS": str(listings), "FLAKY_RUNS": str(runs)}}}}))
    settings = ActivitySettings(data_dir=tmp_path, auto_approvable=None)
    async with httpx.AsyncClient() as http, McpToolbox(load_mcp_config(config, {})) as toolbox:
        tools = ToolActivities(ToolRegistry([]), settings, http, mcp=toolbox)
        env = ActivityEnvironment()
        env.payload_converter = pydantic_data_converter.payload_converter
        env.info = dataclasses.replace(env.info, activity_type="flaky__peek")

        async def run_while_unlisted(inv: ToolInvocation) -> ToolOutcome:
            listings.write_text("1")  # this worker's listing fails once; then the server is back
            payload = env.payload_converter.to_payloads([inv])[0]
            return await env.run(tools.run_tool, [RawValue(payload)])

        args = {"what": "balance"}
        as_sensitive = approval(args).model_copy(update={"tool": "flaky__peek"})
        for unsure in (invocation(args), invocation(args, approval=as_sensitive, risk="sensitive")):
            refused = await run_while_unlisted(unsure)
            assert (refused.status, refused.risk) == ("needs_approval", "destructive")
            assert refused.observation.startswith(
                "Error: not run: no server lists flaky__peek now, so it counts as destructive: ")
        assert not runs.exists()
        done = await run_while_unlisted(invocation(args, approval=as_sensitive, risk="destructive"))
        assert (done.status, done.observation) == ("ok", "peeked at balance")
        assert runs.read_text() == "balance\n"
