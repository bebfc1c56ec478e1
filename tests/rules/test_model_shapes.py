"""The shapes a real small model writes, as the rules read them (pure): a call written twice in
one reply, a call restated after it ran, a call announced in prose, and a question that echoes
the user or comes one too many in a row (`rules.repeats`, `rules.replies`,
`rules.text_calls.announced`, `rules.questions.not_asked`)."""

from __future__ import annotations

import json

import pytest

from durable_react_agent.contract import ChatMessage, FunctionCall, ToolCall
from durable_react_agent.contract.bounds import DEFAULT_MESSAGE_BYTES, Limits
from durable_react_agent.rules import questions, repeats, replies
from durable_react_agent.rules.text_calls import announced

TOOLS = ["get_weather", "create_note", "list_notes", "ask_input"]


def call(cid: str, name: str, args: dict | str) -> ToolCall:
    arguments = args if isinstance(args, str) else json.dumps(args)
    return ToolCall(id=cid, function=FunctionCall(name=name, arguments=arguments))


def test_the_same_call_is_the_same_whatever_the_order_and_spacing_of_its_arguments():
    a = repeats.call_key("create_note", '{"title": "t", "body": "b"}')
    assert a == repeats.call_key("create_note", '{"body":"b","title":"t"}')
    assert a == repeats.call_key("create_note", {"title": "t", "body": "b"})
    assert a != repeats.call_key("create_note", {"title": "t", "body": "B"})
    assert a != repeats.call_key("list_notes", {"title": "t", "body": "b"})
    # arguments that are no JSON, or hold what JSON cannot, still have a key
    assert repeats.call_key("x", "{not json") == repeats.call_key("x", "{not json")
    assert repeats.call_key("x", {"t": "\ud800"}) != repeats.call_key("x", {"t": "a"})


def test_identical_calls_of_a_reply_are_one():
    calls = [call("a", "create_note", {"title": "t", "body": "b"}),
             call("b", "get_weather", {"location": "Oslo"}),
             call("c", "create_note", {"body": "b", "title": "t"})]
    assert [c.id for c in repeats.distinct(calls)] == ["a", "b"]
    assert repeats.repeated_in_reply(calls) == {"c": "a"}
    assert "the same call as a in this reply" in repeats.repeat_observation("a")


def test_a_call_restated_after_it_ran_is_told_its_result():
    ran = [repeats.ran_call("create_note", {"title": "t", "body": "b"}, "call_1")]
    messages = [ChatMessage(role="tool", tool_call_id="call_1", content="Created note #3 't'.")]
    again = call("x", "create_note", '{"body": "b", "title": "t"}')
    other = call("y", "create_note", {"title": "t", "body": "other"})
    found = repeats.restated([again, other], ran)
    assert list(found) == ["x"]
    said = repeats.restated_observation(found["x"], messages)
    assert "already ran in this turn (call call_1)" in said
    assert "Its result: Created note #3 't'." in said
    assert "earlier in this conversation" in repeats.restated_observation(found["x"], [])
    long = [ChatMessage(role="tool", tool_call_id="call_1", content="r" * 10_000)]
    assert len(repeats.restated_observation(found["x"], long)) < 2_500


@pytest.mark.parametrize("text", [
    "I would call `get_weather` with Tokyo.",
    "To answer, I will use the get_weather tool for Tokyo",
    "You can call `list_notes` to see them.",
    "I'm going to run create_note with the title 'x'.",
])
def test_a_call_announced_in_prose_is_named(text: str):
    assert announced(text, TOOLS)


@pytest.mark.parametrize("text", [
    "I called `get_weather` for Tokyo: it is 18°C.",  # a recap of what ran
    "Using get_weather, I found that Tokyo is sunny.",
    "I have get_weather, list_notes and create_note.",  # naming tools is no call
    "You could use the tools. get_weather gives the weather.",  # another sentence
    "use my_get_weather or get_weathers",  # other names
    "It is sunny in Tokyo.",
])
def test_prose_that_calls_nothing_is_left_alone(text: str):
    assert announced(text, TOOLS) == []


def test_announced_reads_at_most_a_bounded_number_of_places():
    text = "get_weather " * 10_000 + "I would call get_weather"
    assert announced(text, ["get_weather"]) == []  # past MAX_STARTS places, it stops looking


@pytest.mark.parametrize("question, said, echo", [
    ("Hello there!", "hello there", True),
    ("How are you?", "How are you", True),
    ("  HOW ARE   YOU ", "how are you?", True),
    ("What city do you want the weather for?", "what's the weather", False),
    ("Save a note titled Paris?", "save a note titled Paris weather with the forecast", False),
    ("", "hi", False),
])
def test_a_question_that_echoes_the_user_is_told_apart(question: str, said: str, echo: bool):
    assert questions.echoes(question, said) is echo


