"""Real models' replies, through real conversations: the recorded cassettes of a local model
(llama.cpp's server running Qwen2.5-Coder-1.5B: `tests/cassettes/`) and the shapes of the major
open models' chat templates, served byte for byte by the scripted model. Each shape's calls
run (only the offered tools'), a write written in prose waits for approval, a call written in a
shape that cannot be read is reminded once and then reported, a parse failure of the server is
asked again a few times and then reported with why, and a message past the model's window is
left out while the conversation goes on."""

from __future__ import annotations

import io
import json
import uuid

import pytest
from temporalio.client import Client, WorkflowUpdateFailedError
from temporalio.contrib.workflow_streams import WorkflowStreamClient

from durable_react_agent.client.watch import Renderer
from durable_react_agent.contract import (
    AnswerRequest,
    ConfirmRequest,
    EndRequest,
    SayRequest,
    StreamEvent,
)
from durable_react_agent.contract.names import EVENTS_TOPIC, TOKENS_TOPIC
from durable_react_agent.rules.questions import MAX_QUESTIONS_IN_A_ROW
from durable_react_agent.testing import ScriptedModelServer, ScriptedReply
from durable_react_agent.workflows.conversation import ConversationWorkflow
from tests.cassette_support import cassette, recorded
from tests.helpers import (
    note_rows,
    outcome_of,
    reaches,
    replay,
    script,
    settled,
    start,
    tool_call,
    unique,
)

# Each shape, and the calls it holds (the tools the test worker offers).
SHAPES = {
    "fence_only": ["get_weather"],  # recorded: a ```json fence and nothing else
    "double_braces": ["get_weather"],  # recorded: `{{...}}`, after Qwen's template's typo
    "tools_wrapper_multiline": ["list_notes", "get_weather"],  # recorded: <tools>, one per line
    "hermes_tool_call_tags": ["get_weather", "list_notes"],  # Hermes / Qwen's <tool_call>
    "mistral_tool_calls": ["get_weather"],  # [TOOL_CALLS] [...]
    "llama_python_tag": ["get_weather"],  # Llama 3.1's <|python_tag|>
    "llama_function_tag": ["get_weather"],  # Llama's <function=name>{...}</function>
    "llama_parameters_list": ["get_weather", "list_notes"],  # [{"name", "parameters"}, ...]
    "pythonic_calls": ["get_weather", "list_notes"],  # Llama 3.2's [name(k=v), ...]
    "two_calls_on_two_lines": ["get_weather", "list_notes"],  # one JSON object per line
}


async def stream_events(client: Client, workflow_id: str) -> list[StreamEvent]:
    stream = WorkflowStreamClient.create(client, workflow_id)
    return [item.data async for item in stream.subscribe(
        [EVENTS_TOPIC, TOKENS_TOPIC], result_type=StreamEvent)]


def watched(events: list[StreamEvent]) -> str:
    out = io.StringIO()
    renderer = Renderer("conv", out)
    for e in events:
        renderer.render(e)
    return out.getvalue()


@pytest.mark.parametrize("shape", sorted(SHAPES))
async def test_each_shape_runs_its_calls_and_watch_takes_back_the_text(
        client: Client, task_queue: str, model: ScriptedModelServer, shape: str):
    trigger = script(model, unique(shape), recorded(shape), ScriptedReply(content="All done."))
    handle = await start(client, task_queue, trigger, one_shot=True)
    status = await handle.result()
    assert (status.stop_reason, status.final_answer, status.error) == ("answered", "All done.",
                                                                       None)
    assert status.tools_used == SHAPES[shape]
    # what the model was shown next: its calls, as calls, each answered
    second = [r for r in model.requests if r.trigger == trigger][-1].body["messages"]
    calls = [c["function"]["name"] for m in second if m["role"] == "assistant"
             for c in m.get("tool_calls") or []]
    assert calls == SHAPES[shape]
    assert sum(m["role"] == "tool" for m in second) == len(calls)
    # watch streamed the call as text, then took it back before showing it as a call
    events = await stream_events(client, handle.id)
    kinds = [e.kind for e in events]
    reset = kinds.index("reset")
    assert "token" in kinds[:reset] and kinds.index("tool_started") > reset
    assert "they run as calls" in events[reset].text
    shown = watched(events)
    assert "discard the text above" in shown
    after = shown[shown.index("discard the text above"):]
    assert '"location"' not in after.split("→")[0]  # the call's text is not shown again


