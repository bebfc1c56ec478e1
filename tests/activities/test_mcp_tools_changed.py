"""An MCP server's `notifications/tools/list_changed` (or, on the 2026-07-28 protocol, its
`subscriptions/listen` event) is honoured at the conversation's next turn: the worker lists that
server again, and the conversation shakes hands again when its listing differs
(`rules.listing`, `workflows.handshake.tools_changed`)."""

from __future__ import annotations

from pathlib import Path

import httpx
from temporalio.client import Client

from durable_react_agent.activities.mcp import McpToolbox, load_mcp_config
from durable_react_agent.activities.settings import ActivitySettings
from durable_react_agent.activities.tools import ToolRegistry
from durable_react_agent.contract import ElicitAnswer, SayRequest
from durable_react_agent.rules.listing import changed_servers
from durable_react_agent.testing import ScriptedModelServer, ScriptedReply
from durable_react_agent.worker.app import build_worker
from durable_react_agent.workflows.conversation import ConversationWorkflow
from tests.helpers import replay, script, settled, start, tool_call, unique
from tests.mcp_support import asking_config


def test_only_a_server_that_lists_otherwise_now_is_a_change():
    kept = {"a": "1", "b": "2"}
    assert changed_servers(kept, kept) == []
    assert changed_servers(kept, {"a": "1"}) == []  # b is down now: its tools stay offered
    assert changed_servers(kept, {"a": "9", "b": "2", "c": "3"}) == ["a", "c"]
    assert changed_servers({}, {}) == []


async def test_the_toolbox_lists_again_once_a_server_says_its_tools_changed(tmp_path: Path):
    """On either protocol: the 2026-07-28 one (a listen stream), and the 2025-11-25 one (a
    notification), which the worker speaks with a server once it elicited."""
    async with McpToolbox(load_mcp_config(asking_config(tmp_path)[0], {})) as toolbox:
        before = await toolbox.listing()
        assert await toolbox.listing() is before  # nothing said: not listed again
        assert (await toolbox.call("asking__unlock", {})).observation == "unlocked"
        after = await toolbox.listing()
        assert after["asking"] != before["asking"]
        assert await toolbox.current_risk("asking__vault") == "safe"

        asked = await toolbox.call("asking__book", {"city": "Oslo"})  # now on 2025-11-25
        answer = ElicitAnswer(request=asked.question.request, action="decline")
        await toolbox.call("asking__book", {"city": "Oslo"}, elicited=[answer])
        settled_listing = await toolbox.listing()
        await toolbox.call("asking__unlock", {})  # said on the 2025-11-25 protocol: heard
        assert await toolbox.listing() is not settled_listing  # listed again
    async with McpToolbox(load_mcp_config(asking_config(tmp_path / "fresh")[0], {})) as fresh:
        assert "asking__vault" not in {t.name for t in (await fresh.discover()).tools}


async def test_a_conversation_sees_a_servers_new_tool_at_its_next_turn(
    client: Client, model: ScriptedModelServer, activity_settings: ActivitySettings,
    tmp_path: Path,
):
    """Turn 1 runs the tool that adds another; the model is offered the new tool in turn 2,
    and not before; the history replays."""
    trigger = script(model, unique("changing"),
                     ScriptedReply(tool_calls=[tool_call("asking__unlock", {})]),
                     ScriptedReply(content="{last_tool}"),
                     ScriptedReply(tool_calls=[tool_call("asking__vault", {})]),
                     ScriptedReply(content="{last_tool}"))
    queue = unique("changing")
    config, _ = asking_config(tmp_path)
    async with httpx.AsyncClient() as http, McpToolbox(load_mcp_config(config, {})) as toolbox:
        async with build_worker(client, queue, activity_settings, http, ToolRegistry([]),
                                mcp=toolbox):
            handle = await start(client, queue, trigger)
            first = await settled(handle, timeout_s=60)
            await handle.signal(ConversationWorkflow.say, SayRequest(text="and now?"))
            second = await settled(handle, turn=2, timeout_s=60)
            await handle.signal(ConversationWorkflow.end)
            await handle.result()
    assert (first.final_answer, second.final_answer) == ("unlocked", "the vault is open")
    offered = [{t["function"]["name"] for t in r.body["tools"]}
               for r in model.requests if r.trigger == trigger]
    assert ["asking__vault" in names for names in offered] == [False, False, True, True]
    await replay(handle, record_as="mcp_tools_changed")