def test_a_question_is_not_asked_when_it_echoes_or_comes_one_too_many_in_a_row():
    assert questions.not_asked("Which city?", 0, ["weather please"]) is None
    assert "repeats what the user just said" in questions.not_asked("Hi!", 0, ["hi"])
    bound = questions.MAX_QUESTIONS_IN_A_ROW
    assert questions.not_asked("Which city?", bound - 1, ["weather please"]) is None
    assert f"asked {bound} questions in a row" in questions.not_asked("Which city?", bound, [])


def test_what_the_user_said_last_is_their_message_and_their_answers_since():
    asked = ChatMessage(role="assistant", tool_calls=[call("q1", "ask_input", {"message": "?"}),
                                                      call("w", "get_weather", {})])
    messages = [ChatMessage(role="user", content="earlier"),
                ChatMessage(role="user", content="hello"), asked,
                ChatMessage(role="tool", tool_call_id="q1", content="fine, you?"),
                ChatMessage(role="tool", tool_call_id="w", content="sunny")]
    assert questions.heard(messages) == ["fine, you?", "hello"]
    assert "repeats" in questions.not_asked("Fine, you?", 1, questions.heard(messages))


# ----- a reply as the loop acts on it (`rules.replies.intake`) -----

LIMITS = Limits.bounded(DEFAULT_MESSAGE_BYTES)
NOTE = {"title": "groceries", "body": "milk, eggs"}


def fence(name: str, arguments: dict) -> str:
    return "```json\n" + json.dumps({"name": name, "arguments": arguments}, indent=2) + "\n```"


def turn_of(ran: list | None = None, messages: list | None = None) -> replies.Turn:
    return replies.Turn(tools=TOOLS, seen_call_ids=[], ran=ran or [], messages=messages or [],
                        number=1, step=2)


def said(text: str) -> ChatMessage:
    return ChatMessage(role="assistant", content=text)


def test_a_call_written_twice_in_a_reply_is_one_call():
    taken = replies.intake(said(f"Saving.\n{fence('create_note', NOTE)}\n"
                                f"{fence('create_note', NOTE)}"), True, turn_of(), LIMITS)
    assert [c.function.name for c in taken.message.tool_calls] == ["create_note"]
    assert taken.from_text and taken.refused == {}


def test_a_recap_of_what_ran_is_the_answer_as_written():
    ran = [repeats.ran_call("create_note", NOTE, "call_1")]
    text = f"I called `create_note` with the following arguments:\n{fence('create_note', NOTE)}"
    taken = replies.intake(said(text), True, turn_of(ran), LIMITS)
    assert taken.message.content == text and not taken.message.tool_calls
    # without words it is no answer: the model is told the call ran, with its result
    result = [ChatMessage(role="tool", tool_call_id="call_1", content="Created note #3.")]
    bare = replies.intake(said(fence("create_note", NOTE)), True, turn_of(ran, result),
                          LIMITS)
    [call] = bare.message.tool_calls
    assert "already ran in this turn (call call_1)" in bare.refused[call.id]
    assert "Created note #3." in bare.refused[call.id]


def test_a_new_call_beside_a_restated_one_runs_and_the_restated_one_is_told():
    ran = [repeats.ran_call("get_weather", {"location": "Paris"}, "call_1")]
    text = f"{fence('get_weather', {'location': 'Paris'})}\n{fence('create_note', NOTE)}"
    taken = replies.intake(said(text), True, turn_of(ran), LIMITS)
    first, second = taken.message.tool_calls
    assert "already ran" in taken.refused[first.id] and second.id not in taken.refused


def test_identical_native_calls_of_a_reply_run_once():
    message = ChatMessage(role="assistant", tool_calls=[
        call("a", "create_note", NOTE), call("b", "create_note", NOTE)])
    taken = replies.intake(message, True, turn_of(), LIMITS)
    assert list(taken.refused) == ["b"] and "the same call as a" in taken.refused["b"]


def test_a_call_announced_in_prose_is_named_unless_its_tool_ran():
    text = "I would call `get_weather` with Tokyo."
    assert replies.intake(said(text), True, turn_of(), LIMITS).announced == ["get_weather"]
    ran = [repeats.ran_call("get_weather", {"location": "Paris"}, "call_1")]
    assert replies.intake(said(text), True, turn_of(ran), LIMITS).announced == []


def test_no_call_id_of_a_new_run_starts_with_a_dash():
    message = ChatMessage(role="assistant", tool_calls=[call("-rf", "get_weather", {})])
    assert not replies.intake(message, True, turn_of(), LIMITS).message.tool_calls[
        0].id.startswith("-")
