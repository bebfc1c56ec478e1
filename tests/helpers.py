"""Helpers for conversation tests (not collected: no `test_` prefix)."""

from __future__ import annotations

import asyncio
import time
import uuid

from temporalio.client import Client, WorkflowHandle

from scripted_model import Scenario, ScriptedModelServer, ScriptedReply, ScriptedToolCall, Script
from workflows.conversation import ConversationWorkflow
from workflows.models import SETTLED_STATUSES, ConversationInput, ConversationStatus, LLMOptions

FAST_LLM = LLMOptions(heartbeat_timeout_s=3, max_retry_interval_s=2)


def tool_call(name: str, arguments: dict | str) -> ScriptedToolCall:
    return ScriptedToolCall(name=name, arguments=arguments)


def script(model: ScriptedModelServer, trigger: str, *replies: ScriptedReply) -> str:
    """Script one scenario, keeping the others, and return its trigger."""
    kept = [s for s in model.script.scenarios if s.trigger != trigger]
    model.set_script(Script(scenarios=[*kept, Scenario(trigger=trigger, replies=list(replies))]))
    return trigger


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


async def start(
    client: Client, task_queue: str, prompt: str, **options
) -> WorkflowHandle:
    options.setdefault("llm", FAST_LLM)
    return await client.start_workflow(
        ConversationWorkflow.run,
        ConversationInput(prompt=prompt, **options),
        id=unique("conv"),
        task_queue=task_queue,
    )


async def settled(handle: WorkflowHandle, turn: int = 1, timeout_s: float = 30) -> ConversationStatus:
    """Poll the status query until `turn` needs a human, is answered, or the conversation ended."""
    deadline = time.monotonic() + timeout_s
    while True:
        status = await handle.query(ConversationWorkflow.status)
        if status.status in ("completed", "failed") or (
            status.turn >= turn and status.status in SETTLED_STATUSES
        ):
            return status
        if time.monotonic() > deadline:
            raise AssertionError(f"turn {turn} did not settle in {timeout_s}s: {status}")
        await asyncio.sleep(0.1)
