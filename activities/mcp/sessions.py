"""Sessions of one conversation's own, for servers whose requests cannot name their call.

On stdio and SSE a server's request (elicitation, sampling) carries nothing that says which call
it belongs to. On a session the worker shares, a request from a call that ended would meet
whatever call of another conversation is in flight. So such a server's calls run on a session of
their conversation's own, where a request can only meet a call of its own conversation
(`activities.mcp.elicitation.InFlight`).

Each is a process (stdio) or a connection, so they are bounded: the sessions with a call in
flight are at most the calls the worker runs at once (its activity slots); of the idle ones, a
server keeps the `MAX_IDLE` most recently used, and closes one idle longer than `IDLE_S` as its
next call comes. A conversation's next call, a model step later, mostly finds its session still
open; one whose session was closed opens a new one, as after a crash.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable

from .config import McpServerConfig
from .connection import McpConnection

# Idle sessions a server keeps for conversations' next calls: each is a process (tens of MB for
# a Python server), so a worker keeps the few conversations busy now warm, not every one it saw.
MAX_IDLE = 8
IDLE_S = 120.0  # idle longer than a model step or two: its conversation went quiet


class ConversationSessions:
    """The worker's sessions that are each one conversation's own, by server and conversation
    (None: a caller outside any conversation, as the tests are)."""

    def __init__(self, open_session: Callable[[McpServerConfig], McpConnection],
                 retire: Callable[..., None]):
        """`open_session` opens a server's session for one conversation; `retire` closes one."""
        self._open, self._retire = open_session, retire
        # least recently used first
        self._sessions: OrderedDict[tuple[str, str | None], McpConnection] = OrderedDict()

    def get(self, server: McpServerConfig, conversation: str | None) -> McpConnection:
        """The conversation's open session with the server, or a new one."""
        self.close_idle(server.name)
        key = (server.name, conversation)
        connection = self._sessions.pop(key, None)
        if connection is None or not connection.alive:
            if connection is not None:
                self._retire(connection)
            connection = self._open(server)
        self._sessions[key] = connection
        return connection

    def discard(self, connection: McpConnection, after_calls: bool = False) -> bool:
        """Drop a session that may be broken (closed once its calls are done, with
        `after_calls`); whether it was one of these."""
        for key, known in self._sessions.items():
            if known is connection:
                del self._sessions[key]
                self._retire(connection, after_calls)
                return True
        return False

    def close_all(self) -> None:
        while self._sessions:
            self._retire(self._sessions.popitem()[1])

    def close_idle(self, server: str) -> None:
        """Close the server's idle sessions that are dead or idle too long, and the least
        recently used beyond `MAX_IDLE`: as a call comes, and as one ends."""
        now = time.monotonic()
        idle = [(key, c, c.in_flight.idle_since) for key, c in self._sessions.items()
                if key[0] == server and c.in_flight.idle_since is not None]
        for i, (key, connection, since) in enumerate(idle):
            if i < len(idle) - MAX_IDLE or now - since > IDLE_S or not connection.alive:
                del self._sessions[key]
                self._retire(connection)
