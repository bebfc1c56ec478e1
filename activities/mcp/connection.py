"""One long-lived session with one MCP server, owned by a background task.

The transports and the session are anyio context managers, which must be entered and left by the same
task. So each connection enters them in an owner task that holds them open until told to close, or
until the server hangs up; callers in any task use the `Client` it publishes.
"""

from __future__ import annotations

import asyncio
import math
import os
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any, TextIO

import anyio
import httpx2
import structlog
from mcp import Client, MCPError, StdioServerParameters, stdio_client
from mcp.client.session import IncomingMessage
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client
from mcp.types import Implementation, ToolListChangedNotification
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from .config import HttpServerConfig, McpServerConfig, StdioServerConfig
from .elicitation import InFlight, outside_any_call

log = structlog.get_logger()

CLIENT_INFO = Implementation(name="durable-react-agent", version="0.1.0")
# An idle server may stay silent this long on an open event stream.
STREAM_READ_TIMEOUT_S = 300.0
# A close that outlasts the server's timeout plus this is cut short.
CLOSE_GRACE_S = 5.0


class ServerUnavailable(Exception):
    """The session could not be opened; the message is safe to show (secrets masked)."""


def _innermost(exc: BaseException) -> BaseException:
    """The real error: task groups wrap it in exception groups."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def describe(exc: BaseException) -> str:
    """The innermost cause of `exc`, in one line."""
    text = str(_innermost(exc)).strip()  # an MCPError's str is its message
    return text.splitlines()[0] if text else type(_innermost(exc)).__name__


class _HangupSignal:
    """A read stream that calls `on_end` when the session stops reading: the server hung up."""

    def __init__(self, stream: Any, on_end: Callable[[], None]):
        self._stream = stream
        self._on_end = on_end

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)

    def __aiter__(self) -> Any:
        return self._stream.__aiter__()

    async def __aenter__(self) -> _HangupSignal:
        await self._stream.__aenter__()
        return self

    async def __aexit__(self, *exc_info: Any) -> Any:
        self._on_end()
        return await self._stream.__aexit__(*exc_info)


class McpConnection:
    """Opened on creation, in the background; `client()` waits for the handshake."""

    def __init__(self, server: McpServerConfig, log_dir: Path | None, legacy: bool = False,
                 on_tools_changed: Callable[[str], None] | None = None, shared: bool = True):
        """`on_tools_changed` hears the server's name when it says its list of tools changed;
        `shared`: the session serves every conversation, not one (`InFlight`)."""
        self.server = server
        self._on_tools_changed = on_tools_changed
        self._mode = "legacy" if legacy else "auto"  # legacy: the 2025-11-25 handshake
        self._log_dir = log_dir
        self._ready = anyio.Event()
        self._stopped = anyio.Event()
        self._scope = anyio.CancelScope(deadline=anyio.current_time() + server.timeout_s)
        self._client: Client | None = None
        self.in_flight = InFlight(shared)  # its calls, which its servers' requests belong to
        self._streamable = False  # on streamable HTTP, which relates a request to its call
        self._failure: BaseException | None = None
        self._task = asyncio.create_task(self._own(), name=f"mcp-server:{server.name}",
                                         context=outside_any_call())

    @property
    def alive(self) -> bool:
        """Usable or still opening; false once failed, hung up or closing."""
        return not self._stopped.is_set()

    @property
    def legacy(self) -> bool:
        """Whether it was opened on the 2025-11-25 protocol, for a server that asks mid-call."""
        return self._mode == "legacy"

    @property
    def routes_requests(self) -> bool:
        """Whether each request its server may send names the call it belongs to: on streamable
        HTTP, a call's requests come on its own stream; on the 2026-07-28 protocol there are
        none mid-call (an "input required" result is handled in its call's own task). Known
        once the session is open."""
        return self._client is not None and (
            self._streamable or self._client.protocol_version in MODERN_PROTOCOL_VERSIONS)

    async def client(self) -> Client:
        with anyio.move_on_after(self.server.timeout_s):
            await self._ready.wait()
        if self._client is not None:
            return self._client
        self._stopped.set()
        if self._failure is None:  # still opening, or the owner gave up at the deadline
            raise ServerUnavailable(f"did not answer within {self.server.timeout_s:g} s")
        verb = "start" if isinstance(self.server, StdioServerConfig) else "connect"
        raise ServerUnavailable(f"failed to {verb}: {self.server.redact(describe(self._failure))}")

    async def aclose(self) -> None:
        """Close the session and wait until the server is gone; bounded, idempotent."""
        self._stopped.set()
        with anyio.move_on_after(self.server.timeout_s + CLOSE_GRACE_S):
            await asyncio.shield(self._task)
            return
        log.warning("mcp server slow to close, cutting it short", server=self.server.name)
        self._scope.cancel()
        await asyncio.shield(self._task)

    async def _own(self) -> None:
        try:
            with self._scope:
                async with self._session() as client, anyio.create_task_group() as group:
                    self._scope.deadline = math.inf
                    self._client = client
                    self._ready.set()
                    if _listens(client):
                        group.start_soon(self._listen, client)
                    await self._stopped.wait()
                    group.cancel_scope.cancel()
        except Exception as exc:
            self._failure = exc
            log.info("mcp server session failed", server=self.server.name,
                     error=self.server.redact(describe(exc)))
        finally:
            self._stopped.set()
            self._ready.set()

    async def _tools_changed(self, message: IncomingMessage) -> None:
        """The 2025-11-25 protocol's `notifications/tools/list_changed`."""
        if isinstance(message, ToolListChangedNotification):
            self._tools_changed_now()

    async def _listen(self, client: Client) -> None:
        """The 2026-07-28 protocol's: a `subscriptions/listen` stream of tool list changes,
        for the session's life. A stream that fails counts as a change (one may be missed)."""
        try:
            async with client.listen(tools_list_changed=True) as changes:
                async for _ in changes:
                    self._tools_changed_now()
        except Exception as exc:
            log.info("mcp server's tool changes not heard", server=self.server.name,
                     error=self.server.redact(describe(exc)))
            self._tools_changed_now()

    def _tools_changed_now(self) -> None:
        log.info("mcp server says its tools changed", server=self.server.name)
        if self._on_tools_changed is not None:
            self._on_tools_changed(self.server.name)

    def _hung_up(self) -> None:
        # A failed attempt before the SSE fallback also ends its stream; only a live session counts.
        if self._client is not None and not self._stopped.is_set():
            log.warning("mcp server hung up, reconnecting on next use", server=self.server.name)
            self._stopped.set()

    def _server_log(self) -> TextIO:
        """Where a stdio server's stderr goes: its own file under log_dir, or nowhere."""
        if self._log_dir is None:
            return open(os.devnull, "w")
        self._log_dir.mkdir(parents=True, exist_ok=True)
        safe_name = "".join(c if c.isalnum() or c in "-_" else "_" for c in self.server.name)
        return open(self._log_dir / f"mcp-{safe_name}.log", "a", encoding="utf-8")

    @asynccontextmanager
    async def _session(self) -> AsyncIterator[Client]:
        server = self.server
        async with AsyncExitStack() as stack:
            if isinstance(server, StdioServerConfig):
                errlog = stack.enter_context(self._server_log())
                client = await stack.enter_async_context(self._client_over(_stdio(server, errlog)))
            elif server.transport == "sse":
                client = await stack.enter_async_context(self._client_over(_sse(server)))
            else:
                try:
                    client = await stack.enter_async_context(self._client_over(_streamable(server)))
                    self._streamable = True
                except Exception as exc:
                    if server.transport == "streamable_http" or not _speaks_http(exc):
                        raise
                    log.info("mcp server is not streamable HTTP, trying SSE", server=server.name,
                             error=server.redact(describe(exc)))
                    client = await stack.enter_async_context(self._client_over(_sse(server)))
            yield client

    def _client_over(self, transport: AbstractAsyncContextManager[Any]) -> Client:
        # Sampling is offered only to a server whose entry says so: the others are not told
        # this client samples, and the SDK refuses their requests ("Sampling not supported").
        return Client(_watched(transport, self._hung_up), cache=None, client_info=CLIENT_INFO,
                      elicitation_callback=self.in_flight.elicit, mode=self._mode,
                      message_handler=self._tools_changed,
                      sampling_callback=self.in_flight.sample if self.server.sampling else None)


def _listens(client: Client) -> bool:
    """Whether the server tells of tool list changes on a `subscriptions/listen` stream."""
    tools = client.server_capabilities.tools
    return client.protocol_version in MODERN_PROTOCOL_VERSIONS and bool(
        tools is not None and tools.list_changed)


def _speaks_http(exc: BaseException) -> bool:
    """Whether the server answered, only not as streamable HTTP (a 4xx, a protocol error)."""
    return isinstance(_innermost(exc), MCPError | httpx2.HTTPStatusError)


@asynccontextmanager
async def _watched(
    transport: AbstractAsyncContextManager[Any], on_end: Callable[[], None]
) -> AsyncIterator[Any]:
    async with transport as (read_stream, write_stream):
        yield _HangupSignal(read_stream, on_end), write_stream


def _stdio(server: StdioServerConfig, errlog: TextIO) -> AbstractAsyncContextManager[Any]:
    # The SDK merges `env` over a minimal inherited environment (PATH, HOME, USER, ...).
    params = StdioServerParameters(command=server.command, args=server.args, env=server.env,
                                   cwd=server.cwd)
    return stdio_client(params, errlog=errlog)


def _sse(server: HttpServerConfig) -> AbstractAsyncContextManager[Any]:
    return sse_client(server.url, headers=server.headers, timeout=server.timeout_s,
                      sse_read_timeout=STREAM_READ_TIMEOUT_S)


@asynccontextmanager
async def _streamable(server: HttpServerConfig) -> AsyncIterator[Any]:
    timeout = httpx2.Timeout(server.timeout_s, read=STREAM_READ_TIMEOUT_S)
    async with httpx2.AsyncClient(headers=server.headers, timeout=timeout) as http:
        async with streamable_http_client(server.url, http_client=http) as streams:
            yield streams
