"""The client layer: one typed async module for everything a person or program does with a
conversation. The CLI (`agent`) and the HTTP API (`agent-api`) both use it, so the
rules (how a conversation starts, how a decision is sent and what counts as taken or refused, how
long to wait for a worker) are written once.

Two ways to send a human's input, with the same rules:
- `send` signals and then waits for the outcome the workflow records (the CLI: the server takes a
  signal even when no worker runs);
- `update` goes through the workflow's Update twin, whose validator refuses before anything
  reaches the history (the API: a refusal is an immediate 409, and the state is untouched).
"""

from __future__ import annotations

import asyncio
import base64
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import datetime, timedelta, timezone
from typing import Any, get_args
from uuid import uuid4

from temporalio.api.common.v1 import Payload
from temporalio.client import (
    Client,
    WorkflowExecutionDescription,
    WorkflowExecutionStatus,
    WorkflowHandle,
    WorkflowQueryFailedError,
    WorkflowUpdateFailedError,
    WorkflowUpdateRPCTimeoutOrCancelledError,
)
from temporalio.common import (
    SearchAttributePair,
    TypedSearchAttributes,
    WorkflowIDReusePolicy,
)
from temporalio.contrib.workflow_streams import (
    PollInput,
    PollResult,
    WorkflowStreamItem,
)
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from ..activities.memory import MemoryStore, open_store, url_from_env
from ..contract import (
    SETTLED_STATUSES,
    AnswerRequest,
    AuditRecord,
    ConfirmRequest,
    ConversationInput,
    ConversationStatus,
    DecideRequest,
    EndRequest,
    HumanRequest,
    RejectRequest,
    SayRequest,
    SignalOutcome,
    Status,
    StopRequest,
    StreamEvent,
    names,
)
from ..contract.bounds import (
    DEFAULT_MESSAGE_BYTES,
    check_message,
)
from ..contract.names import EVENTS_TOPIC, OFFSET_QUERY, TOKENS_TOPIC, relative_id
from ..contract.policy import Grant, RevokeRequest
from ..rules.grants import OWNER_GRANT_PREFIX
from ..rules.output import output_schema_problem
from ..rules.search_attributes import AGENT_OWNER, AGENT_STATUS, WORKER_VERSION, owned_by
from .checks import (
    CliError,
    NotFound,
    NoWorker,
    Refused,
    UsageError,
    check_conversation_id,
    check_sendable,
    clip,
    unsendable,
)
from .connection import TemporalSettings, namespace_prepared
from .listing import ConversationRow, list_query, shown_status

QUERY_RPC_TIMEOUT = timedelta(seconds=3)
# A query that ends like this found no worker to answer it (yet); any other failure is reported.
NO_ANSWER_YET = frozenset({RPCStatusCode.CANCELLED, RPCStatusCode.DEADLINE_EXCEEDED,
                           RPCStatusCode.UNAVAILABLE})
POLL_INTERVAL_S = 0.25
RECONNECT_DELAY_S = 1.0
# The stream's own query: an immediate read of what it holds from an offset (the library names
# it in `temporalio.contrib.workflow_streams`); polled while caught up.
STREAM_POLL_QUERY = "__temporal_workflow_stream_poll"
STREAM_POLL_INTERVAL_S = 0.2
CLOSED_CHECK_EVERY = 10  # empty reads between two looks at whether the conversation closed
LIST_LABEL, LIST_LABEL_CHARS = "prompt", 120  # the memo a conversation is listed by
STATUSES: list[str] = list(get_args(Status))
STREAM_TOPICS = [EVENTS_TOPIC, TOKENS_TOPIC]



