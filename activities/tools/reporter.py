"""A running tool call's line to Temporal and to the conversation: heartbeats with the latest
details, and progress on the live stream. Safe to use from the tool's own coroutine or from the
thread a sync tool runs in."""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Callable
from typing import Any

import structlog
from temporalio import activity
from temporalio.contrib.workflow_streams import WorkflowStreamClient

from ...contract import StreamEvent
from ...contract.bounds import MAX_EVENT_TEXT_BYTES, clip
from ...contract.names import TOKENS_TOPIC
from ..heartbeat import is_local

log = structlog.get_logger()


class CallReporter:
    """Made in the activity's event loop, for one attempt of one call."""

    def __init__(self, tool: str, call_id: str, turn: int, step: int):
        self._event = StreamEvent(kind="tool_progress", turn=turn, step=step, call_id=call_id,
                                  tool=tool)
        self._loop = asyncio.get_running_loop()
        # The attempt's context (its activity, its log fields): a callback may come from another
        # task's context, as an MCP session's progress does (the task that opened the session).
        self._context = contextvars.copy_context()
        self._local = is_local()  # a local activity has no heartbeat to carry details
        self._details: tuple[Any, ...] = ()
        # Opened at the first progress: most calls never report any.
        self._live: WorkflowStreamClient | None = None
        self._flushing: asyncio.Future[None] | None = None

    def heartbeat(self, details: Any = None) -> None:
        self._on_loop(self._heartbeat, details)

    def beat(self) -> None:
        """The worker's own periodic heartbeat, which must not drop the tool's details."""
        if not self._local:
            activity.heartbeat(*self._details)

    def progress(self, text: str) -> None:
        self._on_loop(self._publish, clip(str(text), MAX_EVENT_TEXT_BYTES))

    async def aclose(self) -> None:
        """Deliver what progress is still buffered. Progress is a courtesy: failing to deliver it
        never fails the call, whose work is done."""
        if self._live is None:
            return
        try:
            await self._live.flush()
        except Exception as err:  # noqa: BLE001 (any failure to signal the conversation)
            log.warning("tool progress not delivered", error=str(err))

    def _heartbeat(self, details: Any) -> None:
        if self._local and details is not None and not self._details:
            log.warning("a local run keeps no heartbeat details: declare the tool local=False "
                        "to resume from them after a retry")
        if details is not None:
            self._details = (details,)
        self.beat()

    def _publish(self, text: str) -> None:
        if self._live is None:
            self._live = WorkflowStreamClient.from_within_activity()
        self._live.topic(TOKENS_TOPIC, type=StreamEvent).publish(
            self._event.model_copy(update={"text": text}))
        # One signal in flight at a time; what is published meanwhile goes in the next one.
        if self._flushing is None or self._flushing.done():
            self._flushing = asyncio.ensure_future(self._flush(self._live))

    @staticmethod
    async def _flush(live: WorkflowStreamClient) -> None:
        try:
            await live.flush()
        except Exception as err:  # noqa: BLE001 (kept for `aclose` to try again)
            log.warning("tool progress delayed", error=str(err))

    def _on_loop(self, fn: Callable[[Any], None], arg: Any) -> None:
        """Heartbeats and the stream client belong to the activity's loop and context, whoever
        calls: the tool's coroutine, a sync tool's worker thread, or an MCP session's task."""
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self._loop:
            self._context.run(fn, arg)
        else:
            self._loop.call_soon_threadsafe(fn, arg, context=self._context)
