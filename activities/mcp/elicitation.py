"""An MCP server that asks back during a call (`elicitation/create`), answered durably.

The human may take a day, and the session lives in a worker process. So a call whose server
elicits something not yet answered ends at once: the call is abandoned (the server hears
cancel), and its outcome is the question (`needs_input`, kind `elicitation`). The conversation
asks it, and runs the call again with every answer so far (`ToolInvocation.elicited`). On that
run the server asks again, and each request that matches the next answer, by its digest
(message and schema), gets that answer from the history, never from a human again. A server
that asks something different on the rerun is asked anew.

A request, elicitation or sampling (`activities.mcp.sampling`), is routed to the call it
belongs to, never to a call of another conversation. On streamable HTTP a request of a call comes
on that call's own stream, and the SDK handles it in a copy of the context of the task that sent
the call: so `InFlight.running` names the call in a context variable, and the request finds it
there. Where the transport cannot say (stdio, SSE), its server's calls run on a session of their
conversation's own (`activities.mcp.sessions`), where the request goes to the one call in flight.
Anything else (a request after its call ended, one of several calls in flight, a request with no
call on a session the worker shares) is refused, with a reason the server reads, never guessed.
"""

from __future__ import annotations

import asyncio
import contextvars
import hashlib
import json
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any

from mcp.types import (
    INVALID_REQUEST,
    CreateMessageRequestParams,
    CreateMessageResult,
    ElicitRequestFormParams,
    ElicitResult,
    ErrorData,
)

from ...contract import ElicitAnswer, Question
from ...contract.bounds import canonical_json, clip
from ...rules.schemas import schema_problem

# What enters the conversation of a request: its message, and its schema's canonical JSON.
MAX_MESSAGE_BYTES = 4_000
MAX_SCHEMA_BYTES = 16_384

Sampler = Callable[[CreateMessageRequestParams], Awaitable[CreateMessageResult | ErrorData]]


def request_digest(message: str, schema: Any) -> str:
    """Which request an answer belongs to: the same message and schema, the same request."""
    return hashlib.sha256(canonical_json({"message": message, "schema": schema}).encode()
                          ).hexdigest()[:32]


class AskingCall:
    """One run of one MCP tool call, as its session's requests (elicitation, sampling) see
    it; `sampler` answers sampling requests (None: the call was given no model)."""

    def __init__(self, server: str, tool: str, answers: list[ElicitAnswer],
                 sampler: Sampler | None = None):
        self.server, self.tool, self._sampler = server, tool, sampler
        self._answers = list(answers)  # in the order they were given
        self.asked: Question | None = None  # set once the call must wait for a human
        self.waits = asyncio.Event()
        self.over = asyncio.Event()  # the call returned or was abandoned

    async def elicit(self, params: Any) -> ElicitResult | ErrorData:
        if not isinstance(params, ElicitRequestFormParams):
            return ErrorData(code=INVALID_REQUEST, message="this client answers form "
                             "elicitation only, not URL mode")
        schema = params.requested_schema
        problem = _schema_problem(schema)
        if problem is not None:
            return ErrorData(code=INVALID_REQUEST, message=f"the requested schema {problem}")
        digest = request_digest(params.message, schema)
        if self._answers and self._answers[0].request == digest:
            answer = self._answers.pop(0)  # given before, for this very request
            return ElicitResult(action=answer.action,
                                content=answer.content if answer.action == "accept" else None)
        self._answers.clear()  # what answered another request answers nothing after it
        if self.asked is None:
            self.asked = Question(kind="elicitation",
                                  message=clip(params.message, MAX_MESSAGE_BYTES) or "",
                                  answer_schema=schema, server=self.server, tool=self.tool,
                                  request=digest)
            self.waits.set()
        await self.over.wait()  # abandoned: the server's call is cancelled anyway
        return ElicitResult(action="cancel")

    async def sample(self, params: CreateMessageRequestParams
                     ) -> CreateMessageResult | ErrorData:
        if self._sampler is None:
            return ErrorData(code=INVALID_REQUEST, message=f"the conversation gave this call of "
                             f"{self.tool} no model to sample with")
        return await self._sampler(params)


def _schema_problem(schema: Any) -> str | None:
    if not isinstance(schema, dict):
        return "is not a JSON object"
    size = len(json.dumps(schema))
    if size > MAX_SCHEMA_BYTES:
        return f"is {size:,} bytes, over the limit of {MAX_SCHEMA_BYTES:,}"
    problem = schema_problem(schema)
    return None if problem is None else f"cannot be used: {problem}"


# The call the current task runs, and the tasks it starts; unset in a session's own tasks.
_RUNNING: contextvars.ContextVar[AskingCall | None] = contextvars.ContextVar(
    "mcp_asking_call", default=None)


class InFlight:
    """The calls in flight on one session, for its requests to find theirs. `shared`: the
    session serves every conversation of the worker, so only a request that names its call
    (see the module's note) is answered; else the session is one conversation's own, and a
    request that names none goes to its one call in flight."""

    def __init__(self, shared: bool) -> None:
        self.shared = shared
        self.calls: set[AskingCall] = set()
        self.idle_since: float | None = time.monotonic()  # None while a call is in flight
        self._idle = asyncio.Event()
        self._idle.set()

    @contextmanager
    def running(self, call: AskingCall) -> Iterator[None]:
        """`call` in flight on this session: its task (and the tasks it starts) name it."""
        self.calls.add(call)
        self.idle_since = None
        self._idle.clear()
        token = _RUNNING.set(call)
        try:
            yield
        finally:
            _RUNNING.reset(token)
            call.over.set()
            self.calls.discard(call)
            if not self.calls:
                self.idle_since = time.monotonic()
                self._idle.set()

    async def settled(self) -> None:
        """Once no call is in flight (each ends by its deadline)."""
        await self._idle.wait()

    async def elicit(self, context: Any, params: Any) -> ElicitResult | ErrorData:
        call = self._asking()
        return await call.elicit(params) if isinstance(call, AskingCall) else call

    async def sample(self, context: Any, params: CreateMessageRequestParams
                     ) -> CreateMessageResult | ErrorData:
        call = self._asking()
        return await call.sample(params) if isinstance(call, AskingCall) else call

    def _asking(self) -> AskingCall | ErrorData:
        """The call the request belongs to, or why it has none."""
        named = _RUNNING.get()
        if named is not None:
            if named in self.calls and not named.over.is_set():
                return named
            return _refused(f"the call of {named.tool} that this request belongs to has "
                            "ended: this client answers a request only during its call")
        if self.shared:
            return _refused("this request came outside the call it belongs to, on a session "
                            "that serves several conversations: the client cannot tell whose "
                            "it is, so it answers none")
        calls = [c for c in self.calls if not c.over.is_set()]
        if len(calls) == 1:
            return calls[0]
        return _refused("no call of this client is in flight, so it answers none" if not calls
                        else f"{len(calls)} calls are in flight on this session; the client "
                        "cannot tell which one asks, so it answers none")


def outside_any_call() -> contextvars.Context:
    """A copy of the current context that names no call: for a session's own tasks, which
    would otherwise lend the call that opened the session to every request they read."""
    context = contextvars.copy_context()
    context.run(_RUNNING.set, None)
    return context


def _refused(why: str) -> ErrorData:
    return ErrorData(code=INVALID_REQUEST, message=why)
