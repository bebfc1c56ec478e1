"""A remote agent built with `a2a-sdk`'s own server classes (`DefaultRequestHandler`, an
`AgentExecutor`, the in-memory task store, the SDK's route factories), served by uvicorn in a
thread, for our agent to delegate to. It is two agents: `/stream` says it streams, `/poll` does
not (its caller polls `GetTask`).

What it does with a message:
- `ask: ...`: asks "Which city, Paris or Rome?" (`input-required`); the answer completes the
  task with "Forecast for <answer>: sunny".
- `slow: ...`: works until `release()`d, saying "still working", then answers.
- `reject: ...` and `auth: ...`: the task is rejected, or requires authentication.
- `big: ...`: answers 300 KB, in three chunks of one artifact.
- anything else: answers "Desk says: <message>".
Each message id it is sent is kept, in order (`received`), to count what was sent twice."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from pathlib import Path

import uvicorn
from a2a.helpers.proto_helpers import new_task, new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events.event_queue_v2 import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    Message,
    Part,
    TaskState,
)
from starlette.applications import Starlette

QUESTION = "Which city, Paris or Rome?"


class Desk(AgentExecutor):
    def __init__(self) -> None:
        self.received: list[str] = []
        self.canceled: list[str] = []
        self.released = threading.Event()

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        message = context.message
        assert message is not None
        self.received.append(message.message_id)
        text = context.get_user_input()
        task = context.current_task
        if task is None:
            task = new_task(context.task_id, context.context_id, TaskState.TASK_STATE_SUBMITTED,
                            history=[message])
            await event_queue.enqueue_event(task)
        updater = TaskUpdater(event_queue, task.id, task.context_id)
        if task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED:
            await self._answer(updater, f"Forecast for {text}: sunny")
            return
        await updater.start_work(self._said(updater, "working on it"))
        if text.startswith("ask:"):
            await updater.requires_input(self._said(updater, QUESTION))
            return
        if text.startswith("big:"):  # an answer of 300 KB, in three chunks of one artifact
            for n in range(3):
                await updater.add_artifact([new_text_part(f"{n}" * 100_000)], artifact_id="big",
                                           append=n > 0)
            await updater.complete()
            return
        if text.startswith("reject:"):
            await updater.reject(self._said(updater, "not my department"))
            return
        if text.startswith("auth:"):
            await updater.requires_auth(self._said(updater, "sign in at the desk first"))
            return
        if text.startswith("slow:"):
            while not self.released.is_set():
                await updater.update_status(TaskState.TASK_STATE_WORKING,
                                            self._said(updater, "still working"))
                await asyncio.sleep(0.2)
        await self._answer(updater, f"Desk says: {text}")

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        self.canceled.append(context.task_id or "")
        await TaskUpdater(event_queue, context.task_id, context.context_id).cancel()

    async def _answer(self, updater: TaskUpdater, text: str) -> None:
        await updater.add_artifact([new_text_part(text)], name="answer")
        await updater.complete()

    def _said(self, updater: TaskUpdater, text: str) -> Message:
        return updater.new_agent_message([Part(text=text)])

    def release(self) -> None:
        self.released.set()


def card(url: str, streaming: bool) -> AgentCard:
    return AgentCard(
        name="Forecast desk", description="Answers forecasts, asking which city if need be.",
        version="1.0", default_input_modes=["text/plain"], default_output_modes=["text/plain"],
        capabilities=AgentCapabilities(streaming=streaming),
        supported_interfaces=[AgentInterface(url=url, protocol_binding="JSONRPC",
                                             protocol_version="1.0")],
        skills=[AgentSkill(id="forecast", name="forecast", description="A city's forecast",
                           tags=["weather"])])


class RemoteDesk:
    """The two agents on one port, in a thread of the test process."""

    def __init__(self) -> None:
        self.desk = Desk()
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        routes = []
        for name, streaming in (("stream", True), ("poll", False)):
            agent_card = card(f"{self.url}/{name}/rpc", streaming)
            handler = DefaultRequestHandler(self.desk, InMemoryTaskStore(), agent_card)
            routes += create_agent_card_routes(
                agent_card, card_url=f"/{name}/.well-known/agent-card.json")
            routes += create_jsonrpc_routes(handler, f"/{name}/rpc")
        self._server = uvicorn.Server(uvicorn.Config(Starlette(routes=routes), host="127.0.0.1",
                                                     port=self.port, log_level="warning"))
        self._thread = threading.Thread(target=self._server.run, daemon=True)

    def card_url(self, name: str) -> str:
        return f"{self.url}/{name}/.well-known/agent-card.json"

    def __enter__(self) -> RemoteDesk:
        self._thread.start()
        deadline = time.monotonic() + 20
        while not self._server.started:
            assert time.monotonic() < deadline, "the remote agent did not start"
            time.sleep(0.05)
        return self

    def __exit__(self, *exc) -> None:
        self.desk.release()
        self._server.should_exit = True
        self._thread.join(timeout=10)


def agents_file(path: Path, agents: dict[str, dict]) -> Path:
    """An AGENT_A2A_AGENTS file naming `agents`."""
    path.write_text(json.dumps({"agents": agents}))
    return path