async def test_a_write_described_in_prose_waits_for_approval(
        client: Client, task_queue: str, model: ScriptedModelServer, activity_settings):
    """The recorded reply that ended "answered" with nothing done: a plan in prose, then the
    `create_note` call in a fence. It waits for approval, and runs once it is given."""
    trigger = script(model, unique("prose"), recorded("prose_then_fence"),
                     ScriptedReply(content="Saved: {last_tool}"))
    handle = await start(client, task_queue, f"{trigger} Save a note titled 'groceries'.")
    waiting = await reaches(handle, "waiting_for_confirmation")
    [pending] = waiting.pending_confirmations
    assert (pending.tool, pending.args, pending.risk) == (
        "create_note", {"title": "groceries", "body": "milk, eggs"}, "sensitive")
    before = len(note_rows(activity_settings.data_dir, "groceries"))
    messages = await handle.query(ConversationWorkflow.messages)
    said = [m for m in messages if m.role == "assistant"][-1]
    assert said.content.startswith("Let's go through this step-by-step")  # its words stay
    assert "```" not in said.content and said.tool_calls[0].function.name == "create_note"
    await handle.signal(ConversationWorkflow.confirm, ConfirmRequest(
        request_id=(r := uuid.uuid4().hex), call_ids=[pending.call_id], approver="alice"))
    assert (await outcome_of(handle, r)).accepted
    done = await settled(handle)
    assert done.final_answer.startswith("Saved: Created note #")
    assert len(note_rows(activity_settings.data_dir, "groceries")) == before + 1
    await handle.signal(ConversationWorkflow.end, EndRequest())
    await handle.result()
    await replay(handle, record_as="call_written_in_prose_waits_for_approval")


async def test_a_destructive_call_in_a_fence_waits_too(
        client: Client, task_queue: str, model: ScriptedModelServer):
    trigger = script(model, unique("destroy"), recorded("fence_destructive"),
                     ScriptedReply(content="Left alone."))
    handle = await start(client, task_queue, trigger)
    [pending] = (await reaches(handle, "waiting_for_confirmation")).pending_confirmations
    assert (pending.tool, pending.risk) == ("delete_note", "destructive")
    await handle.signal(ConversationWorkflow.end, EndRequest())
    await handle.result()


async def test_only_offered_tools_run_from_text(
        client: Client, task_queue: str, model: ScriptedModelServer):
    """A call of a tool that was not offered is the model's words, not a call (and no
    reminder: there is nothing it could call)."""
    text = ('<tool_call>\n{"name": "send_email", "arguments": {"to": "boss@example.com"}}\n'
            '</tool_call>')
    trigger = script(model, unique("unoffered"), ScriptedReply(content=text))
    status = await (await start(client, task_queue, trigger, one_shot=True)).result()
    assert (status.stop_reason, status.tools_used, status.error) == ("answered", [], None)
    assert status.final_answer == text
    assert len([r for r in model.requests if r.trigger == trigger]) == 1


async def test_a_call_that_cannot_be_read_is_reminded_once_then_reported(
        client: Client, task_queue: str, model: ScriptedModelServer):
    """A fence cut at max_tokens (recorded) names get_weather but cannot be read. The model is
    told once how to call it; writing it so again, the turn says the call did not run."""
    trigger = script(model, unique("unread"), recorded("fence_cut_at_max_tokens"),
                     recorded("fence_cut_at_max_tokens"))
    handle = await start(client, task_queue, trigger, one_shot=True)
    status = await handle.result()
    assert (status.stop_reason, status.tools_used) == ("answered", [])
    assert "wrote a call of get_weather" in status.error and "did not run" in status.error
    requests = [r for r in model.requests if r.trigger == trigger]
    assert len(requests) == 2  # reminded once, not again
    reminder = requests[1].body["messages"][-1]
    assert reminder["role"] == "user" and "no tool ran" in reminder["content"]
    assert '"name": "get_weather"' in reminder["content"]  # a shape that is read
    events = await stream_events(client, handle.id)
    finished = [e for e in events if e.kind == "turn_finished"][-1]
    assert "did not run" in finished.error
    assert "error: the model wrote a call of get_weather" in watched(events)
    await replay(handle, record_as="unread_call_reminded_then_reported")


