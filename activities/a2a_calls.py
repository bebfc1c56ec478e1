"""A remote A2A agent's tool (`activities.remote_agents`): a call sends one message to the
agent and follows its task to the end, through the official `a2a-sdk` client.

A call is durable without being sent twice:
- The message's id is the call's idempotency key, and its context id is derived from it, so an
  attempt after a worker died sends the same message; before it sends again, it looks for the
  task the first attempt began (the task id it heartbeated, else the agent's tasks in that
  context), and follows that one.
- The task is followed by the agent's stream where its card offers one, else by polling, with
  each status message shown as the call's progress.
- `input-required` is the conversation's question (`NeedsInput`); the answer goes to the same
  task, with the task's id carried beside the question (`NeedsInput.resume`).
- `completed` gives the artifacts' text (a large one is cut for the model and kept whole by
  reference, as any tool's); `failed`, `canceled`, `rejected` and `auth-required` are errors the
  model reads. A stopped call cancels the remote task.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field

import httpx
import structlog
from a2a.client import Client, ClientConfig, create_client
from a2a.client.card_resolver import parse_agent_card
from a2a.types import (
    AgentCard,
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    Message,
    Part,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
    StreamResponse,
    SubscribeToTaskRequest,
    Task,
    TaskState,
)
from google.protobuf.json_format import MessageToDict
from pydantic import BaseModel, Field
from temporalio import activity

from ..contract.bounds import MAX_FULL_RESULT_BYTES, KiB, clip
from .remote_agents import RemoteAgentConfig, RemoteAgentsFile
from .tools.registry import NeedsInput, ToolContext, ToolError, ToolSpec

log = structlog.get_logger()

MAX_CARD_BYTES = 256 * KiB
MAX_RESPONSE_BYTES = MAX_FULL_RESULT_BYTES + 1024 * KiB  # one answer of the agent, or event
MAX_QUESTION_BYTES = 4 * KiB
CARD_TIMEOUT_S = 10.0
FIRST_POLL_S, MAX_POLL_S = 0.5, 5.0
# where a task stops, for good or until someone answers it
SETTLED = frozenset({TaskState.TASK_STATE_COMPLETED, TaskState.TASK_STATE_FAILED,
                     TaskState.TASK_STATE_CANCELED, TaskState.TASK_STATE_REJECTED,
                     TaskState.TASK_STATE_INPUT_REQUIRED, TaskState.TASK_STATE_AUTH_REQUIRED})
NOT_ANSWERED = {TaskState.TASK_STATE_FAILED: "failed", TaskState.TASK_STATE_CANCELED: "canceled",
                TaskState.TASK_STATE_REJECTED: "rejected the task",
                TaskState.TASK_STATE_AUTH_REQUIRED: "requires authentication this worker "
                                                    "does not have"}


class Ask(BaseModel):
    message: str = Field(min_length=1, max_length=32 * KiB, description=(
        "What to ask the agent, in full: it sees nothing else of this conversation."))


@dataclass
class Follow:
    """Where a call is with its remote task: heartbeated, so the next attempt resumes it."""

    context: str
    message: str  # the id of the message this run sends
    task: str | None = None
    sent: bool = False
    rounds: int = 0  # the agent's questions answered before this run
    said: str = ""  # the agent's last status message, shown as progress

    def details(self) -> dict:
        return {"context": self.context, "message": self.message, "task": self.task,
                "sent": self.sent}


@dataclass
class RemoteAgent:
    name: str
    config: RemoteAgentConfig
    token: str | None = field(default=None, repr=False)
    card: AgentCard | None = None

    async def read_card(self, http: httpx.AsyncClient) -> AgentCard:
        """The agent's card, read once per process (again after a failure)."""
        if self.card is None:
            async with http.stream("GET", self.config.card, headers=self._headers(),
                                   timeout=CARD_TIMEOUT_S) as response:
                response.raise_for_status()
                body = bytearray()
                async for chunk in response.aiter_bytes():
                    body += chunk
                    if len(body) > MAX_CARD_BYTES:
                        raise ValueError(f"its card is over {MAX_CARD_BYTES // KiB} KiB")
            self.card = parse_agent_card(json.loads(body))
        return self.card

    def spec(self) -> ToolSpec:
        return ToolSpec(name=self.name, description=self.description(), args_model=Ask,
                        handler=self.run, risk=self.config.risk, idempotent=False, keyed=True,
                        timeout_s=self.config.timeout_s, local=False)

    def description(self) -> str:
        card = self.card
        if card is None:
            said = self.config.description or "an agent reached over A2A"
            return clip(f"Ask the remote agent {self.name}: {said}", 1024)
        skills = "; ".join(f"{s.name}: {s.description}" for s in card.skills[:8])
        return clip(f"Ask the remote agent {card.name or self.name} (A2A): {card.description}"
                    + (f" Skills: {skills}" if skills else ""), 1024)

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    def follow_of(self, ctx: ToolContext) -> Follow:
        """What this run sends and where: the call's first message, or (after the agent asked)
        the answer to the task that asked, each under an id of the call's key; resumed from
        what an earlier attempt of this run heartbeated."""
        base = "m-" + hashlib.sha256(ctx.idempotency_key.encode()).hexdigest()[:32]
        task_id, rounds = None, 0
        if ctx.answer is not None and ctx.resume:
            resumed = json.loads(ctx.resume)
            task_id, rounds = resumed["task"], resumed["round"]
        follow = Follow(context="c-" + base[2:], message=f"{base}.{rounds}", task=task_id,
                        rounds=rounds)
        if (kept := ctx.heartbeat_details) and kept.get("message") == follow.message:
            follow.task, follow.sent = kept.get("task") or follow.task, bool(kept.get("sent"))
        return follow

    async def run(self, ask: Ask, ctx: ToolContext) -> str:
        try:
            card = await self.read_card(ctx.http)
        except (httpx.HTTPError, ValueError) as err:
            raise ToolError(f"the agent {self.name}'s card cannot be read: {err}") from None
        follow = self.follow_of(ctx)
        text = ctx.answer if follow.rounds and ctx.answer is not None else ask.message
        attempt = activity.info().attempt if activity.in_activity() else 1
        async with bounded_http(self._headers()) as http:
            client = await create_client(card, client_config=ClientConfig(
                streaming=bool(card.capabilities.streaming), httpx_client=http))
            try:
                if not follow.sent and attempt > 1 and (
                        found := await self._sent_before(client, follow)) is not None:
                    follow.task, follow.sent = found.id, True
                if follow.sent:
                    log.info("remote task resumed, not sent again", agent=self.name,
                             task=follow.task, attempt=attempt)
                task = await self._settle(client, card, follow, text, ctx)
            except asyncio.CancelledError:  # the call was stopped: so is its remote task
                if follow.task is not None:
                    await cancel_quietly(client, follow.task)
                raise
            except (ToolError, NeedsInput):
                raise
            except Exception as err:  # the agent, or the way to it: not a retry of ours
                raise ToolError(f"the agent {self.name} could not be reached: "
                                f"{type(err).__name__}: {err}") from None
            finally:
                await client.close()
        return self._outcome(task, follow.rounds)

    async def _settle(self, client: Client, card: AgentCard, follow: Follow, text: str,
                      ctx: ToolContext) -> Task | Message:
        """Send the message once (unless an earlier attempt did) and follow its task until it
        settles. A direct reply (a message, no task) is returned as it is."""
        if not follow.sent:
            ctx.heartbeat(follow.details())  # (sent at once: an activity's first heartbeat)
            message = Message(message_id=follow.message, role=Role.ROLE_USER,
                              context_id=follow.context, task_id=follow.task or "",
                              parts=[Part(text=text)])
            request = SendMessageRequest(message=message, configuration=SendMessageConfiguration(
                return_immediately=not card.capabilities.streaming))
            stream = client.send_message(request)
        elif card.capabilities.streaming:
            stream = resubscribe(client, follow.task)
        else:
            stream = None
        task = None
        if stream is not None:
            async for event in stream:
                if event.HasField("message"):
                    return event.message
                task = self._seen(task, event, follow, ctx)
                if task is not None and task.status.state in SETTLED:
                    return task
        delay = FIRST_POLL_S
        while True:  # no stream, or it ended before the task settled: poll
            fetched = await client.get_task(GetTaskRequest(id=follow.task))
            if fetched.status.state in SETTLED:
                return fetched
            self._progress(fetched, follow, ctx)
            await asyncio.sleep(delay)
            delay = min(MAX_POLL_S, delay * 1.5)

    def _seen(self, task: Task | None, event: StreamResponse, follow: Follow,
              ctx: ToolContext) -> Task | None:
        """The task as the events so far tell it."""
        if event.HasField("task"):
            task = event.task
        elif task is None:
            task = Task(id=follow.task or "", context_id=follow.context)
        if event.HasField("status_update"):
            task.status.CopyFrom(event.status_update.status)
        if event.HasField("artifact_update"):
            update = event.artifact_update
            same = [a for a in task.artifacts if a.artifact_id == update.artifact.artifact_id]
            if update.append and same:  # a chunk goes on where the last one stopped
                parts, more = same[0].parts, list(update.artifact.parts)
                if parts and more and parts[-1].HasField("text") and more[0].HasField("text"):
                    parts[-1].text += more.pop(0).text
                parts.extend(more)
            else:
                task.artifacts.append(update.artifact)
        if task.id and (task.id != follow.task or not follow.sent):
            follow.task, follow.sent = task.id, True
            ctx.heartbeat(follow.details())
            log.info("remote task followed", agent=self.name, task=task.id)
        self._progress(task, follow, ctx)
        return task

    def _progress(self, task: Task, follow: Follow, ctx: ToolContext) -> None:
        """The agent's status message as the call's progress, each time it says something new
        (an agent that repeats itself while it works is shown once)."""
        said = text_of(task.status.message.parts)
        if said and said != follow.said:
            follow.said = said
            ctx.progress(f"{self.name}: {said}")

    async def _sent_before(self, client: Client, follow: Follow) -> Task | None:
        """The task an earlier attempt's message began or reached, if the agent shows one."""
        try:
            if follow.task is not None:  # an answer: has the task had it, or moved on?
                task = await client.get_task(GetTaskRequest(id=follow.task, history_length=50))
                if task.status.state != TaskState.TASK_STATE_INPUT_REQUIRED or any(
                        m.message_id == follow.message for m in task.history):
                    return task
                return None
            listed = await client.list_tasks(ListTasksRequest(context_id=follow.context,
                                                              page_size=10))
        except Exception as err:  # an agent that lists no tasks: the message goes again
            log.warning("remote tasks not listed", agent=self.name, error=str(err))
            return None
        return listed.tasks[0] if listed.tasks else None

    def _outcome(self, answer: Task | Message, rounds: int) -> str:
        if isinstance(answer, Message):
            return text_of(answer.parts)
        state, said = answer.status.state, text_of(answer.status.message.parts)
        if state == TaskState.TASK_STATE_INPUT_REQUIRED:
            raise NeedsInput(clip(f"The agent {self.name} asks: {said or 'more input'}",
                                  MAX_QUESTION_BYTES),
                             resume=json.dumps({"task": answer.id, "round": rounds + 1}))
        if state in NOT_ANSWERED:
            raise ToolError(f"the agent {self.name} {NOT_ANSWERED[state]}"
                            + (f": {said}" if said else ""))
        parts = [text_of(a.parts) for a in answer.artifacts]
        return clip("\n\n".join(p for p in parts if p) or said, MAX_FULL_RESULT_BYTES)


