"""The demo's prompts against a real model (`make test-real-model`; never in CI): any
OpenAI-compatible endpoint, named by REAL_MODEL_BASE_URL and REAL_MODEL (and REAL_MODEL_API_KEY
where it needs one). `python scripts/local_model.py up` serves one on this CPU.

The model runs as one AGENT_MODELS entry made for a slow local model (long deadline and
heartbeat, `max_tokens`, free, temperature 0; its window as its server says). The tools are the
built-in ones, with Open-Meteo faked by the scripted server. What is held is the product's
contract, not the model's wit: the weather-and-note conversation completes with an approval,
no write runs before its approval, and every turn that fails says why."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import time
from collections.abc import AsyncIterator

import httpx
import pytest
import pytest_asyncio
from temporalio.client import Client, WorkflowHandle

from durable_react_agent.activities.models import ModelEntry, Models
from durable_react_agent.activities.settings import ActivitySettings
from durable_react_agent.activities.tools import default_registry
from durable_react_agent.client.render import render_status
from durable_react_agent.contract import (
    ConfirmRequest,
    ConversationStatus,
    EndRequest,
    RejectRequest,
)
from durable_react_agent.worker.app import build_worker
from durable_react_agent.workflows.conversation import ConversationWorkflow
from tests.helpers import note_rows, start, unique

BASE_URL = os.environ.get("REAL_MODEL_BASE_URL")
MODEL = os.environ.get("REAL_MODEL") or "qwen2.5-coder-1.5b-instruct"
CALL_TIMEOUT_S = float(os.environ.get("REAL_MODEL_TIMEOUT_S") or 900)

pytestmark = [
    pytest.mark.skipif(not BASE_URL, reason="set REAL_MODEL_BASE_URL (make test-real-model)"),
    pytest.mark.timeout(3600),
]
WRITES = {"create_note", "delete_note"}


@pytest_asyncio.fixture
async def real_queue(client: Client, activity_settings: ActivitySettings) -> AsyncIterator[str]:
    entry = ModelEntry(model=MODEL, base_url=BASE_URL,
                       api_key_env="REAL_MODEL_API_KEY" if os.environ.get("REAL_MODEL_API_KEY")
                       else None,
                       timeout_s=CALL_TIMEOUT_S, heartbeat_s=120, max_output_tokens=400,
                       free=True, params={"temperature": 0})
    settings = dataclasses.replace(activity_settings, models=Models({"local": entry},
                                                                    default="local"))
    queue = unique("real-model")
    async with (httpx.AsyncClient(timeout=30) as http,
                build_worker(client, queue, settings, http, default_registry())):
        yield queue


async def until_settled(handle: WorkflowHandle, turn: int) -> ConversationStatus:
    """The turn's end, or its wait for a person (a real model takes minutes)."""
    deadline = time.monotonic() + CALL_TIMEOUT_S * 3
    while time.monotonic() < deadline:
        status = await handle.query(ConversationWorkflow.status)
        if status.turn >= turn and status.status in ("idle", "waiting_for_confirmation",
                                                     "waiting_for_input", "completed"):
            return status
        await asyncio.sleep(1)
    raise AssertionError(f"turn {turn} did not settle")


def show(title: str, status: ConversationStatus) -> None:
    print(f"\n--- {title}\n{render_status(status)}", flush=True)


async def test_the_demos_weather_and_note_conversation_completes_with_an_approval(
        client: Client, real_queue: str, activity_settings: ActivitySettings):
    prompt = "Check the weather in Paris and save it as a note titled 'Paris weather'."
    handle = await start(client, real_queue, prompt)
    status = await until_settled(handle, 1)
    approved: set[str] = set()  # the calls a person approved, by tool and arguments
    for _ in range(5):
        if status.status != "waiting_for_confirmation":
            break
        show("waiting for approval", status)
        for pending in status.pending_confirmations:
            call = f"{pending.tool} {json.dumps(pending.args, sort_keys=True)}"
            # a small model restates the write that ran: it must not be put to a person again
            assert call not in approved, f"the write that ran is asked for again: {call}"
            assert not note_rows(activity_settings.data_dir, "Paris weather")  # not before it
            approved.add(call)
        await handle.signal(ConversationWorkflow.confirm, ConfirmRequest(  # as `make demo` does
            all=True, approver="real-model-test",
            seen={p.call_id: p.args_hash for p in status.pending_confirmations}))
        await asyncio.sleep(1)
        status = await until_settled(handle, 1)
    show("the turn's end", status)
    assert status.stop_reason == "answered", status.error
    assert any(call.startswith("create_note ") for call in approved)
    assert len(note_rows(activity_settings.data_dir, "Paris weather")) == 1
    await handle.signal(ConversationWorkflow.end, EndRequest())
    await handle.result()


@pytest.mark.parametrize("prompt", [
    "What's the weather in Tokyo?",
    "Save a note titled 'groceries' saying 'milk, eggs'.",
    "Delete note 3.",
    "List my notes about weather, then tell me the weather in Berlin.",
    "Hi there, how are you today?",  # small talk a small model echoed back as questions
])
async def test_the_other_demo_prompts_keep_the_contract(
        client: Client, real_queue: str, activity_settings: ActivitySettings, prompt: str):
    """Whatever the model does: a write waits (and is rejected here, so it never runs), the
    turn ends (a turn left asking the person a question is a failure), and a turn that fails
    says why."""
    before = note_rows(activity_settings.data_dir)
    handle = await start(client, real_queue, prompt)
    status = await until_settled(handle, 1)
    while status.status == "waiting_for_confirmation":
        show("waiting for approval (rejected)", status)
        assert {p.tool for p in status.pending_confirmations} <= WRITES
        await handle.signal(ConversationWorkflow.reject, RejectRequest(
            all=True, reason="not now", approver="real-model-test"))
        await asyncio.sleep(1)
        status = await until_settled(handle, 1)
    show("the turn's end", status)
    assert note_rows(activity_settings.data_dir) == before  # every write was rejected
    asked = status.pending_question
    assert status.status == "idle", (  # the turn ended: it was not left asking the person
        f"the turn did not end ({status.status})"
        + (f": it waits for an answer to {asked.message!r}" if asked else ""))
    if status.stop_reason == "llm_error":
        assert status.error, "an llm_error says why"
    await handle.signal(ConversationWorkflow.end, EndRequest())
    await handle.result()
