"""The MCP servers' tools, as the worker offers them: discovered per conversation, called by name.

One session per server is kept open for the worker's life and reopened after it dies; a server
whose requests cannot name their call has a session per conversation for its calls
(`activities.mcp.sessions`). Every failure of a server (it would not start, it crashed, it hung)
becomes an error observation, never an exception: the conversation goes on without that tool.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import TracebackType
from typing import Any

import anyio
import structlog
from jsonschema.exceptions import best_match
from mcp import Client, MCPError
from mcp.shared.dispatcher import ProgressFnT
from mcp.types import INTERNAL_ERROR, INVALID_PARAMS, METHOD_NOT_FOUND, CallToolResult, Tool
from pydantic import BaseModel
from temporalio import activity

from ...contract import ElicitAnswer, Risk, ToolDefinition, ToolOutcome
from ...rules.schemas import argument_errors
from .catalog import CatalogEntry, build_catalog, listing_digests
from .config import McpConfig, McpServerConfig, StdioServerConfig
from .connection import McpConnection, ServerUnavailable, describe
from .content import progress_text, result_text
from .elicitation import AskingCall, Sampler
from .patterns import BoundedSearch
from .sessions import ConversationSessions

log = structlog.get_logger()

# JSON-RPC errors that are the server's answer to one request: the session itself is still sound.
_ANSWERED = frozenset({INVALID_PARAMS, METHOD_NOT_FOUND, INTERNAL_ERROR})


class McpDiscovery(BaseModel):
    tools: list[ToolDefinition]
    errors: list[str]  # one line per server or tool left out
    listing: dict[str, str] = {}  # each server that listed, and its tools' digest


class McpToolbox:
    """Create once per worker process; `aclose()` (or `async with`) at shutdown."""

    def __init__(self, config: McpConfig, log_dir: Path | None = None):
        """`log_dir` receives each stdio server's stderr; None discards it."""
        self._config = config
        self._log_dir = log_dir
        self._connections: dict[str, McpConnection] = {}  # each server's, shared
        self._own_sessions = ConversationSessions(self._open_own, self._retire)
        # servers that send requests mid-call on the older protocol's back channel
        self._legacy: set[str] = set()
        self._closing: set[asyncio.Task[None]] = set()
        self._catalog: dict[str, CatalogEntry] = {}
        self._listing: dict[str, str] | None = None  # as last discovered (`listing`)
        self._tools_changed = False  # a server said so since
        self._closed = False

    async def __aenter__(self) -> McpToolbox:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def discover(self) -> McpDiscovery:
        """Every server's tools, listed concurrently; a server that fails costs only its own tools."""
        self._tools_changed = False  # a change said while listing marks it again
        listings = await asyncio.gather(*(self._list_tools(s) for s in self._config.servers))
        listed = [listing for listing in listings if not isinstance(listing, str)]
        catalog, errors = build_catalog(listed)
        self._catalog = catalog
        self._listing = listing_digests(catalog, (server.name for server, _ in listed))
        errors = (
            [f"MCP config: {error}" for error in self._config.errors]
            + [listing for listing in listings if isinstance(listing, str)]
            + errors
        )
        log.info("mcp tools discovered", tools=len(catalog), errors=len(errors))
        return McpDiscovery(tools=[entry.definition for entry in catalog.values()], errors=errors,
                            listing=self._listing)

    async def listing(self) -> dict[str, str]:
        """Each server that lists its tools, and their digest: as last discovered, or listed
        again if a server said its tools changed since (or this process never listed)."""
        if self._listing is None or self._tools_changed:
            await self.discover()
        assert self._listing is not None
        return self._listing

    def _tools_changed_by(self, server: str) -> None:
        self._tools_changed = True

    async def current_risk(self, exposed_name: str) -> Risk | None:
        """The tool's risk as this worker knows it now (listing again for a name it does not know);
        None for a name no server has."""
        entry = self._catalog.get(exposed_name)
        if entry is None:
            await self.discover()
            entry = self._catalog.get(exposed_name)
        return entry.definition.risk if entry is not None else None

    def server_of(self, exposed_name: str) -> str | None:
        """The name of the server whose tool this is, as this worker last listed them."""
        entry = self._catalog.get(exposed_name)
        return entry.server.name if entry is not None else None

    async def call(self, exposed_name: str, arguments: dict[str, Any],
                   on_progress: Callable[[str], None] | None = None,
                   elicited: list[ElicitAnswer] | None = None,
                   sampler: Sampler | None = None,
                   conversation: str | None = None) -> ToolOutcome:
        """Run one tool. Only cancellation escapes: every failure is an error outcome. The
        server's progress notifications of the call reach `on_progress` as lines of text. A
        request of the server for input that `elicited` does not answer ends the call with it
        as the question (`activities.mcp.elicitation`); its sampling requests go to `sampler`
        (`activities.mcp.sampling`). `conversation` is whose call it is (by default, in an
        activity, its workflow's id): a server whose requests cannot name their call runs it on
        that conversation's own session."""
        if conversation is None and activity.in_activity():
            conversation = activity.info().workflow_id
        entry = self._catalog.get(exposed_name)
        if entry is None:  # a name from another worker's discovery: list again
            await self.discover()
            entry = self._catalog.get(exposed_name)
        if entry is None:
            return _error(f"no MCP tool is named {exposed_name}")
        problem = _argument_problem(entry.definition.parameters, arguments)
        if problem is not None:
            return _error(f"invalid arguments for {exposed_name}{problem}")

        elicited = elicited or []
        outcome = await self._call(entry, arguments, on_progress, elicited, sampler, conversation)
        if outcome is None:  # the server asks its client mid-call, which needs the older protocol
            self._legacy.add(entry.server.name)
            log.info("mcp server asks mid-call: speaking the 2025-11-25 protocol with it",
                     server=entry.server.name)
            outcome = await self._call(entry, arguments, on_progress, elicited, sampler,
                                       conversation)
        return outcome or _server_error(entry.server, "it asked its client mid-call, and failed "
                                                      "to on the older protocol too")

    async def _call(self, entry: CatalogEntry, arguments: dict[str, Any],
                    on_progress: Callable[[str], None] | None,
                    elicited: list[ElicitAnswer], sampler: Sampler | None,
                    conversation: str | None) -> ToolOutcome | None:
        """`call` on the server's session; None if the server sent a request mid-call that the
        session's protocol has no channel for (the SDK's servers on 2026-07-28, using
        `ctx.elicit` or `ctx.session.create_message`), on a session not yet on the older one."""
        server, timeout = entry.server, entry.definition.timeout_s
        bound = log.bind(server=server.name, tool=entry.tool)
        client: Client | None = None
        asking = AskingCall(server.name, entry.tool, elicited, sampler)
        try:
            with anyio.fail_after(timeout):
                connection = await self._session(server, conversation)
                with connection.in_flight.running(asking):
                    client = await connection.client()
                    result = await _unless_it_asks(asking, client.call_tool(
                        entry.tool, arguments, progress_callback=_progress_to(on_progress)))
            if result is None:
                bound.info("mcp tool asks for input", request=asking.asked.request)
                return ToolOutcome(status="needs_input", question=asking.asked)
        except ServerUnavailable as exc:
            return _server_error(server, str(exc))
        except Exception as exc:
            if client is None:  # the deadline passed while the session was still opening
                return _server_error(server, f"tool {entry.tool} did not answer within "
                                             f"{timeout:g} s (its server was still starting)")
            why, broken = _call_failure(exc, entry.tool, timeout)
            if NO_BACK_CHANNEL in why and not connection.legacy:  # (the server's first calls)
                self._discard(connection, after_calls=True)
                return None
            why = server.redact(why)
            bound.warning("mcp tool call failed", error=why, session_discarded=broken)
            if broken:
                self._discard(connection)
            return _server_error(server, why)
        finally:
            self._own_sessions.close_idle(server.name)
        text = result_text(result)
        bound.info("mcp tool done", is_error=result.is_error, observation_bytes=len(text.encode()))
        if result.is_error:
            return _error(text or "the tool failed without saying why")
        return ToolOutcome(status="ok", observation=text)

    async def aclose(self) -> None:
        """Close every session and wait for the servers to exit; idempotent."""
        self._closed = True
        for server_name in list(self._connections):
            self._retire(self._connections.pop(server_name))
        self._own_sessions.close_all()
        await asyncio.gather(*self._closing)

    async def _list_tools(self, server: McpServerConfig) -> tuple[McpServerConfig, list[Tool]] | str:
        """The server's tools, or the line that says why there are none."""
        try:
            connection = self._connection(server)
            client = await connection.client()
            with anyio.fail_after(server.timeout_s):
                return server, await _all_tools(client)
        except ServerUnavailable as exc:
            return f'MCP server "{server.name}": {exc}'
        except Exception as exc:
            self._discard(connection)
            why = "did not list its tools in time" if isinstance(exc, TimeoutError) else describe(exc)
            return f'MCP server "{server.name}": listing tools failed: {server.redact(why)}'

    def _connection(self, server: McpServerConfig) -> McpConnection:
        """The server's open session, or a new one if it has none that is alive."""
        if self._closed:
            raise ServerUnavailable("the toolbox is closed")
        connection = self._connections.get(server.name)
        if connection is None or not connection.alive:
            if connection is not None:
                self._retire(connection)
            connection = self._connections[server.name] = McpConnection(
                server, self._log_dir, legacy=server.name in self._legacy,
                on_tools_changed=self._tools_changed_by)
        return connection

    async def _session(self, server: McpServerConfig, conversation: str | None
                       ) -> McpConnection:
        """The session a call of `conversation` runs on: the server's shared one, where each
        request it may send names its call; else the conversation's own (at once for a stdio
        server known to ask mid-call: its shared session could not route)."""
        if server.name not in self._legacy or not isinstance(server, StdioServerConfig):
            shared = self._connection(server)
            await shared.client()
            if shared.routes_requests:
                return shared
        if self._closed:
            raise ServerUnavailable("the toolbox is closed")
        return self._own_sessions.get(server, conversation)

    def _open_own(self, server: McpServerConfig) -> McpConnection:
        return McpConnection(server, self._log_dir, legacy=server.name in self._legacy,
                             on_tools_changed=self._tools_changed_by, shared=False)

    def _discard(self, connection: McpConnection, after_calls: bool = False) -> None:
        """Drop a session that may be broken; the next use opens a fresh one. `after_calls`:
        it is sound, only on the wrong protocol, so the calls in flight on it finish first."""
        if self._own_sessions.discard(connection, after_calls):
            return
        if self._connections.get(connection.server.name) is connection:
            del self._connections[connection.server.name]
            self._retire(connection, after_calls)

    def _retire(self, connection: McpConnection, after_calls: bool = False) -> None:
        """Close in the background (once its calls are done, with `after_calls`), keeping hold
        so `aclose` can wait for the server to exit."""
        task = asyncio.create_task(_closed_after_calls(connection) if after_calls
                                   else connection.aclose())
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)


