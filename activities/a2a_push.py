"""A2A push notifications (`api.a2a`), delivered as the webhooks are (`activities.webhooks`):
each event of a conversation that an A2A client asked to hear of is one `notify` activity, keyed,
retried and recorded in the audit trail. The body is A2A's own: a `StreamResponse` holding the
turn's task as the event leaves it (`input-required` with what waits, `completed` with the
answer, `canceled`, `failed`), with the client's token in `X-A2A-Notification-Token` and its
credentials in `Authorization`. The config is read from the store the API keeps it in: one
removed since is not delivered to."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import structlog
from temporalio.exceptions import ApplicationError

from ..contract import NotifyRequest
from .memory import open_store

log = structlog.get_logger("webhooks")

PUSH_EVENTS = ["approval_requested", "question_asked", "turn_finished", "conversation_failed"]
TURN_MARK = "~"  # between a task's conversation and turn (`api.a2a`)
STOPPED = ("stopped", "cancelled", "ended")


def turn_task(conversation: str, turn: int) -> str:
    """A turn's A2A task id: in no conversation id, and kept whole in a URL path."""
    return f"{conversation}{TURN_MARK}{turn}"


def approval_line(tool: Any, args: Any, risk: Any, ref: Any) -> str:
    """A call that waits for a person, as an A2A task's status message says it."""
    return f"waiting for approval: {tool}({json.dumps(args, ensure_ascii=False)}) [{risk}], call {ref}"


def push_body(request: NotifyRequest) -> dict[str, Any]:
    """The event as A2A's `StreamResponse` JSON: the turn's task, `CONVERSATION~TURN`."""
    # (a2a-sdk's types, imported by the worker only once a client asked for pushes)
    from a2a.types import (  # noqa: PLC0415
        Artifact,
        Message,
        Part,
        Role,
        StreamResponse,
        Task,
        TaskState,
        TaskStatus,
    )
    from google.protobuf.json_format import MessageToDict  # noqa: PLC0415

    p = request.payload
    conversation, turn = p["conversation_id"], int(p.get("turn") or 0)
    task_id = turn_task(conversation, turn)
    said, artifacts = None, []
    if request.event == "approval_requested":
        state = TaskState.TASK_STATE_INPUT_REQUIRED
        said = approval_line(p.get("tool"), p.get("args"), p.get("risk"), p.get("call_id"))
    elif request.event == "question_asked":
        state, said = TaskState.TASK_STATE_INPUT_REQUIRED, f"question: {p.get('question')}"
    elif request.event == "conversation_failed":
        state, said = TaskState.TASK_STATE_FAILED, p.get("error") or "the conversation failed"
    elif p.get("stop_reason") in STOPPED:
        state = TaskState.TASK_STATE_CANCELED
    else:
        state = TaskState.TASK_STATE_COMPLETED
        if p.get("answer") is not None:
            artifacts = [Artifact(artifact_id=f"{task_id}:answer", name="answer",
                                  parts=[Part(text=p["answer"])])]
    message = None if said is None else Message(
        message_id=f"{task_id}:status", role=Role.ROLE_AGENT, context_id=conversation,
        task_id=task_id, parts=[Part(text=said)])
    task = Task(id=task_id, context_id=conversation, artifacts=artifacts,
                status=TaskStatus(state=state, message=message))
    return MessageToDict(StreamResponse(task=task))


async def push_delivery(store_url: str | None, request: NotifyRequest
                        ) -> tuple[str, bytes, dict[str, str]] | None:
    """Where and what to POST for one event to one A2A push config (`notify` sends it as it
    sends a webhook's): its URL, the body, and the client's token and credentials; None when
    the config is gone."""
    if store_url is None:
        raise ApplicationError("this worker keeps no A2A push configs (AGENT_MEMORY=off)",
                               type="UnknownWebhook", non_retryable=True)
    conversation = request.payload["conversation_id"]
    configs = await asyncio.to_thread(open_store(store_url).pushes, conversation)
    config = next((c for c in configs if c.id == request.push), None)
    if config is None:
        log.info("push config gone", key=request.key, push=request.push)
        return None
    headers = {"Content-Type": "application/json", "X-Agent-Delivery": request.key,
               "X-Agent-Event": request.event}
    if config.token:
        headers["X-A2A-Notification-Token"] = config.token
    if config.scheme and config.credentials:
        headers["Authorization"] = f"{config.scheme} {config.credentials}"
    body = json.dumps(push_body(request), ensure_ascii=False, separators=(",", ":")).encode()
    return config.url, body, headers
