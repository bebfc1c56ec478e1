"""The MCP toolbox against real servers: mcp-server-time over stdio, and our own over HTTP and SSE."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest
import structlog
from mcp import Client, StdioServerParameters
from mcp.types import (
    AudioContent,
    BlobResourceContents,
    CallToolResult,
    EmbeddedResource,
    ImageContent,
    ResourceLink,
    TextContent,
    TextResourceContents,
    Tool,
    ToolAnnotations,
)

from durable_react_agent.activities.mcp import McpConfigError, McpToolbox, load_mcp_config
from durable_react_agent.activities.mcp.catalog import build_catalog, exposed_name
from durable_react_agent.activities.mcp.config import StdioServerConfig
from durable_react_agent.activities.mcp.content import result_text
from tests.mcp_support import PYTHON, SERVERS, TOKEN

UNRULY = {"command": PYTHON, "args": [str(SERVERS / "stdio_server.py")]}


def write_config(tmp_path: Path, servers: dict[str, Any]) -> Path:
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps({"mcpServers": servers}))
    return path


def server_processes(marker: str) -> set[int]:
    """Live children of this process whose command line contains `marker`."""
    pids = set()
    for children in Path("/proc/self/task").glob("*/children"):
        for pid in children.read_text().split():
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            except FileNotFoundError:
                continue
            if marker.encode() in cmdline:
                pids.add(int(pid))
    return pids


async def wait_until_gone(pid: int) -> None:
    for _ in range(200):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"process {pid} is still alive")


async def wait_until_noticed(toolbox: McpToolbox, server: str) -> None:
    """Until the toolbox has seen the server hang up (the end of its stdout)."""
    for _ in range(250):
        connection = toolbox._connections.get(server)
        if connection is None or not connection.alive:
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"the toolbox never noticed that {server} hung up")


async def test_time_server_over_stdio_reuses_one_process(tmp_path: Path) -> None:
    command = {"command": PYTHON, "args": ["-m", "mcp_server_time"]}
    config = load_mcp_config(write_config(tmp_path, {"time": command}), os.environ)
    async with Client(StdioServerParameters(**command), cache=None) as reference:
        reported = {tool.name: tool.input_schema for tool in (await reference.list_tools()).tools}

    async with McpToolbox(config) as toolbox:
        discovery = await toolbox.discover()
        tools = {tool.name: tool for tool in discovery.tools}
        assert discovery.errors == []
        current = tools["time__get_current_time"]
        assert (current.risk, current.idempotent, current.timeout_s) == ("safe", True, 15.0)
        assert current.parameters == reported["get_current_time"]
        assert current.description.startswith("[time] ")

        first = await toolbox.call("time__get_current_time", {"timezone": "Europe/Paris"})
        spawned = server_processes("mcp_server_time")
        second = await toolbox.call("time__get_current_time", {"timezone": "Asia/Tokyo"})
        assert first.status == "ok" and "Europe/Paris" in first.observation
        assert second.status == "ok" and "Asia/Tokyo" in second.observation
        assert len(spawned) == 1 and server_processes("mcp_server_time") == spawned
    assert server_processes("mcp_server_time") == set()


async def test_streamable_http_tools_headers_and_results(tmp_path: Path, http_ports: dict[str, int]) -> None:
    url = f"http://127.0.0.1:{http_ports['streamable']}/mcp"
    path = write_config(tmp_path, {
        "notes": {"url": url, "headers": {"Authorization": "Bearer ${NOTES_TOKEN}"}},
        "nosy": {"url": f"{url.removesuffix('/mcp')}/nowhere?key=${{NOTES_TOKEN}}", "transport": "sse"},
    })
    with structlog.testing.capture_logs() as logs:
        config = load_mcp_config(path, {"NOTES_TOKEN": TOKEN})
        async with McpToolbox(config) as toolbox:
            discovery = await toolbox.discover()
            tools = {tool.name: tool for tool in discovery.tools}
            outcomes = {
                name: await toolbox.call(f"notes__{name}", arguments)
                for name, arguments in [("whoami", {}), ("snapshot", {}), ("archive_all", {}),
                                        ("delete_note", {"note_id": "n1"})]
            }
            invalid = await toolbox.call("notes__search_notes", {"query": {"text": "x", "window": {}}})
    async with Client(url, cache=None) as reference:
        reported = {tool.name: tool.input_schema for tool in (await reference.list_tools()).tools}

    assert (tools["notes__delete_note"].risk, tools["notes__delete_note"].idempotent) == ("destructive", False)
    assert (tools["notes__search_notes"].risk, tools["notes__archive_all"].risk) == ("safe", "sensitive")
    assert tools["notes__search_notes"].parameters == reported["search_notes"]
    assert outcomes["whoami"].observation == "authorized"
    assert outcomes["snapshot"].observation == "[image image/png, 66 bytes]"
    assert outcomes["archive_all"].status == "error"
    assert outcomes["archive_all"].observation.startswith("Error: ")
    assert "read-only today" in outcomes["archive_all"].observation
    assert outcomes["delete_note"].observation == "deleted n1"
    # Rejected here, in our words; the server's own validation would say "Error executing tool".
    assert invalid.status == "error"
    assert invalid.observation == (
        "Error: invalid arguments for notes__search_notes at $.query.window: "
        "'start' is a required property"
    )
    [nosy_error] = discovery.errors
    assert nosy_error == (
        f'MCP server "nosy": failed to connect: Client error \'404 Not Found\' '
        f"for url 'http://127.0.0.1:{http_ports['streamable']}/nowhere?key=***'"
    )
    shown = [repr(config), str(config), *discovery.errors, repr(logs),
             *(outcome.observation for outcome in outcomes.values())]
    assert not [text for text in shown if TOKEN in text]


async def test_url_without_transport_falls_back_to_sse(tmp_path: Path, http_ports: dict[str, int]) -> None:
    url = f"http://127.0.0.1:{http_ports['sse']}/sse"
    servers = {"legacy": {"url": url, "headers": {"Authorization": f"Bearer {TOKEN}"}}}
    async with McpToolbox(load_mcp_config(write_config(tmp_path, servers), {})) as toolbox:
        discovery = await toolbox.discover()
        outcome = await toolbox.call("legacy__whoami", {})
    assert discovery.errors == []
    assert (outcome.status, outcome.observation) == ("ok", "authorized")


async def test_crashed_or_hung_server_is_replaced_on_the_next_call(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    servers = {"unruly": {**UNRULY, "tools": {"hang": {"timeout_s": 1}}}}
    config = load_mcp_config(write_config(tmp_path, servers), os.environ)
    async with McpToolbox(config, log_dir=tmp_path / "logs") as toolbox:
        await toolbox.discover()
        first = (await toolbox.call("unruly__pid", {})).observation

        crashed = await toolbox.call("unruly__crash", {})
        assert crashed.status == "error"
        assert crashed.observation == 'Error: MCP server "unruly": tool crash failed: Connection closed'
        second = (await toolbox.call("unruly__pid", {})).observation

        started = time.monotonic()
        hung = await toolbox.call("unruly__hang", {})
        assert time.monotonic() - started < 15  # its 1 s, not forever (a loaded CI machine is slow)
        assert hung.observation == 'Error: MCP server "unruly": tool hang did not answer within 1 s'
        third = (await toolbox.call("unruly__pid", {})).observation

        # A server that dies between calls is noticed, and replaced without a failed call.
        os.kill(int(third), signal.SIGKILL)
        await wait_until_gone(int(third))
        await wait_until_noticed(toolbox, "unruly")  # its pipe's end can lag under load
        fourth = await toolbox.call("unruly__pid", {})
        assert fourth.status == "ok"
        assert len({first, second, third, fourth.observation}) == 4
    assert server_processes("stdio_server.py") == set()
    # The server's stderr goes to its log file, not to the worker's output.
    assert "crashing on purpose" in (tmp_path / "logs" / "mcp-unruly.log").read_text()
    assert "crashing on purpose" not in capfd.readouterr().err


async def test_invalid_arguments_never_reach_the_server(tmp_path: Path) -> None:
    async with McpToolbox(load_mcp_config(write_config(tmp_path, {"unruly": UNRULY}), os.environ)) as toolbox:
        await toolbox.discover()
        [pid] = server_processes("stdio_server.py")
        os.kill(pid, signal.SIGKILL)
        await wait_until_gone(pid)
        outcome = await toolbox.call("unruly__echo", {"text": 42})
        assert server_processes("stdio_server.py") == set()
    assert (outcome.status, outcome.observation) == (
        "error", "Error: invalid arguments for unruly__echo at $.text: 42 is not of type 'string'"
    )


async def test_servers_that_cannot_start_cost_only_their_own_tools(tmp_path: Path) -> None:
    servers = {
        "broken": {"command": "nope"},
        "stuck": {"command": PYTHON, "args": ["-c", "import time; time.sleep(60)"], "timeout_s": 1},
        "unruly": UNRULY,
        "github": {"url": "https://example.invalid/mcp", "headers": {"Authorization": "Bearer ${GITHUB_TOKEN}"}},
    }
    async with McpToolbox(load_mcp_config(write_config(tmp_path, servers), {})) as toolbox:
        started = time.monotonic()
        discovery = await toolbox.discover()
        assert time.monotonic() - started < 15  # the stuck one's 1 s, not its 60 (on a loaded CI)
        unknown = await toolbox.call("broken__anything", {})
    assert discovery.errors == [
        'MCP config: server "github": environment variable GITHUB_TOKEN is not set',
        "MCP server \"broken\": failed to start: [Errno 2] No such file or directory: 'nope'",
        'MCP server "stuck": did not answer within 1 s',
    ]
    assert {tool.name for tool in discovery.tools} == {
        "unruly__pid", "unruly__echo", "unruly__count", "unruly__crash", "unruly__hang"}
    assert unknown.observation == "Error: no MCP tool is named broken__anything"


def test_exposed_names_fit_the_model_api_and_stay_apart() -> None:
    assert exposed_name("my server", "get.time") == "my_server__get_time"
    long_a, long_b = exposed_name("s", "x" * 80), exposed_name("s", "x" * 81)
    assert len(long_a) == len(long_b) == 64 and long_a != long_b
    assert long_a == "s__" + "x" * 52 + "_cbf4205d"  # the same in every worker process

    def servers_listing(*names: str) -> list[tuple[StdioServerConfig, list[Tool]]]:
        tool = Tool(name="search", input_schema={"type": "object"})
        return [(StdioServerConfig(name=name, command="x"), [tool]) for name in names]

    catalog, _ = build_catalog(servers_listing("docs.v1", "docs_v1", "web"))
    names = sorted(catalog)
    assert names[2] == "web__search"
    assert names[0] != names[1] and all(name.startswith("docs_v1__search_") for name in names[:2])
    assert sorted(build_catalog(servers_listing("web", "docs_v1", "docs.v1"))[0]) == names
    assert {(entry.server.name, entry.tool) for entry in catalog.values()} == {
        ("docs.v1", "search"), ("docs_v1", "search"), ("web", "search"),
    }


@pytest.mark.parametrize(("hints", "risk", "idempotent"), [
    (ToolAnnotations(read_only_hint=True), "safe", True),
    (ToolAnnotations(destructive_hint=True), "destructive", False),
    (ToolAnnotations(destructive_hint=True, idempotent_hint=True), "destructive", True),
    (ToolAnnotations(destructive_hint=False), "sensitive", False),
    (None, "sensitive", False),
])
def test_risk_follows_the_annotations(hints: ToolAnnotations | None, risk: str, idempotent: bool) -> None:
    tool = Tool(name="t", input_schema={"type": "object"}, annotations=hints)
    [entry] = build_catalog([(StdioServerConfig(name="s", command="x"), [tool])])[0].values()
    assert (entry.definition.risk, entry.definition.idempotent) == (risk, idempotent)


def test_config_overrides_beat_the_annotations() -> None:
    server = StdioServerConfig.model_validate({
        "name": "s", "command": "x", "risk": "sensitive", "timeout_s": 5, "enabled_tools": ["read", "wipe"],
        "tools": {"wipe": {"risk": "destructive", "timeout_s": 60, "idempotent": True}},
    })
    read_only = ToolAnnotations(read_only_hint=True)
    tools = [Tool(name=name, input_schema={"type": "object"}, annotations=read_only)
             for name in ("read", "wipe", "hidden")]
    catalog, _ = build_catalog([(server, tools)])
    assert {name: (entry.definition.risk, entry.definition.timeout_s, entry.definition.idempotent)
            for name, entry in catalog.items()} == {
        "s__read": ("sensitive", 5.0, True),
        "s__wipe": ("destructive", 60.0, True),
    }


def test_config_resolves_variables_and_keeps_them_secret(tmp_path: Path) -> None:
    path = write_config(tmp_path, {
        "gh": {"command": "gh-mcp", "args": ["--token=${GH_TOKEN}"], "env": {"GH_TOKEN": "${GH_TOKEN}"}},
        "api": {"url": "https://api.example/mcp?key=${API_KEY}", "headers": {"X-Key": "${API_KEY}"}},
        "twice": {"command": "x", "url": "https://example"},
        "typo": {"command": "x", "risk": "harmless", "timeout_s": -1},
        "unset": {"command": "x", "env": {"A": "${MISSING_ONE}", "B": "${MISSING_TWO}"}},
    })
    config = load_mcp_config(path, {"GH_TOKEN": "ghp_secret_123", "API_KEY": "key_secret_456"})
    gh, api = config.servers
    assert (gh.args, gh.env) == (["--token=ghp_secret_123"], {"GH_TOKEN": "ghp_secret_123"})
    assert (api.url, api.headers) == ("https://api.example/mcp?key=key_secret_456", {"X-Key": "key_secret_456"})
    assert api.redact("GET https://api.example/mcp?key=key_secret_456 failed") == (
        "GET https://api.example/mcp?key=*** failed"
    )
    assert "secret" not in repr(config)
    assert config.errors == [
        'server "twice": needs exactly one of "command" (stdio) or "url" (HTTP)',
        "server \"typo\": risk: Input should be 'safe', 'sensitive' or 'destructive'; "
        "timeout_s: Input should be greater than 0",
        'server "unset": environment variables MISSING_ONE, MISSING_TWO are not set',
    ]


def test_an_unusable_config_file_is_one_error(tmp_path: Path) -> None:
    with pytest.raises(McpConfigError, match="cannot read MCP config .*missing.json: No such file"):
        load_mcp_config(tmp_path / "missing.json", {})
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(McpConfigError, match="is not valid JSON"):
        load_mcp_config(tmp_path / "bad.json", {})
    (tmp_path / "list.json").write_text("[]")
    with pytest.raises(McpConfigError, match='"mcpServers"'):
        load_mcp_config(tmp_path / "list.json", {})


def test_results_are_read_as_text_with_binary_summarised() -> None:
    blocks = [
        TextContent(text="two notes"),
        ImageContent(data="aGVsbG8=", mime_type="image/png"),
        AudioContent(data="aGVsbG8h", mime_type="audio/wav"),
        EmbeddedResource(resource=TextResourceContents(uri="note://1", text="first note")),
        EmbeddedResource(resource=BlobResourceContents(uri="note://2", mime_type="application/pdf", blob="aGk=")),
        ResourceLink(uri="note://3", name="third"),
    ]
    assert result_text(CallToolResult(content=blocks)) == "\n".join([
        "two notes", "[image image/png, 5 bytes]", "[audio audio/wav, 6 bytes]", "first note",
        "[resource note://2 (application/pdf), 2 bytes]", "[resource link: note://3]",
    ])
    structured = CallToolResult(content=[], structured_content={"count": 2})
    assert result_text(structured) == '{"count": 2}'
