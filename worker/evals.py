"""The worker of an eval (`agent eval`): the conversation workflow and the model calls
as every worker runs them, on the eval's own task queue, with tool runs answered from the cases.

A call whose tool and arguments the case recorded gets the recorded observation; any other call
gets an observation saying it was not run, or, with `live_safe`, runs for real if its tool is
safe. No tool that is not safe ever runs in an eval. Memory recall, webhooks and four eyes are
off: a case is answered from itself, and the eval decides as the case's people did."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager

import httpx
import openai
import structlog
from temporalio import activity
from temporalio.client import Client

from ..activities.llm import LLMActivities
from ..activities.settings import ActivitySettings
from ..activities.tool_runner import ToolActivities, bounded, whole_key
from ..activities.tools import ToolRegistry
from ..contract import (
    LIST_TOOLS_ACTIVITY,
    ToolInvocation,
    ToolListRequest,
    ToolOutcome,
    WorkerHandshake,
)
from ..rules.cases import RecordedTools
from .app import build_worker, model_workers

log = structlog.get_logger()


class CaseTools(ToolActivities):
    """Tool runs answered from the case of the conversation that makes them (by its id)."""

    def __init__(self, books: dict[str, RecordedTools], live_safe: bool, registry: ToolRegistry,
                 settings: ActivitySettings, http: httpx.AsyncClient) -> None:
        super().__init__(registry, settings, http)
        self._books = books
        self._live_safe = live_safe

    @activity.defn(name=LIST_TOOLS_ACTIVITY)
    async def list_tools(self, request: ToolListRequest | None = None) -> WorkerHandshake:
        """The worker's tools, each answered as a recorded one: a subagent's call too (its
        result is what the parent saw)."""
        handshake = await super().list_tools(request)
        tools = [t.model_copy(update={"agent": None}) for t in handshake.tools]
        return handshake.model_copy(update={"tools": tools, "webhooks": [], "memory": False})

    async def _run(self, name: str, invocation: ToolInvocation) -> ToolOutcome:
        book = self._books.get(activity.info().workflow_id)
        recorded = book.result(name, invocation.arguments) if book is not None else None
        if recorded is not None:
            log.info("tool answered from the case", tool=name)
            # bounded as the tool's own result is: a whole result kept in the case is cut for
            # the model again, and kept whole by reference again
            return bounded(ToolOutcome(observation=recorded), invocation.max_observation_bytes,
                           whole_key(invocation))
        spec = self._registry.get(name)
        if self._live_safe and spec is not None and spec.risk == "safe":
            log.info("tool not in the case: run live (safe)", tool=name)
            return await super()._run(name, invocation)
        args = json.dumps(invocation.arguments, ensure_ascii=False, sort_keys=True)
        log.info("tool not in the case: not run", tool=name)
        return ToolOutcome(status="error", observation=(
            f"Error: {name} was not run: the case being evaluated recorded no call of it with "
            f"these arguments ({args}), and an eval runs no tool it did not record."))


def eval_settings(settings: ActivitySettings) -> ActivitySettings:
    """The worker's settings for an eval: no memory recall, no webhooks, no four eyes."""
    return dataclasses.replace(settings, memory=False, webhooks=None, four_eyes=())


@asynccontextmanager
async def eval_worker(client: Client, task_queue: str, settings: ActivitySettings,
                      registry: ToolRegistry, books: dict[str, RecordedTools],
                      live_safe: bool = False) -> AsyncIterator[None]:
    """Run an eval's workers on its own task queue while the block runs: `registry`'s tools,
    answered from `books` (by conversation id), and the model calls of its rate-limited model
    entries on their own queues, as `agent-worker` serves them."""
    quiet = eval_settings(settings)
    async with httpx.AsyncClient(timeout=30) as http, AsyncExitStack() as stack:
        tools = CaseTools(books, live_safe, registry, quiet, http)
        llm = LLMActivities(quiet, temporal=client)
        workers = [build_worker(client, task_queue, quiet, http, registry, llm=llm,
                                sandboxed=False, tools=tools),
                   *model_workers(client, task_queue, quiet, llm)]
        for worker in workers:
            await stack.enter_async_context(worker)
        yield


JUDGE_MARK = "[eval judge]"  # the judge's request begins with it (a scripted model keys on it)
JUDGE_SYSTEM = ("You grade an AI assistant's answer against a reference answer to the same "
                "request. Reply PASS if the new answer says what the reference says (wording may "
                "differ), else FAIL; then one short sentence why.")


async def judge(settings: ActivitySettings, entry: str | None, request: str, reference: str,
                answer: str) -> tuple[bool, str]:
    """An LLM judge: whether `answer` says what `reference` says, by the model entry `entry`
    (AGENT_MODELS; None: the default; another name: that model on the default endpoint); its
    verdict and its words."""
    entry, spec = settings.model_entries().resolve(entry)
    client = openai.AsyncOpenAI(api_key=settings.api_key(spec), base_url=spec.base_url)
    try:
        reply = await client.chat.completions.create(model=spec.model, temperature=0, messages=[
            {"role": "system", "content": JUDGE_SYSTEM},
            {"role": "user", "content": f"{JUDGE_MARK}\nRequest: {request}\n\nReference answer:\n"
                                        f"{reference}\n\nNew answer:\n{answer}"}])
    except openai.OpenAIError as err:
        return False, f"the judge ({entry}) could not be asked: {err}"
    finally:
        await client.close()
    words = (reply.choices[0].message.content or "").strip()
    return words.upper().startswith("PASS"), f"the judge ({entry}) said: {words[:300]}"
