"""An MCP server that asks back during a call (`elicitation/create`), answered durably.

The human may take a day, and the session lives in a worker process. So a call whose server
elicits something not yet answered ends at once: the call is abandoned (the server hears
cancel), and its outcome is the question (`needs_input`, kind `elicitation`). The conversation
asks it, and runs the call again with every answer so far (`ToolInvocation.elicited`). On that
run the server asks again, and each request that matches the next answer, by its digest
(message and schema), gets that answer from the history, never from a human again. A server
that asks something different on the rerun is asked anew.

Requests carry no link to the call they belong to (not on stdio), so a request, elicitation or
sampling (`activities.mcp.sampling`), is routed to the one call in flight on its session; with
several in flight it is refused, with a reason the server reads, rather than guessed.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Awaitable, Callable
from typing import Any

from mcp.types import (
    INVALID_REQUEST,
    CreateMessageRequestParams,
    CreateMessageResult,
    ElicitRequestFormParams,
    ElicitResult,
    ErrorData,
)

from contract import ElicitAnswer, Question
from contract.bounds import canonical_json, clip
from rules.schemas import schema_problem

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


class InFlight:
    """The calls in flight on one session, for its requests to find theirs."""

    def __init__(self) -> None:
        self.calls: set[AskingCall] = set()

    async def elicit(self, context: Any, params: Any) -> ElicitResult | ErrorData:
        call = self._sole()
        return await call.elicit(params) if isinstance(call, AskingCall) else call

    async def sample(self, context: Any, params: CreateMessageRequestParams
                     ) -> CreateMessageResult | ErrorData:
        call = self._sole()
        return await call.sample(params) if isinstance(call, AskingCall) else call

    def _sole(self) -> AskingCall | ErrorData:
        calls = [c for c in self.calls if not c.over.is_set()]
        if len(calls) == 1:
            return calls[0]
        return ErrorData(code=INVALID_REQUEST, message=(
            "no call of this client is in flight" if not calls else
            f"{len(calls)} calls are in flight on this session; the client cannot tell "
            "which one asks, so it answers none"))