class Session:
    """A client, the settings, and patience for a missing worker (at most `timeout_s`)."""

    def __init__(self, client: Client, settings: TemporalSettings, timeout_s: float,
                 max_message_bytes: int = DEFAULT_MESSAGE_BYTES,
                 on_waiting: Callable[[], None] | None = None):
        self.client = client
        self.settings = settings
        self.timeout_s = timeout_s
        self.max_message_bytes = max_message_bytes  # what `start` asks the conversation to take
        self._on_waiting = on_waiting  # called once, when a query first finds no worker
        self._told_waiting = False

    def handle(self, workflow_id: str) -> WorkflowHandle:
        return self.client.get_workflow_handle(workflow_id, result_type=ConversationStatus)

    # ----- starting and listing -----

    async def start(self, inp: ConversationInput, workflow_id: str, source: str = "the CLI",
                    existing_ok: bool = False, prepared: bool = False) -> bool:
        """Start a conversation. With `existing_ok`, an id already in use (running or closed) is
        that conversation, and the call is idempotent: returns whether it started a new one.
        As a `say`'s, the first message's outcome is awaited: refused (too long for the model)."""
        reason = (check_conversation_id(workflow_id)
                  or check_message(inp.prompt, inp.max_message_bytes)
                  or output_schema_problem(inp.output_schema))
        if reason is not None:
            raise UsageError(reason)
        if inp.request_id is None and inp.fork is None:  # what its first message's outcome
            inp = inp.model_copy(update={"request_id": uuid4().hex})  # is recorded under
        check_sendable(inp)
        try:
            await self.client.start_workflow(
                names.WORKFLOW_TYPE, inp, result_type=ConversationStatus, id=workflow_id,
                task_queue=self.settings.task_queue, static_summary=clip(inp.prompt, 200),
                static_details=f"Conversation started from {source} with `{clip(inp.prompt, 500)}`",
                search_attributes=TypedSearchAttributes([SearchAttributePair(
                    AGENT_STATUS, "running"), *(owned_by(inp.owner) or [])]),
                memo={LIST_LABEL: clip(inp.prompt, LIST_LABEL_CHARS)},
                id_reuse_policy=(WorkflowIDReusePolicy.REJECT_DUPLICATE if existing_ok
                                 else WorkflowIDReusePolicy.ALLOW_DUPLICATE))
        except WorkflowAlreadyStartedError:
            if existing_ok:
                return False
            raise CliError(f"conversation {workflow_id} is already running") from None
        except RPCError as err:  # sent before any worker prepared the namespace: prepare it
            if prepared or not await namespace_prepared(self.client, err):
                raise
            return await self.start(inp, workflow_id, source, existing_ok, prepared=True)
        taken = None if inp.fork else await self.outcome(workflow_id, inp.request_id or "")
        if taken is not None and not taken.accepted:
            raise Refused(taken.reason or "the first message was refused")
        return True

    async def conversations(self, status: str | None = None, limit: int = 100,
                            owner: str | None = None, version: str | None = None
                            ) -> list[ConversationRow]:
        """The latest conversations (with `owner`, only those it started: a visibility query,
        so a user's list never reads anyone else's; with `version`, only those running on that
        Worker Deployment Version, `NAME:ID`)."""
        rows = []
        query = list_query(status, owner, version)
        async for wf in self.client.list_workflows(query, limit=limit):
            memo = await wf.memo()
            rows.append(ConversationRow(
                workflow_id=wf.id,
                prompt=memo.get(LIST_LABEL) if isinstance(memo.get(LIST_LABEL), str) else None,
                status=shown_status(wf.typed_search_attributes.get(AGENT_STATUS), wf.status),
                execution=wf.status.name.lower() if wf.status else None,
                started=wf.start_time.isoformat() if wf.start_time else None,
                owner=wf.typed_search_attributes.get(AGENT_OWNER),
                version=wf.typed_search_attributes.get(WORKER_VERSION),
            ))
        return rows

    async def owner(self, workflow_id: str) -> str | None:
        """Who started a conversation (a subagent's: its top conversation's owner), from its
        search attributes: no worker needed. None for one started before owners were recorded;
        `NotFound` if there is no such conversation."""
        top = workflow_id.split("/", 1)[0]  # a subagent's id is `<parent id>/<call id>`
        description = await self.describe(top, named=workflow_id)
        return description.typed_search_attributes.get(AGENT_OWNER)

    async def describe(self, workflow_id: str, named: str | None = None
                       ) -> WorkflowExecutionDescription:
        """Temporal's description of a conversation's latest run: no worker needed. `NotFound`
        (naming `named`, else the id) if there is no such conversation."""
        named = named or workflow_id
        if unsendable(workflow_id) is not None:  # no conversation has an id that is not valid text
            raise NotFound(f"no such conversation: {named[:200]!r}")
        try:
            return await self.client.get_workflow_handle(workflow_id).describe()
        except RPCError as err:
            if err.status in (RPCStatusCode.NOT_FOUND, RPCStatusCode.INVALID_ARGUMENT):
                raise NotFound(f"no such conversation: {named}") from None
            raise

    # ----- queries -----

    async def query(self, workflow_id: str, query: names.Asked, *args: Any) -> Any:
        """Query, retrying while no worker answers, for at most the session's timeout."""
        handle = self.handle(workflow_id)
        return await self._answered(workflow_id, lambda: handle.query(
            query.name, *args, result_type=query.answers, rpc_timeout=QUERY_RPC_TIMEOUT))

    async def _answered(self, workflow_id: str, ask: Callable[[], Awaitable[Any]]) -> Any:
        """What a worker answers, asked again while none does, for at most the timeout."""
        deadline = time.monotonic() + self.timeout_s
        while True:
            try:
                return await ask()
            except RPCError as err:
                if err.status == RPCStatusCode.NOT_FOUND:
                    raise NotFound(f"no such conversation: {workflow_id}") from None
                if err.status not in NO_ANSWER_YET:  # refused: authentication, TLS, a bad request
                    raise
                if not self._told_waiting and self._on_waiting is not None:
                    self._on_waiting()
                self._told_waiting = True
                if time.monotonic() >= deadline:
                    raise NoWorker(
                        f"no worker answered for {self.timeout_s:.0f}s (is `agent-worker` "
                        f"running on task queue {self.settings.task_queue}?)"
                    ) from None
                await asyncio.sleep(POLL_INTERVAL_S)

    async def status(self, workflow_id: str) -> ConversationStatus:
        return await self.query(workflow_id, names.STATUS)

    async def history(self, workflow_id: str) -> list[AuditRecord]:
        return await self.query(workflow_id, names.HISTORY)

    async def grants(self, workflow_id: str) -> list[Grant]:
        """The approvals people remembered in this conversation that are still in force, and
        its owner's (`--remember owner`, in the store the workers share)."""
        grants = list(await self.query(workflow_id, names.GRANTS))
        store = owner_grant_store()
        owner = (await self.status(workflow_id)).owner if store is not None else None
        if store is not None and owner:
            grants += await asyncio.to_thread(store.owner_grants, owner,
                                              datetime.now(timezone.utc))
        return grants

    async def pending_schemas(self, workflow_id: str, status: ConversationStatus | None = None
                              ) -> dict[str, dict[str, Any]]:
        """The argument schema of each call waiting for a decision, by its ref (its subagents'
        calls included, at any depth); `status`, when the caller holds it already, names the
        subagents."""
        schemas = dict(await self.query(workflow_id, names.PENDING_SCHEMAS))
        status = status or await self.status(workflow_id)
        for owner in {p.conversation_id for p in status.pending_confirmations if p.conversation_id}:
            path = relative_id(owner, workflow_id)
            own = await self.query(owner, names.PENDING_SCHEMAS)
            schemas.update({f"{path}/{call_id}": schema for call_id, schema in own.items()})
        return schemas

    async def wait_settled(self, workflow_id: str, turn: int, wait_s: float) -> ConversationStatus:
        """Wait until `turn` has started and needs a human, is answered, or the conversation ended."""
        deadline = time.monotonic() + wait_s
        while True:
            status = await self.status(workflow_id)
            if status.status in ("completed", "failed") or (
                status.turn >= turn and status.status in SETTLED_STATUSES
            ):
                return status
            if time.monotonic() >= deadline:
                raise CliError(f"turn {turn} of {workflow_id} still running after {wait_s:.0f}s")
            await asyncio.sleep(POLL_INTERVAL_S)

    # ----- a human's input: by signal, then the recorded outcome -----

    async def signal(self, workflow_id: str, signal: str, arg: Any) -> None:
        check_sendable(arg)
        try:
            await self.handle(workflow_id).signal(signal, arg)
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                raise NotFound(f"no such running conversation: {workflow_id}") from None
            raise

    async def outcome(self, workflow_id: str, request_id: str) -> SignalOutcome | None:
        """Wait until the workflow records what became of a signal; None if it closed without.
        At most the session's timeout: a stuck conversation is reported, not waited for forever."""
        deadline = time.monotonic() + self.timeout_s
        while True:
            outcome = await self.query(workflow_id, names.SIGNAL_OUTCOME, request_id)
            if outcome is not None:
                return outcome
            description = await self.handle(workflow_id).describe()
            if description.close_time is not None:  # it may have recorded one, then closed,
                # since the query above: its closed history answers for good
                return await self.query(workflow_id, names.SIGNAL_OUTCOME, request_id)
            if time.monotonic() >= deadline:
                raise CliError(f"{workflow_id} recorded no outcome for the signal in "
                               f"{self.timeout_s:.0f}s; it was delivered, but is not yet taken")
            await asyncio.sleep(POLL_INTERVAL_S)

    async def send(self, workflow_id: str, signal: str, request: Any) -> SignalOutcome:
        """Signal a request (it carries a request id) and wait for its outcome. A refusal is
        returned as an outcome (`accepted` false); a conversation that closed first is an error."""
        await self.signal(workflow_id, signal, request)
        outcome = await self.outcome(workflow_id, request.request_id)
        if outcome is None:
            raise CliError(f"conversation {workflow_id} ended before taking the "
                           f"{'message' if isinstance(request, SayRequest) else 'signal'}")
        return outcome

    async def end(self, workflow_id: str, request_id: str, sender: str | None = None
                  ) -> SignalOutcome | None:
        """Ask the conversation to end: work in flight is cancelled. None if it closed first."""
        await self.signal(workflow_id, names.END_SIGNAL,
                          EndRequest(request_id=request_id, sender=sender))
        return await self.outcome(workflow_id, request_id)

    async def stop(self, workflow_id: str, request_id: str, sender: str | None = None
                   ) -> SignalOutcome | None:
        """Stop the turn in flight; the conversation goes on. None if it closed first."""
        await self.signal(workflow_id, names.STOP_SIGNAL,
                          StopRequest(request_id=request_id, sender=sender))
        return await self.outcome(workflow_id, request_id)

    # ----- a decision or an answer -----

    async def decide(self, workflow_id: str, request: HumanRequest | DecideRequest,
                     by_update: bool) -> SignalOutcome:
        """Send a decision or an answer, by Update (`Refused` on a refusal) or by signal (the
        outcome says). The conversation routes a part that names a subagent's call or question
        to the subagent (`workflows.decisions`), and takes a decision over several whole or not
        at all: one request, however deep its calls are. Several decisions and answers taken as
        one (`DecideRequest`) go by Update."""
        if by_update or isinstance(request, DecideRequest):
            return await self.update(workflow_id, request)
        return await self.send(workflow_id, _SIGNALS[type(request)], request)

    # ----- a human's input: by Update, refused before anything reaches the history -----

    async def revoke(self, workflow_id: str, grant_id: str, by: str) -> SignalOutcome:
        """Take a grant back, by Update: `Refused` (no such grant in force) changes nothing. An
        owner grant (`o-...`) is revoked in the store the workers share: in every conversation
        of its owner at once."""
        if not grant_id.startswith(OWNER_GRANT_PREFIX):
            return await self.update(workflow_id, RevokeRequest(grant_id=grant_id, by=by))
        store = owner_grant_store()
        owner = (await self.status(workflow_id)).owner
        revoked = None if store is None or not owner else await asyncio.to_thread(
            store.revoke_owner_grant, grant_id, owner, by,
            datetime.now(timezone.utc).isoformat())
        if revoked is None:
            raise Refused(f"no owner grant {grant_id!r} of this conversation's owner is in force")
        return SignalOutcome(request_id="", accepted=True)

    async def update(self, workflow_id: str,
                     request: SayRequest | HumanRequest | DecideRequest | RevokeRequest
                     ) -> SignalOutcome:
        """Send a message, a decision or an answer through its Update twin. Raises `Refused` with
        the conversation's reason, `NotFound`, or `NoWorker` past the session's timeout."""
        update = _UPDATES[type(request)]
        check_sendable(request)
        try:
            async with asyncio.timeout(self.timeout_s):
                outcome = await self.handle(workflow_id).execute_update(
                    update.name, request, result_type=update.answers,
                    rpc_timeout=timedelta(seconds=self.timeout_s))
        except WorkflowUpdateFailedError as err:
            cause = err.cause
            raise Refused(getattr(cause, "message", None) or str(cause)) from None
        except (TimeoutError, WorkflowUpdateRPCTimeoutOrCancelledError):
            raise NoWorker(f"no worker took the request in {self.timeout_s:.0f}s (is "
                           f"`agent-worker` running on task queue "
                           f"{self.settings.task_queue}?); the server may still hand it to the "
                           "next worker, so check the status before sending it again") from None
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                raise NotFound(f"no such running conversation: {workflow_id}") from None
            if err.status == RPCStatusCode.FAILED_PRECONDITION:  # it closed meanwhile
                raise Refused("the conversation has ended") from None
            raise
        if not outcome.accepted:
            raise Refused(outcome.reason or "refused")
        return outcome

    # ----- the live stream -----

    async def stream_offset(self, workflow_id: str) -> int:
        """The offset the next stream event will have: the stream's offset query, with the
        deadline every query here has (the library's `get_offset` has none, so a slow server
        held a caller for as long as it took, past the session's timeout)."""
        handle = self.client.get_workflow_handle(workflow_id)
        return await self._answered(workflow_id, lambda: handle.query(
            OFFSET_QUERY, result_type=int, rpc_timeout=QUERY_RPC_TIMEOUT))

    def follow(self, workflow_id: str, from_offset: int = 0
               ) -> AsyncIterator[WorkflowStreamItem[StreamEvent]]:
        return follow(self.client, workflow_id, from_offset)