# The SDK's words for a request mid-call on a session of the 2026-07-28 protocol, which has no
# channel for it (its servers must ask through "input required" results there).
NO_BACK_CHANNEL = "no back-channel for server-initiated requests"


async def _closed_after_calls(connection: McpConnection) -> None:
    await connection.in_flight.settled()
    await connection.aclose()


async def _all_tools(client: Client) -> list[Tool]:
    tools: list[Tool] = []
    cursor: str | None = None
    while True:
        page = await client.list_tools(cursor=cursor)
        tools.extend(page.tools)
        if (cursor := page.next_cursor) is None:
            return tools


def _call_failure(exc: Exception, tool: str, timeout: float) -> tuple[str, bool]:
    """What went wrong, and whether the session is suspect and must be reopened."""
    if isinstance(exc, TimeoutError):
        return f"tool {tool} did not answer within {timeout:g} s", True
    answered = isinstance(exc, MCPError) and exc.code in _ANSWERED
    return f"tool {tool} failed: {describe(exc)}", not answered


def _error(message: str) -> ToolOutcome:
    return ToolOutcome(status="error", observation=f"Error: {message}")


def _server_error(server: McpServerConfig, message: str) -> ToolOutcome:
    return _error(f'MCP server "{server.name}": {message}')


def _argument_problem(schema: dict[str, Any], arguments: dict[str, Any]) -> str | None:
    """` at $.path: message` for the most relevant schema error, or None. Never raises, never
    fetches a `$ref`, and never matches a pattern unbounded."""
    errors = argument_errors(schema, arguments, BoundedSearch())
    if isinstance(errors, str):  # arguments too deep, a broken schema, a pattern out of time
        return f": {errors}"
    best = best_match(errors)
    if best is None:
        return None
    return f"{f' at {best.json_path}' if best.path else ''}: {best.message}"


def _progress_to(on_progress: Callable[[str], None] | None) -> ProgressFnT | None:
    if on_progress is None:
        return None

    async def report(progress: float, total: float | None, message: str | None) -> None:
        on_progress(progress_text(progress, total, message))

    return report


async def _unless_it_asks(asking: AskingCall, call: Awaitable[CallToolResult]
                          ) -> CallToolResult | None:
    """The call's result, or None once its server asks what no answer covers: the call is then
    abandoned (cancelled here, told cancel there)."""
    done: list[CallToolResult] = []
    async with anyio.create_task_group() as group:
        async def run() -> None:
            done.append(await call)
            group.cancel_scope.cancel()

        async def watch() -> None:
            await asking.waits.wait()
            group.cancel_scope.cancel()

        group.start_soon(run)
        group.start_soon(watch)
    return done[0] if done else None