async def test_after_the_reminder_a_proper_call_runs(
        client: Client, task_queue: str, model: ScriptedModelServer):
    trigger = script(model, unique("reminded"), recorded("fence_cut_at_max_tokens"),
                     ScriptedReply(tool_calls=[tool_call("get_weather", {"location": "Oslo"})]),
                     ScriptedReply(content="Oslo: {last_tool}"))
    status = await (await start(client, task_queue, trigger, one_shot=True)).result()
    assert (status.stop_reason, status.tools_used, status.error) == (
        "answered", ["get_weather"], None)


async def test_a_parse_failure_in_the_stream_is_asked_again_then_reported_with_a_hint(
        client: Client, task_queue: str, model: ScriptedModelServer):
    """llama.cpp's parser failure, an error event inside the stream: asked 3 times (not the six
    attempts, each with a traceback, of a transient error), then the turn says how often and
    what to change. The conversation takes the next message."""
    trigger = script(model, unique("peg"), ScriptedReply(
        raw=cassette("midstream_format_error"), raw_hits=3, content="Fine now."))
    handle = await start(client, task_queue, trigger)
    failed = await settled(handle)
    assert failed.stop_reason == "llm_error"
    assert "could not parse the model's reply 3 times" in failed.error
    assert "peg-native format" in failed.error and "without its own tool parser" in failed.error
    assert failed.usage.failed_calls == 1 and failed.usage.total_tokens == 0
    assert len([r for r in model.requests if r.trigger == trigger]) == 3
    await handle.signal(ConversationWorkflow.say, SayRequest(text="try again", request_id="m2"))
    again = await settled(handle, turn=2)
    assert (again.stop_reason, again.final_answer) == ("answered", "Fine now.")
    await handle.signal(ConversationWorkflow.end, EndRequest())
    events = await stream_events(client, handle.id)
    [first, _] = [e for e in events if e.kind == "turn_finished"]
    assert "3 times" in first.error
    shown = watched(events)
    assert "turn 1 finished: llm_error" in shown and "error: model call failed" in shown
    assert shown.count("the model call is retried") == 2
    await replay(handle, record_as="format_error_asked_again_then_reported")


async def test_a_message_past_the_window_is_left_out_and_the_next_one_answered(
        client: Client, task_queue: str, model: ScriptedModelServer):
    """The recorded llama.cpp refusal (9,030 tokens of an 8,192-token window) of a ~40 KB
    message. Nothing folds it away, so it is left out with a note, the turn says so, and the
    next message is answered; one as long is then refused when it is sent."""
    trigger = unique("huge")
    long = f"{trigger} " + "lorem ipsum dolor sit amet " * 1500
    script(model, trigger, recorded("context_too_long"))
    handle = await start(client, task_queue, long)
    failed = await settled(handle)
    assert failed.stop_reason == "llm_error"
    assert "it was left out, and the conversation goes on without it" in failed.error
    assert "of its 8,192-token window" in failed.error
    assert (failed.context.window_tokens, failed.context.budget_tokens) == (8192, 7168)
    assert failed.usage.failed_calls == 1
    assert len([r for r in model.requests if r.trigger == trigger]) == 1  # not asked again
    await handle.signal(ConversationWorkflow.say, SayRequest(text="What is 2+2?",
                                                             request_id="m2"))
    answered = await settled(handle, turn=2)
    assert answered.stop_reason == "answered" and answered.final_answer
    shown = model.requests[-1].body["messages"]
    assert all("lorem ipsum" not in json.dumps(m) for m in shown)
    assert "was left out here" in json.dumps(shown)
    with pytest.raises(WorkflowUpdateFailedError) as refused:  # as the API and CLI send it
        await handle.execute_update(ConversationWorkflow.send_message,
                                    SayRequest(text=long, request_id="m3"))
    assert "more than the model can read" in str(refused.value.cause)
    await handle.signal(ConversationWorkflow.say, SayRequest(text=long, request_id="m3"))
    outcome = await outcome_of(handle, "m3")
    assert not outcome.accepted and "more than the model can read" in outcome.reason
    assert (await handle.query(ConversationWorkflow.status)).turn == 2
    await handle.signal(ConversationWorkflow.end, EndRequest())
    await handle.result()
    await replay(handle, record_as="message_past_the_window_left_out")