async def follow(client: Client, workflow_id: str, from_offset: int = 0,
                 on_interrupted: Callable[[RPCError, int], None] | None = None
                 ) -> AsyncIterator[WorkflowStreamItem[StreamEvent]]:
    """A conversation's durable events from an offset, live, across continue-as-new, until it
    completes. A lost connection or a restarting server is survived: it resumes from the next
    offset after a short pause, so nothing is lost or repeated.

    It reads with the stream's query, never its long-poll Update: a watcher then holds nothing
    of the conversation (Temporal lets a workflow have 10 Updates in flight, and a dropped or an
    idle watcher's poll would hold one until the next event, so ten watchers would block every
    decision), and adds nothing to its history. The handle names no run, so each read reaches
    the latest run: continue-as-new is followed as it happens."""
    handle = client.get_workflow_handle(workflow_id)
    convert = client.data_converter.payload_converter
    offset, empty, closed = from_offset, 0, False
    while True:
        try:
            result = await handle.query(STREAM_POLL_QUERY, PollInput(STREAM_TOPICS, offset),
                                        result_type=PollResult, rpc_timeout=QUERY_RPC_TIMEOUT)
            for wire in result.items:
                payload = Payload()
                payload.ParseFromString(base64.b64decode(wire.data))
                yield WorkflowStreamItem(topic=wire.topic, offset=wire.offset,
                                         data=convert.from_payload(payload, StreamEvent))
            offset = result.next_offset
            if result.items or result.more_ready:
                empty = 0
                continue
            if closed:  # read once more after the close was seen: nothing came after it
                return
            # Caught up: is the conversation over? Asked now and then, not on every read.
            if empty % CLOSED_CHECK_EVERY == 0 and await _closed(handle):
                closed = True  # what it published last is read before the end
                continue
            empty += 1
            await asyncio.sleep(STREAM_POLL_INTERVAL_S)
        except (RPCError, WorkflowQueryFailedError) as err:
            if isinstance(err, RPCError) and err.status == RPCStatusCode.NOT_FOUND:
                raise NotFound(f"no such conversation: {workflow_id}") from None
            if on_interrupted is not None:
                on_interrupted(err, offset)  # type: ignore[arg-type]
            await asyncio.sleep(RECONNECT_DELAY_S)


async def _closed(handle: WorkflowHandle) -> bool:
    """Whether the conversation's latest run has closed (completed, failed, ended)."""
    status = (await handle.describe()).status
    return status not in (None, WorkflowExecutionStatus.RUNNING,
                          WorkflowExecutionStatus.CONTINUED_AS_NEW)



_SIGNALS: dict[type, str] = {
    ConfirmRequest: names.CONFIRM_SIGNAL,
    RejectRequest: names.REJECT_SIGNAL,
    AnswerRequest: names.ANSWER_SIGNAL,
}
_UPDATES: dict[type, names.Asked] = {
    SayRequest: names.SEND_MESSAGE,
    ConfirmRequest: names.DECIDE_CONFIRM,
    RejectRequest: names.DECIDE_REJECT,
    AnswerRequest: names.GIVE_ANSWER,
    DecideRequest: names.DECIDE,
    RevokeRequest: names.REVOKE_GRANT,
}


def owner_grant_store() -> MemoryStore | None:
    """The store of owner grants, as the workers name it (None: AGENT_MEMORY=off)."""
    url = url_from_env(os.environ)
    return None if url is None else open_store(url)