async def resubscribe(client: Client, task_id: str) -> AsyncIterator[StreamResponse]:
    """The task's stream again; nothing (then it is polled) where the agent refuses, as for a
    task that has settled."""
    try:
        async for event in client.subscribe(SubscribeToTaskRequest(id=task_id)):
            yield event
    except Exception as err:  # noqa: BLE001 (whatever the agent answers: it is polled)
        log.info("remote task not followed by stream", task=task_id, error=str(err))


async def cancel_quietly(client: Client, task_id: str) -> None:
    try:
        await asyncio.wait_for(client.cancel_task(CancelTaskRequest(id=task_id)), 5)
        log.info("remote task canceled", task=task_id)
    except Exception as err:  # noqa: BLE001 (a courtesy: the call is stopped either way)
        log.warning("remote task not canceled", task=task_id, error=str(err))


def text_of(parts) -> str:
    """What the parts say as text: text as it is, data as JSON, a file by its name and link."""
    said: list[str] = []
    for part in parts:
        kind = part.WhichOneof("content")
        if kind == "text":
            said.append(part.text)
        elif kind == "data":
            said.append(json.dumps(MessageToDict(part.data)))
        elif kind in ("url", "raw"):
            size = f", {len(part.raw):,} bytes" if kind == "raw" else f" at {part.url}"
            said.append(f"[file {part.filename or 'unnamed'} ({part.media_type or '?'}){size}]")
    return "\n".join(said)