# ----- what a small model writes again: the recap, the call in prose, the echoing question -----

RECAP_WORDS = "I called `create_note` with the following arguments:"
NOTE = {"title": "groceries", "body": "milk, eggs"}


def fence(name: str, arguments: dict) -> str:
    return "```json\n" + json.dumps({"name": name, "arguments": arguments}, indent=2) + "\n```"


async def approved(handle, call_id: str) -> None:
    await handle.signal(ConversationWorkflow.confirm, ConfirmRequest(
        request_id=(r := uuid.uuid4().hex), call_ids=[call_id], approver="alice"))
    assert (await outcome_of(handle, r)).accepted


async def test_a_call_restated_in_its_recap_is_written_once_and_the_recap_is_the_answer(
        client: Client, task_queue: str, model: ScriptedModelServer, activity_settings):
    """The write, in a fence, written twice in one reply: one call waits. Approved, it runs;
    the model then recaps it in a fence, as Qwen does: that is its answer, and no second note
    is put before anyone, let alone written."""
    title = unique("groceries")
    note = {**NOTE, "title": title}
    trigger = script(model, unique("recap"),
                     ScriptedReply(content=f"Saving it.\n{fence('create_note', note)}\n"
                                           f"{fence('create_note', note)}"),
                     ScriptedReply(content=f"{RECAP_WORDS}\n{fence('create_note', note)}\n"
                                           "The note has been saved."))
    handle = await start(client, task_queue, f"{trigger} Save a note.")
    [pending] = (await reaches(handle, "waiting_for_confirmation")).pending_confirmations
    await approved(handle, pending.call_id)
    done = await settled(handle)
    assert (done.stop_reason, done.error) == ("answered", None)
    assert done.final_answer.startswith(RECAP_WORDS) and "has been saved" in done.final_answer
    assert len(note_rows(activity_settings.data_dir, title)) == 1
    assert [d.call_id for d in done.decisions] == [pending.call_id]
    assert len([r for r in model.requests if r.trigger == trigger]) == 2
    await handle.signal(ConversationWorkflow.end, EndRequest())
    await handle.result()
    await replay(handle, record_as="restated_call_written_once")


async def test_a_bare_restated_call_is_told_it_ran_with_its_result(
        client: Client, task_queue: str, model: ScriptedModelServer, activity_settings):
    """A restated call with no words around it is no answer: the model reads that it ran,
    and its result, instead of a second approval."""
    title = unique("bare")
    note = {**NOTE, "title": title}
    trigger = script(model, unique("bare-recap"),
                     ScriptedReply(content=fence("create_note", note)),
                     ScriptedReply(content=fence("create_note", note)),
                     ScriptedReply(content="Done: the note is saved."))
    handle = await start(client, task_queue, f"{trigger} Save a note.")
    [pending] = (await reaches(handle, "waiting_for_confirmation")).pending_confirmations
    await approved(handle, pending.call_id)
    done = await settled(handle)
    assert (done.stop_reason, done.final_answer) == ("answered", "Done: the note is saved.")
    assert len(note_rows(activity_settings.data_dir, title)) == 1
    told = [r for r in model.requests if r.trigger == trigger][-1].body["messages"][-1]
    assert told["role"] == "tool" and "already ran in this turn" in told["content"]
    assert f"Its result: Created note #" in told["content"]
    await handle.signal(ConversationWorkflow.end, EndRequest())
    await handle.result()


