"""What a model (or a tool) may send that must neither freeze a worker nor fail a workflow task:
a fence and a few thousand spaces (a backtracking pattern took cubic time on it, holding the
GIL, and every replay froze the next worker again), text that is not valid Unicode (a lone
surrogate: valid JSON, but no payload, hash or size can be made of it), and call ids that
would run shell code in the commands a person is shown to paste."""

from __future__ import annotations

import shlex
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from temporalio.client import Client

from durable_react_agent.contract import SayRequest
from durable_react_agent.rules.commands import client_command
from durable_react_agent.testing import ScriptedModelServer, ScriptedReply, ScriptedToolCall
from durable_react_agent.workflows.conversation import ConversationWorkflow
from tests.api_support import ROOT
from tests.devserver import worker_env
from tests.helpers import replay, script, settled, start, tool_messages, unique
from tests.hostile_input import POISON_ANSWER, POISON_REPLY, SHELL_ID

# ----- patterns: linear, whatever the text -----


@pytest.fixture
def worker_apart(temporal_address: str, model: ScriptedModelServer,
                 tmp_path: Path) -> Iterator[str]:
    """`agent-worker` in a process of its own: one that froze would freeze that process."""
    queue = unique("poison")
    env = worker_env(temporal_address, queue, model.base_url, tmp_path / "data")
    with open(tmp_path / "worker.log", "wb") as log:
        worker = subprocess.Popen([sys.executable, "-m", "durable_react_agent.worker"], cwd=ROOT, env=env, stdout=log,
                                  stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        yield queue
    finally:
        worker.kill()  # a frozen one takes no SIGTERM
        worker.wait()


async def test_a_poison_reply_answers_at_once_and_the_worker_goes_on(
        client: Client, model: ScriptedModelServer, worker_apart: str):
    plain = script(model, unique("poison-plain"), ScriptedReply(content=POISON_REPLY))
    typed = script(model, unique("poison-typed"), ScriptedReply(content=POISON_ANSWER),
                   ScriptedReply(content='{"ok": true}'))
    handles = [await start(client, worker_apart, plain),
               await start(client, worker_apart, typed, output_schema={"type": "object"})]
    answered = await settled(handles[0], timeout_s=30)
    assert answered.final_answer == POISON_REPLY.strip()
    corrected = await settled(handles[1], timeout_s=30)
    assert corrected.final_output == {"ok": True} and corrected.turn == 1
    for handle, name in zip(handles, ("poison_reply", "poison_typed_answer"), strict=True):
        started = time.monotonic()  # a replay of it does not freeze a worker either
        await replay(handle, name)
        assert time.monotonic() - started < 10


# ----- text that is not valid Unicode -----

async def test_lone_surrogates_from_the_model_and_a_tool_are_escaped_where_they_enter(
        client: Client, odd_tools_queue: str, model: ScriptedModelServer):
    """A model writes `"\\ud800"` in a call's arguments (valid JSON) and in its text (its SDK
    decodes it to a lone surrogate), and a tool returns one: the conversation goes on, every
    such character shown as U+FFFD, and its status, history and messages serialize."""
    trigger = script(
        model, unique("surrogates"),
        ScriptedReply(content="thinking \ud800 aloud", tool_calls=[
            ScriptedToolCall(name="get_weather", arguments='{"location": "\\ud800"}', id="w"),
            ScriptedToolCall(name="odd_text", arguments="{}", id="t")]),
        ScriptedReply(content="done \udfff"))
    handle = await start(client, odd_tools_queue, trigger)
    status = await settled(handle)
    assert (status.stop_reason, status.final_answer) == ("answered", "done \ufffd")
    weather, odd = [m.content for m in await tool_messages(handle)]
    assert odd == "before \ufffd after \x00 end"
    history = await handle.query(ConversationWorkflow.history)
    assert history[-2].actions[0].input == {"location": "\ufffd"}
    for value in (status, *history, *await handle.query(ConversationWorkflow.messages)):
        value.model_dump_json().encode()  # what a client receives: valid UTF-8
    await replay(handle, "lone_surrogates_escaped")


# ----- call ids a person pastes into a shell -----

def test_a_printed_command_is_one_command_whatever_it_names():
    for hostile in (SHELL_ID, "a b", "$(reboot)", "`id`", "x'y\"z", "-rf", "\n", ""):
        line = client_command("confirm", f"conv {hostile}", hostile, then='--reason "..."')
        assert shlex.split(line) == ["agent", "confirm", f"conv {hostile}", hostile, "--reason",
                                     "..."], line


# ----- a stream cut, a usage left out -----

async def test_a_stream_cut_anywhere_is_asked_again_never_taken_as_the_reply(
        client: Client, task_queue: str, model: ScriptedModelServer):
    """The endpoint drops the connection mid-stream: in a word of the answer, in a tool call's
    arguments, between chunks. Each cut attempt is asked again; what came before a cut is never
    an answer, and a call half-streamed never runs."""
    answer = "The forecast for Paris is sunny with a light breeze all afternoon."
    trigger = script(model, unique("cut"), ScriptedReply(
        tool_calls=[ScriptedToolCall(name="get_weather", arguments={"location": "Paris"})],
        cut_at=[150, 300, 420]), ScriptedReply(content=answer, cut_at=[1, 200]))
    handle = await start(client, task_queue, trigger)
    status = await settled(handle, timeout_s=60)
    assert (status.stop_reason, status.final_answer) == ("answered", answer)
    assert status.llm_calls == 2 and model.count(trigger) == 7  # 5 cut, 2 whole
    [weather] = [m.content for m in await tool_messages(handle)]
    assert "Paris" in weather
    await replay(handle, "stream_cut_and_asked_again")


async def test_usage_left_out_or_null_counts_what_the_endpoint_did_say(
        client: Client, task_queue: str, model: ScriptedModelServer):
    trigger = script(model, unique("usage"), ScriptedReply(
        content="one", usage_patch={"total_tokens": None, "completion_tokens": "7"},
        usage_missing=["prompt_tokens_details"]),
        ScriptedReply(content="two", usage_missing=["prompt_tokens", "total_tokens"]))
    handle = await start(client, task_queue, trigger)
    assert (await settled(handle)).final_answer == "one"
    await handle.signal(ConversationWorkflow.say, SayRequest(text="again"))
    status = await settled(handle, turn=2)
    assert status.final_answer == "two"
    first, second = status.turns
    assert first.usage.total_tokens == first.usage.prompt_tokens > 0  # null total: the parts
    assert second.usage.prompt_tokens == 0 < second.usage.total_tokens  # what it did report
