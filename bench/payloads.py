"""`make bench`'s Large results section: history bytes per step when every step's tool returns
1 MB, kept by reference (External Storage, the file store) and sealed (AGENT_PAYLOAD_KEYS)."""

from __future__ import annotations

import os
import time
import uuid

from bench.stack import Stack, history_of
from durable_react_agent.client.payloads import PayloadSettings, data_converter
from durable_react_agent.contract import ConversationInput
from durable_react_agent.testing import Scenario, ScriptedReply, ScriptedToolCall
from durable_react_agent.workflows.conversation import ConversationWorkflow
from tests.helpers import TEST_PAYLOAD_KEYS, TEST_PAYLOAD_KEYS_ENV, USER_TOOLS

RESULT_BYTES = 1_000_000
STEPS = (5, 20)


def large_scenarios() -> list[Scenario]:
    """`[large-N]`: N steps, each reading a 1 MB document (`tests/user_tools/big_reads.py`)."""
    def read(i: int) -> ScriptedReply:  # (each its own: a call repeated as it was is refused)
        return ScriptedReply(tool_calls=[ScriptedToolCall(name="big_document",
                                                          arguments={"size": RESULT_BYTES + i})])

    return [Scenario(trigger=f"[large-{n}]",
                     replies=[*(read(i) for i in range(n)), ScriptedReply(content="done")])
            for n in STEPS]


async def large_results(stack: Stack) -> list[tuple[str, str]]:
    store = stack.work / "payloads"
    stack.start_worker("large", AGENT_TOOLS="big_reads", AGENT_PAYLOAD_STORE=store.as_uri(),
                       AGENT_PAYLOAD_KEYS=TEST_PAYLOAD_KEYS_ENV, PYTHONPATH=os.pathsep.join(
                           [str(USER_TOOLS), os.environ.get("PYTHONPATH", "")]))
    client = await stack.client(data_converter(PayloadSettings(path=store, keys=TEST_PAYLOAD_KEYS)))
    rows = []
    for steps in STEPS:
        handle = await client.start_workflow(
            ConversationWorkflow.run, ConversationInput(prompt=f"[large-{steps}] {uuid.uuid4().hex}",
                                                        one_shot=True, max_steps=steps + 1),
            id=f"large-{steps}-{uuid.uuid4().hex[:6]}", task_queue="large")
        started = time.monotonic()
        await handle.result()
        took = time.monotonic() - started
        size, events, runs, _ = await history_of(client, handle)
        kept = sum(p.stat().st_size for p in store.rglob("*") if p.is_file())
        rows.append((f"{steps} steps of a 1 MB tool result each: history, per step, store",
                     f"{size / 1e3:,.0f} KB in {events:,} events, {runs} run{'s' * (runs > 1)}, "
                     f"{size / steps / 1e3:.1f} KB/step (flat: the results are references); "
                     f"{kept / 1e6:,.1f} MB in the store so far; {took / steps * 1000:.0f} ms/step"))
    return rows