async def test_a_call_announced_in_prose_is_reminded_and_then_runs(
        client: Client, task_queue: str, model: ScriptedModelServer):
    """The recorded "you can call the `get_weather` function with the location "Berlin"" is no
    answer: the model is told that words are no call, and how to make one."""
    trigger = script(model, unique("would-call"), recorded("call_announced_in_prose"),
                     ScriptedReply(tool_calls=[tool_call("get_weather", {"location": "Berlin"})]),
                     ScriptedReply(content="Berlin: {last_tool}"))
    status = await (await start(client, task_queue, trigger, one_shot=True)).result()
    assert (status.stop_reason, status.tools_used, status.error) == (
        "answered", ["get_weather"], None)
    reminder = [r for r in model.requests if r.trigger == trigger][1].body["messages"][-1]
    assert reminder["role"] == "user" and "words are not a call" in reminder["content"]


async def test_a_call_announced_again_after_the_reminder_is_the_answer(
        client: Client, task_queue: str, model: ScriptedModelServer):
    """Reminded once, a model that still only says what it would call has answered: no error
    that a call was written and not run (it wrote none)."""
    trigger = script(model, unique("would-call-twice"),
                     ScriptedReply(content="I would call `get_weather` with Tokyo."),
                     ScriptedReply(content="I would call `get_weather` with Tokyo."))
    status = await (await start(client, task_queue, trigger, one_shot=True)).result()
    assert (status.stop_reason, status.error) == ("answered", None)
    assert status.final_answer == "I would call `get_weather` with Tokyo."


async def test_a_question_that_echoes_small_talk_is_not_asked(
        client: Client, task_queue: str, model: ScriptedModelServer):
    """The recorded ask_input of the user's own "Hi there, how are you today?", as the small
    model asked small talk back, five times over: not put to the user; the model reads why,
    and answers."""
    trigger = script(model, "Hi there, how are you today?", recorded("echoed_small_talk"),
                     ScriptedReply(content="Hello! How can I help?"))
    handle = await start(client, task_queue, trigger)
    done = await settled(handle)
    assert (done.status, done.final_answer) == ("idle", "Hello! How can I help?")
    told = [r for r in model.requests if r.trigger == trigger][-1].body["messages"][-1]
    assert told["role"] == "tool" and "repeats what the user just said" in told["content"]
    await handle.signal(ConversationWorkflow.end, EndRequest())
    await handle.result()
    events = await stream_events(client, handle.id)  # (whole, once the conversation ended)
    assert "question_asked" not in [e.kind for e in events]
    await replay(handle, record_as="echoed_question_not_asked")


async def test_questions_in_a_row_are_bounded(
        client: Client, task_queue: str, model: ScriptedModelServer):
    trigger = script(model, unique("asks"), *[
        ScriptedReply(tool_calls=[tool_call("ask_input", {"message": f"Question {n}?"})])
        for n in range(1, MAX_QUESTIONS_IN_A_ROW + 2)], ScriptedReply(content="Enough questions."))
    handle = await start(client, task_queue, trigger)
    for n in range(1, MAX_QUESTIONS_IN_A_ROW + 1):
        asked = await reaches(handle, "waiting_for_input")
        assert asked.pending_question.message == f"Question {n}?"
        await handle.signal(ConversationWorkflow.answer, AnswerRequest(
            request_id=uuid.uuid4().hex, values=[f"answer {n}"]))
        await reaches(handle, "running")
    done = await settled(handle)
    assert done.final_answer == "Enough questions."
    told = [r for r in model.requests if r.trigger == trigger][-1].body["messages"][-1]
    assert f"asked {MAX_QUESTIONS_IN_A_ROW} questions in a row" in told["content"]
    await handle.signal(ConversationWorkflow.end, EndRequest())
    await handle.result()
