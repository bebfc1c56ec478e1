"""An MCP server's request (elicitation, sampling) reaches only the call it belongs to, never a
call of another conversation: on streamable HTTP by the stream it came on; on stdio through a
session of the conversation's own; anything else is refused with a reason the server reads
(`activities.mcp.elicitation`, `activities.mcp.sessions`)."""

from __future__ import annotations

import asyncio
import contextvars
import json
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from mcp.types import CreateMessageRequestParams, CreateMessageResult, SamplingMessage, TextContent
from temporalio.common import RawValue

from durable_react_agent.activities.mcp import McpToolbox, load_mcp_config
from durable_react_agent.activities.mcp.config import StdioServerConfig
from durable_react_agent.activities.mcp.elicitation import AskingCall, InFlight, outside_any_call
from durable_react_agent.activities.mcp.sessions import IDLE_S, MAX_IDLE, ConversationSessions
from durable_react_agent.activities.settings import ActivitySettings
from durable_react_agent.activities.tool_runner import ToolActivities
from durable_react_agent.activities.tools import ToolRegistry
from durable_react_agent.contract import ElicitAnswer, ToolInvocation, ToolOutcome
from tests.helpers import unique
from tests.mcp_support import asking_config, told, tool_env

ASK = CreateMessageRequestParams(
    messages=[SamplingMessage(role="user", content=TextContent(type="text", text="a headline"))],
    max_tokens=10)


async def test_a_late_request_never_reaches_another_conversations_call(
    activity_settings: ActivitySettings, tmp_path: Path,
):
    """A stdio server asks after its call in one conversation returned, while a call of another
    conversation runs: the request is refused (no call of its conversation is in flight), and
    the other conversation's call runs on, undisturbed. Each conversation is known to the tool
    activity by its workflow id."""
    config, log = asking_config(tmp_path, timeout_s=20)
    async with httpx.AsyncClient() as http, McpToolbox(load_mcp_config(config, {})) as toolbox:
        tools = ToolActivities(ToolRegistry([]), activity_settings, http, mcp=toolbox)

        async def run(tool: str, conversation: str, arguments: dict) -> ToolOutcome:
            env = tool_env(tool, conversation)
            invocation = ToolInvocation(call_id="call_1", arguments=arguments,
                                        idempotency_key=unique("key"))
            payload = env.payload_converter.to_payloads([invocation])[0]
            return await env.run(tools.run_tool, [RawValue(payload)])

        promised = await run("asking__remind", "conversation-a", {"about": "the umbrella"})
        held = await run("asking__hold", "conversation-b", {})
    assert promised.observation == "will ask about the umbrella"
    assert (held.status, held.observation, held.question) == ("ok", "held", None)
    assert [r for r in told(log) if "late" in r] == [
        {"late": "the umbrella", "refused": "no call of this client is in flight, so it "
                                            "answers none"}]


async def test_on_streamable_http_each_request_reaches_the_call_it_came_in(
    tmp_path: Path, http_ports: dict[str, int],
):
    """Two conversations' calls in flight at once on the worker's one session: each question
    is its own call's, and each answer reaches its own call."""
    url = f"http://127.0.0.1:{http_ports['streamable']}/mcp"
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps({"mcpServers": {"notes": {"url": url, "timeout_s": 20}}}))
    async with McpToolbox(load_mcp_config(path, {})) as toolbox:
        await toolbox.discover()

        def stay(city: str, conversation: str, *answers: ElicitAnswer):
            return toolbox.call("notes__stay", {"city": city, "party": 2},
                                elicited=list(answers), conversation=conversation)

        lyon, oslo = await asyncio.gather(stay("Lyon", "a"), stay("Oslo", "b"))
        assert (lyon.status, oslo.status) == ("needs_input", "needs_input"), (lyon, oslo)
        assert lyon.question.message == "How many nights in Lyon?"
        assert oslo.question.message == "How many nights in Oslo?"
        three = ElicitAnswer(request=lyon.question.request, action="accept", content={"nights": 3})
        five = ElicitAnswer(request=oslo.question.request, action="accept", content={"nights": 5})
        lyon, oslo = await asyncio.gather(stay("Lyon", "a", three), stay("Oslo", "b", five))
    assert (lyon.observation, oslo.observation) == ("3 nights in Lyon", "5 nights in Oslo")


async def test_a_request_is_answered_only_by_the_call_it_names():
    """On a session the worker shares, a request must come in its call (the SDK hands it the
    context of the task that sent the call): one from outside any call, or from a call that
    ended, is refused. On a conversation's own session a request that names no call goes to
    its one call in flight, and is refused with none or several."""
    async def answer(params: CreateMessageRequestParams) -> CreateMessageResult:
        return CreateMessageResult(role="assistant", model="m",
                                   content=TextContent(type="text", text="Rain Stops Play"))

    def outside(inflight: InFlight, context: contextvars.Context | None = None):
        """A request the session's reader hands over: in no call's context, or in `context`."""
        return asyncio.create_task(inflight.sample(None, ASK),
                                   context=context or outside_any_call())

    shared, own = InFlight(shared=True), InFlight(shared=False)
    write, other = AskingCall("s", "write", [], answer), AskingCall("s", "read", [], answer)
    with shared.running(write):
        named = await shared.sample(None, ASK)
        unnamed = await outside(shared)
        within = contextvars.copy_context()
    late = await outside(shared, within)
    assert isinstance(named, CreateMessageResult)
    assert unnamed.message == ("this request came outside the call it belongs to, on a session "
                               "that serves several conversations: the client cannot tell whose "
                               "it is, so it answers none")
    assert late.message == ("the call of write that this request belongs to has ended: this "
                            "client answers a request only during its call")

    write, other = AskingCall("s", "write", [], answer), AskingCall("s", "read", [], answer)
    with own.running(write):
        sole = await outside(own)
        with own.running(other):
            two = await outside(own)
    none = await outside(own)
    assert isinstance(sole, CreateMessageResult)
    assert two.message.startswith("2 calls are in flight on this session")
    assert none.message == "no call of this client is in flight, so it answers none"


@dataclass
class FakeSession:
    server: StdioServerConfig
    alive: bool = True
    in_flight: InFlight = field(default_factory=lambda: InFlight(shared=False))


def test_a_servers_sessions_of_its_conversations_are_bounded():
    """As another conversation comes, the server's idle sessions past `IDLE_S`, dead ones, and
    the least recently used idle ones beyond `MAX_IDLE` are closed; one with a call in flight
    never is. A conversation whose session was closed gets a new one."""
    server = StdioServerConfig(name="asking", command="x")
    closed: list[FakeSession] = []
    sessions = ConversationSessions(lambda s: FakeSession(s), closed.append)
    first = [sessions.get(server, f"c{i}") for i in range(MAX_IDLE)]
    assert sessions.get(server, "c5") is first[5] and closed == []
    with first[0].in_flight.running(AskingCall("asking", "book", [])):
        first[2].in_flight.idle_since -= IDLE_S + 1  # its conversation went quiet
        first[4].alive = False  # its server died
        sessions.get(server, "d0")
        assert closed == [first[2], first[4]]
        for name in ("d1", "d2", "d3", "d4"):
            sessions.get(server, name)  # the 9th idle one closes the least recently used
        assert closed == [first[2], first[4], first[1]]
        assert sessions.get(server, "c0") is first[0]  # least recently used, but busy
    assert closed == [first[2], first[4], first[1], first[3]]
    assert sessions.get(server, "c1") not in first