class _Bounded(httpx.AsyncByteStream):
    def __init__(self, stream: httpx.AsyncByteStream, url: httpx.URL):
        self._stream, self._url, self._read = stream, url, 0

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._stream:
            self._read += len(chunk)
            if self._read > MAX_RESPONSE_BYTES:
                raise httpx.ReadError(f"the answer from {self._url} passed "
                                      f"{MAX_RESPONSE_BYTES // (1024 * KiB)} MiB")
            yield chunk

    async def aclose(self) -> None:
        await self._stream.aclose()


class BoundedTransport(httpx.AsyncHTTPTransport):
    """No answer of a remote agent is read past `MAX_RESPONSE_BYTES`."""

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await super().handle_async_request(request)
        response.stream = _Bounded(response.stream, request.url)  # type: ignore[arg-type]
        return response


def bounded_http(headers: dict[str, str]) -> httpx.AsyncClient:
    # (no read deadline: a stream may be quiet for as long as the task works; the call's own
    # deadline, and its heartbeats, bound it)
    return httpx.AsyncClient(headers=headers, transport=BoundedTransport(),
                             timeout=httpx.Timeout(30.0, read=None))


async def remote_agent_tools(agents: RemoteAgentsFile,
                             env: Mapping[str, str] = os.environ) -> list[ToolSpec]:
    """A tool per agent, described by its card (read now, concurrently: an agent whose card
    cannot be read yet is described by the file, and read again at its first call)."""
    remote = [RemoteAgent(name, config, env.get(config.auth) if config.auth else None)
              for name, config in agents.agents.items()]

    async def read(agent: RemoteAgent) -> None:
        try:
            await agent.read_card(http)
        except Exception as err:  # noqa: BLE001 (any failure: the agent may be up later)
            log.warning("remote agent card unread", agent=agent.name, card=agent.config.card,
                        error=f"{type(err).__name__}: {err}")

    async with httpx.AsyncClient() as http:
        await asyncio.gather(*(read(agent) for agent in remote))
    log.info("remote agents", agents={a.name: a.card is not None for a in remote})
    return [agent.spec() for agent in remote]
