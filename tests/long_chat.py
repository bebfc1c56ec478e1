"""A long chat driven through a real worker and the scripted model: the test of bounded context
and the benchmark that reports prompt tokens per turn both run it."""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass

from temporalio.client import Client, WorkflowHandle

from durable_react_agent.contract import ConversationStatus, SayRequest
from durable_react_agent.testing import ScriptedModelServer, ScriptedReply
from durable_react_agent.testing.script import usage
from durable_react_agent.workflows.conversation import ConversationWorkflow
from tests.helpers import script, settled, start, unique

BATCH = 40  # messages sent at once: within the conversation's queue bound


def message(trigger: str, i: int, size: int) -> str:
    """Message `i`: the trigger (so the scripted model knows the conversation), then filler."""
    head = f"{trigger} message {i}: "
    digest = hashlib.sha256(head.encode()).hexdigest()
    return head + (digest * (size // len(digest) + 1))[: size - len(head)]


@dataclass
class Request:
    """One request the model server received: a chat step of turn `turn`, or a summary."""

    kind: str
    turn: int
    prompt_tokens: int  # as the scripted endpoint counts them
    latest_turn_tokens: int  # of which, the latest turn's user message


@dataclass
class LongChat:
    handle: WorkflowHandle
    status: ConversationStatus
    requests: list[Request]
    texts: list[str]


def prompt_tokens(body: dict) -> int:
    return usage(body["messages"], body.get("tools"), ScriptedReply())["prompt_tokens"]


async def run_long_chat(client: Client, task_queue: str, model: ScriptedModelServer, turns: int,
                        size: int, budget: int, timeout_s: float = 600) -> LongChat:
    """`turns` turns of `size`-byte messages, each answered with an echo, with `budget` tokens."""
    trigger = unique("longchat")
    script(model, trigger, *[ScriptedReply(content="echo: {last_user}") for _ in range(turns + 5)])
    texts = [message(trigger, i, size) for i in range(1, turns + 1)]
    handle = await start(client, task_queue, texts[0], context_budget_tokens=budget)
    await settled(handle, turn=1, timeout_s=timeout_s)
    sent = 1
    while sent < turns:
        batch = texts[sent: sent + BATCH]
        for i, text in enumerate(batch, start=sent + 1):
            await handle.signal(ConversationWorkflow.say, SayRequest(text=text, request_id=f"m{i}"))
        sent += len(batch)
        await settled(handle, turn=sent, timeout_s=timeout_s)
    status = await settled(handle, turn=turns, timeout_s=timeout_s)
    by_text = {t: i for i, t in enumerate(texts, start=1)}
    requests = []
    for r in model.requests:
        if r.trigger != trigger:
            continue
        users = [m for m in r.body["messages"] if m.get("role") == "user"]
        last = users[-1]["content"] if users else ""
        requests.append(Request(
            kind=r.kind, turn=by_text.get(last, 0), prompt_tokens=prompt_tokens(r.body),
            latest_turn_tokens=math.ceil(len(last) / 4) if r.kind == "chat" else 0,
        ))
    return LongChat(handle, status, requests, texts)
