"""One CLI invocation's session with Temporal: queries that wait for a worker (within a deadline),
signals, and waiting for what became of a signal or a turn."""

from __future__ import annotations

import asyncio
import sys
import time
from datetime import timedelta
from typing import Any

from temporalio.client import Client, WorkflowHandle
from temporalio.service import RPCError, RPCStatusCode

from client.connection import TemporalSettings
from workflows.bounds import DEFAULT_MESSAGE_BYTES
from workflows.conversation import ConversationWorkflow
from workflows.models import SETTLED_STATUSES, ConversationStatus, SignalOutcome

QUERY_RPC_TIMEOUT = timedelta(seconds=3)
# A query that ends like this found no worker to answer it (yet); any other failure is reported.
NO_ANSWER_YET = frozenset({RPCStatusCode.CANCELLED, RPCStatusCode.DEADLINE_EXCEEDED,
                           RPCStatusCode.UNAVAILABLE})
POLL_INTERVAL_S = 0.25


class CliError(Exception):
    """A failure to report as one line, exiting 1."""


class UsageError(Exception):
    """A command line that cannot be sent as it is: exit 2."""


class Refused(Exception):
    """What the conversation would refuse, refused before sending: exit 1."""


class Session:
    """One CLI invocation: a client, the settings, and patience for a missing worker."""

    def __init__(self, client: Client, settings: TemporalSettings, timeout_s: float,
                 max_message_bytes: int = DEFAULT_MESSAGE_BYTES):
        self.client = client
        self.settings = settings
        self.timeout_s = timeout_s
        self.max_message_bytes = max_message_bytes  # what `start` asks the conversation to take
        self._told_waiting = False

    def handle(self, workflow_id: str) -> WorkflowHandle:
        return self.client.get_workflow_handle_for(ConversationWorkflow.run, workflow_id)

    async def query(self, workflow_id: str, query: Any, *args: Any) -> Any:
        """Query, retrying while no worker answers, for at most the session's timeout."""
        deadline = time.monotonic() + self.timeout_s
        handle = self.handle(workflow_id)
        while True:
            try:
                return await handle.query(query, *args, rpc_timeout=QUERY_RPC_TIMEOUT)
            except RPCError as err:
                if err.status == RPCStatusCode.NOT_FOUND:
                    raise CliError(f"no such conversation: {workflow_id}") from None
                if err.status not in NO_ANSWER_YET:  # refused: authentication, TLS, a bad request
                    raise
                if not self._told_waiting:
                    print("waiting for a worker to answer...", file=sys.stderr, flush=True)
                    self._told_waiting = True
                if time.monotonic() >= deadline:
                    raise CliError(
                        f"no worker answered for {self.timeout_s:.0f}s (is `python -m worker` "
                        f"running on task queue {self.settings.task_queue}?)"
                    ) from None
                await asyncio.sleep(POLL_INTERVAL_S)

    async def status(self, workflow_id: str) -> ConversationStatus:
        return await self.query(workflow_id, ConversationWorkflow.status)

    async def signal(self, workflow_id: str, signal: Any, arg: Any) -> None:
        try:
            await self.handle(workflow_id).signal(signal, arg)
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                raise CliError(f"no such running conversation: {workflow_id}") from None
            raise

    async def outcome(self, workflow_id: str, request_id: str) -> SignalOutcome | None:
        """Wait until the workflow records what became of a signal; None if it closed first. At
        most the session's timeout: a stuck conversation is reported, not waited for forever."""
        deadline = time.monotonic() + self.timeout_s
        while True:
            outcome = await self.query(workflow_id, ConversationWorkflow.signal_outcome, request_id)
            if outcome is not None:
                return outcome
            description = await self.handle(workflow_id).describe()
            if description.close_time is not None:
                return None
            if time.monotonic() >= deadline:
                raise CliError(f"{workflow_id} recorded no outcome for the signal in "
                               f"{self.timeout_s:.0f}s; it was delivered, but is not yet taken")
            await asyncio.sleep(POLL_INTERVAL_S)

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
