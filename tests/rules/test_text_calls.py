"""Tool calls a model wrote as text (`rules.text_calls`, `repair.calls_from_text`),
without a server: each shape the open models write, read from the recorded and built cassettes
and from inline replies; only offered tools' calls taken, the words around them kept, a call
that cannot be read named as unread; arguments left for the tool's schema to judge; and bounded,
linear time on hostile text."""

from __future__ import annotations

import json
import string
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from durable_react_agent.contract import ChatMessage, FunctionCall, ToolCall
from durable_react_agent.contract.bounds import MAX_REPLY_TEXT_BYTES
from durable_react_agent.rules import loop
from durable_react_agent.rules.repair import calls_from_text
from durable_react_agent.rules.text_calls import MARKERS, TextCalls, WrittenCall, calls_in_text
from tests.fake_tools import registry_with_test_tools

CASSETTES = Path(__file__).parents[1] / "cassettes"
CATALOG = {t.name: t for t in registry_with_test_tools().definitions()}
OFFERED = sorted(CATALOG)
ROME = {"location": "Rome"}
NOTES = {"query": "rome"}


def cassette_text(name: str) -> str:
    """The assistant text a recorded (or built) streamed reply holds: its content deltas joined."""
    reply = json.loads((CASSETTES / f"{name}.json").read_text())["reply"]
    parts = []
    for line in reply["body"].split("\n"):
        if line.startswith("data: ") and line != "data: [DONE]":
            for choice in json.loads(line[len("data: "):]).get("choices", []):
                parts.append(choice["delta"].get("content") or "")
    return "".join(parts)


def read(text: str) -> TextCalls:
    return calls_in_text(text, OFFERED)


def pairs(found: TextCalls) -> list[tuple[str, dict]]:
    return [(c.name, c.arguments) for c in found.calls]


def reply(text: str) -> ChatMessage:
    return ChatMessage(role="assistant", content=text)


# ----- the cassettes: what each recorded or built reply holds -----

CASSETTE_CALLS = {
    "fence_only": [("get_weather", {"location": "Tokyo"})],
    "double_braces": [("get_weather", {"location": "Oslo"})],
    "tools_wrapper_multiline": [("list_notes", {"query": "weather"}),
                                ("get_weather", {"location": "Berlin"})],
    "hermes_tool_call_tags": [("get_weather", ROME), ("list_notes", NOTES)],
    "mistral_tool_calls": [("get_weather", ROME)],
    "llama_python_tag": [("get_weather", ROME)],
    "llama_function_tag": [("get_weather", ROME)],
    "llama_parameters_list": [("get_weather", ROME), ("list_notes", NOTES)],
    "pythonic_calls": [("get_weather", ROME), ("list_notes", NOTES)],
    "two_calls_on_two_lines": [("get_weather", ROME), ("list_notes", NOTES)],
    "prose_then_fence": [("create_note", {"title": "groceries", "body": "milk, eggs"})],
    "fence_destructive": [("delete_note", {"note_id": 3})],
}


@pytest.mark.parametrize("name", sorted(CASSETTE_CALLS))
def test_each_cassette_yields_its_calls_in_order(name: str):
    found = read(cassette_text(name))
    assert pairs(found) == CASSETTE_CALLS[name]
    assert found.unread == []


@pytest.mark.parametrize("name", sorted(set(CASSETTE_CALLS) - {"hermes_tool_call_tags",
                                                               "prose_then_fence"}))
def test_a_reply_of_calls_only_leaves_no_words(name: str):
    """What wraps the calls (tags, fences, a list's brackets, doubled braces) is no words."""
    assert read(cassette_text(name)).words is None


def test_the_words_around_recorded_calls_stay_the_assistants():
    assert read(cassette_text("hermes_tool_call_tags")).words == "I'll check both."
    words = read(cassette_text("prose_then_fence")).words
    assert words.startswith("Let's go through this step-by-step:")
    assert words.endswith("Therefore, the final answer is:")
    assert "```" not in words and '"name"' not in words
    # the arguments quoted in the prose are no call: they stay words
    assert '`{"title": "groceries", "body": "milk, eggs"}`' in words


def test_a_call_with_doubled_braces_in_its_arguments_is_read_as_written():
    """The recorded `<tools>` reply whose note body holds `{{get_weather.location}}`: read in
    the first pass, so the braces of the body are not undoubled."""
    found = read(cassette_text("tools_wrapper_two_calls"))
    assert [c.name for c in found.calls] == ["get_weather", "create_note"]
    assert found.calls[0].arguments == {"location": "Paris"}
    assert found.calls[1].arguments["title"] == "Paris weather"
    assert found.calls[1].arguments["body"].startswith("{{get_weather.location}}: Temperature")


def test_a_fence_cut_at_max_tokens_is_unread_and_its_text_unchanged():
    text = cassette_text("fence_cut_at_max_tokens")
    found = read(text)
    assert (found.calls, found.words, found.unread) == ([], text, ["get_weather"])
    message, unread = calls_from_text(reply(text), OFFERED)
    assert message == reply(text) and unread == ["get_weather"]


def test_calls_from_text_makes_calls_the_workflow_can_check():
    message, unread = calls_from_text(reply(cassette_text("hermes_tool_call_tags")), OFFERED)
    assert unread == [] and message.content == "I'll check both."
    assert [(c.function.name, json.loads(c.function.arguments)) for c in message.tool_calls] \
        == [("get_weather", ROME), ("list_notes", NOTES)]
    assert all(c.id == "" for c in message.tool_calls)  # given later, by unique_call_ids
    ready = [loop.check_tool_call(c, CATALOG) for c in message.tool_calls]
    assert all(isinstance(r, loop.ReadyCall) for r in ready)


# ----- every shape, with words around it -----

SHAPES = {
    "json": '{"name": "get_weather", "arguments": {"location": "Oslo"}}',
    "fence": '```json\n{"name": "get_weather", "arguments": {"location": "Oslo"}}\n```',
    "tool_code_fence": '```tool_code\n{"name": "get_weather", "arguments": {"location": "Oslo"}}'
                       '\n```',
    "hermes": '<tool_call>\n{"name": "get_weather", "arguments": {"location": "Oslo"}}\n'
              '</tool_call>',
    "tools_wrapper": '<tools>\n{"name": "get_weather", "arguments": {"location": "Oslo"}}\n'
                     '</tools>',
    "mistral": '[TOOL_CALLS] [{"name": "get_weather", "arguments": {"location": "Oslo"}}]',
    "python_tag": '<|python_tag|>{"name": "get_weather", "parameters": {"location": "Oslo"}}'
                  '<|eom_id|>',
    "function_tag": '<function=get_weather>{"location": "Oslo"}</function>',
    "pythonic": 'get_weather(location="Oslo")',
    "openai_shape": '{"id": "call_1", "type": "function", "function": {"name": "get_weather", '
                    '"arguments": "{\\"location\\": \\"Oslo\\"}"}}',
    "tool_calls_key": '{"tool_calls": [{"name": "get_weather", "args": {"location": "Oslo"}}]}',
    "input_key": '{"name": "get_weather", "input": {"location": "Oslo"}}',
    "arguments_as_text": '{"name": "get_weather", "arguments": "{\\"location\\": \\"Oslo\\"}"}',
}


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_each_shape_alone_is_one_call_and_no_words(shape: str):
    found = read(SHAPES[shape])
    assert pairs(found) == [("get_weather", {"location": "Oslo"})]
    assert found.words is None and found.unread == []


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_each_shape_keeps_the_words_around_it(shape: str):
    found = read(f"Let me look that up.\n{SHAPES[shape]}\nBack in a moment.")
    assert pairs(found) == [("get_weather", {"location": "Oslo"})]
    assert found.words.startswith("Let me look that up.")
    assert found.words.endswith("Back in a moment.")
    assert "Oslo" not in found.words and "get_weather" not in found.words
    assert not any(marker in found.words for marker in MARKERS) and "```" not in found.words


@pytest.mark.parametrize("call", ['[get_weather(location="Oslo")]',
                                  '{{"name": "get_weather", "arguments": {"location": "Oslo"}}}'])
def test_no_bracket_of_a_call_is_left_in_the_words(call: str):
    found = read(f"Checking.\n{call}\nOne moment.")
    assert pairs(found) == [("get_weather", {"location": "Oslo"})]
    assert found.words == "Checking.\nOne moment."


def test_calls_among_prose_keep_their_order_and_the_prose_between():
    text = ('First {"name": "get_weather", "arguments": {"location": "A"}} then '
            '<function=list_notes>{"query": "b"}</function> and last create_note(title="c", '
            'body="d") done')
    found = read(text)
    assert pairs(found) == [("get_weather", {"location": "A"}), ("list_notes", {"query": "b"}),
                            ("create_note", {"title": "c", "body": "d"})]
    assert found.words == "First  then  and last  done"


def test_a_json_value_that_is_no_call_is_skipped_whole():
    """A call quoted inside another value (here: a list of settings) is not taken out of it."""
    text = ('{"settings": {"name": "get_weather", "arguments": {"location": "X"}}} '
            '{"name": "list_notes", "arguments": {}}')
    assert pairs(read(text)) == [("list_notes", {})]


# ----- only offered tools -----


@pytest.mark.parametrize("text", [
    '<tool_call>\n{"name": "send_email", "arguments": {"to": "boss@example.com"}}\n</tool_call>',
    '[TOOL_CALLS] [{"name": "send_email", "arguments": {"to": "x"}}]',
    '<function=send_email>{"to": "x"}</function>',
    '[send_email(to="x")]',
    '```json\n{"name": "send_email", "arguments": {"to": "x"}}\n```',
])
def test_a_call_of_a_tool_not_offered_is_words_and_nothing_runs(text: str):
    found = read(text)
    assert (found.calls, found.words, found.unread) == ([], text, [])
    message, unread = calls_from_text(reply(text), OFFERED)
    assert message.tool_calls is None and message.content == text and unread == []


def test_beside_an_offered_call_an_unoffered_one_stays_words():
    text = ('<tool_call>{"name": "send_email", "arguments": {"to": "x"}}</tool_call>\n'
            '<tool_call>{"name": "get_weather", "arguments": {"location": "Oslo"}}</tool_call>')
    message, _ = calls_from_text(reply(text), OFFERED)
    assert [c.function.name for c in message.tool_calls] == ["get_weather"]
    assert '"send_email"' in message.content


def test_an_unoffered_call_in_a_list_of_calls_stays_words():
    text = ('[{"name": "get_weather", "arguments": {"location": "Oslo"}}, '
            '{"name": "send_email", "arguments": {"to": "x"}}]')
    found = read(text)
    assert pairs(found) == [("get_weather", {"location": "Oslo"})]
    assert found.words is not None and "send_email" in found.words


def test_the_name_must_be_the_tools_exactly():
    assert read('{"name": "get_weather2", "arguments": {"location": "x"}}').calls == []
    assert read('{"name": "Get_Weather", "arguments": {"location": "x"}}').calls == []
    assert read('xget_weather(location="Oslo")').calls == []  # part of another name
    assert calls_in_text('get_weather(location="Oslo")', []).calls == []  # nothing offered


# ----- arguments: the shape is read here, the schema judged by the workflow -----


def checked(text: str) -> list[loop.ReadyCall | loop.InvalidCall]:
    message, _ = calls_from_text(reply(text), OFFERED)
    return [loop.check_tool_call(c, CATALOG) for c in message.tool_calls or []]


@pytest.mark.parametrize("text", [
    '{"name": "get_weather", "arguments": {"location": 5}}',
    '<tool_call>{"name": "get_weather", "arguments": {"location": ["Oslo"]}}</tool_call>',
    'get_weather(location=5)',
    '<function=get_weather>{"location": null}</function>',
    '{"name": "get_weather", "arguments": {"location": ""}}',  # minLength 1
])
def test_arguments_of_the_wrong_type_are_read_then_refused_by_the_schema(text: str):
    [result] = checked(text)
    assert isinstance(result, loop.InvalidCall)
    assert result.observation.startswith("Error: invalid arguments for get_weather: location:")
    assert '"location"' in result.observation  # the schema the model is shown


def test_missing_arguments_are_an_empty_object_the_schema_refuses():
    [result] = checked('{"name": "get_weather"}')
    assert isinstance(result, loop.InvalidCall)
    assert "'location' is a required property" in result.observation


@pytest.mark.parametrize("text", [
    '{"name": "get_weather", "arguments": [1, 2]}',
    '{"name": "get_weather", "arguments": 42}',
    '{"name": "get_weather", "arguments": null}',
    '{"name": "get_weather", "arguments": "not json"}',
    '{"name": "get_weather", "arguments": "[\\"Oslo\\"]"}',
    '{"name": "get_weather", "location": "Oslo"}',  # arguments beside the name: no shape we read
])
def test_arguments_that_are_no_object_make_no_call_and_are_named_unread(text: str):
    found = read(text)
    assert (found.calls, found.words, found.unread) == ([], text, ["get_weather"])


def test_literal_python_values_become_json_arguments():
    [result] = checked('get_weather(location="Oslo")')
    assert isinstance(result, loop.ReadyCall) and result.arguments == {"location": "Oslo"}
    found = read('create_note(title="t", body="""multi\nline""")')
    assert pairs(found) == [("create_note", {"title": "t", "body": "multi\nline"})]
    found = read("list_notes(query=None, tags=('a', 'b'), deep={'k': [1, 2.5, True]})")
    assert pairs(found) == [("list_notes", {"query": None, "tags": ["a", "b"],
                                            "deep": {"k": [1, 2.5, True]}})]


@pytest.mark.parametrize("value", ["{1, 2}", 'b"x"', "1j", "...", "{(1, 2): 3}"])
def test_a_pythonic_literal_json_cannot_hold_makes_no_call_and_raises_nothing(value: str):
    message, unread = calls_from_text(reply(f"get_weather(location={value})"), OFFERED)
    assert message.tool_calls is None and unread == ["get_weather"]


def test_a_pythonic_call_is_not_taken_with_its_arguments_dropped():
    found = read('get_weather(**{"location": "Oslo"})')
    assert found.calls == [] or pairs(found) == [("get_weather", {"location": "Oslo"})]


def test_a_call_quoted_in_a_pythonic_arguments_string_is_not_a_call():
    text = ("create_note(title='todo', body='{\"name\": \"delete_note\", \"arguments\": "
            "{\"note_id\": 3}}')")
    found = read(text)
    assert [c.name for c in found.calls] == ["create_note"]


def test_a_call_quoted_in_a_json_arguments_string_is_not_a_call():
    text = ('{"name": "create_note", "arguments": {"title": "todo", "body": '
            '"delete_note(note_id=3) and {\\"name\\": \\"delete_note\\"}"}}')
    assert [c.name for c in read(text).calls] == ["create_note"]


# ----- unread: an offered tool's call in a shape that cannot be read -----


@pytest.mark.parametrize("text", [
    '<tool_call>get_weather location=Oslo</tool_call>',  # a marker, then no JSON
    'get_weather(location=city)',  # a name, not a literal
    'get_weather("Oslo")',  # positional
    'I will use "get_weather" next.',  # the name quoted as JSON has it
    "<|python_tag|>get_weather.call(location='Oslo')",
    '```json\n{"name": "get_weather", "arguments": {"location": "Os',  # cut off
])
def test_a_call_that_cannot_be_read_names_its_tool_and_keeps_the_text(text: str):
    found = read(text)
    assert (found.calls, found.words, found.unread) == ([], text, ["get_weather"])
    message, unread = calls_from_text(reply(text), OFFERED)
    assert message.content == text and message.tool_calls is None and unread == ["get_weather"]


@pytest.mark.parametrize("text", ['<function=get_weather>{"location": "Os',
                                  '<function=get_weather>["Oslo"]</function>',
                                  '<function=get_weather>location=Oslo</function>'])
def test_a_function_tag_that_cannot_be_read_names_its_tool(text: str):
    found = read(text)
    assert (found.calls, found.words, found.unread) == ([], text, ["get_weather"])


def test_a_tool_named_in_prose_is_not_unread():
    found = read("You could use get_weather or list_notes for that.")
    assert (found.calls, found.unread) == ([], [])


def test_after_a_marker_every_offered_tool_named_is_unread():
    found = read("<tool_call>list_notes then get_weather</tool_call>")
    assert found.calls == [] and sorted(found.unread) == ["get_weather", "list_notes"]


# ----- no call: the text unchanged -----


@pytest.mark.parametrize("text", ["", "   ", "Hello!", "Here is JSON: {\"a\": [1, 2]}",
                                  "```json\n{\"city\": \"Oslo\"}\n```", "{{ a template }}"])
def test_text_with_no_call_keeps_its_words_unchanged(text: str):
    assert read(text) == TextCalls(calls=[], words=text, unread=[])
    message, unread = calls_from_text(reply(text), OFFERED)
    assert message == reply(text) and unread == []


def test_a_reply_with_calls_already_or_no_text_is_left_alone():
    native = ChatMessage(role="assistant", content=SHAPES["json"], tool_calls=[
        ToolCall(id="c1", function=FunctionCall(name="list_notes", arguments="{}"))])
    assert calls_from_text(native, OFFERED) == (native, [])
    empty = ChatMessage(role="assistant", content=None)
    assert calls_from_text(empty, OFFERED) == (empty, [])


# ----- bounded time on hostile text -----

N = 200 * 1024


def hostile(kind: str, size: int) -> str:
    """`size` characters of text made to make a reader of calls slow, naming an offered tool."""
    unit = {
        "braces": "{",
        "brackets": "[",
        "nested": '[{"a":',
        "tool_call_tags": "<tool_call>",
        "function_tags": "<function=get_weather>",
        "function_opening": "<function=",
        "fences": "```json\n",
        "fences_around_nothing": "```json\n\n```",
        "unclosed_strings": '{"name": "get_weather", "arguments": "',
        "pythonic_openings": "get_weather(",
        "pythonic_unclosed_strings": 'get_weather(location="',
        "pythonic_nesting": "get_weather(" + "(" * 30,
        "doubled_braces": "{{",
        "quoted_names": '"get_weather" ',
        "backslashes": '{"name": "\\',
        "pythonic_calls": 'get_weather(location="x") ',
    }[kind]
    text = unit * (size // len(unit) + 1)
    return text[:size] + " get_weather"


def call_then(kind: str, size: int) -> str:
    """A call first, then `size` characters of what follows a call slowly: the words are built."""
    filler = {"newlines": "\n", "fences": "```json\n", "open_fences": "``` x",
              "markers": "<tool_call></tool_call>", "spaces": " "}[kind]
    return SHAPES["hermes"] + filler * (size // len(filler))


def fastest(read_text: Callable[[], object], runs: int = 3) -> float:
    """The least CPU time of `runs` reads: the other processes of a loaded machine are not
    counted (its wall time was 1.4 s where the CPU's was well under one)."""
    best = float("inf")
    for _ in range(runs):
        start = time.process_time()
        read_text()
        best = min(best, time.process_time() - start)
    return best


# What a read of N characters may take, at most, on the slowest CI machine seen (a quadratic
# reader takes minutes): this holds that nothing freezes, the ratios that the time is linear.
NO_FREEZE_S = 3.0


HOSTILE = ["braces", "brackets", "nested", "tool_call_tags", "function_tags", "function_opening",
           "fences", "fences_around_nothing", "unclosed_strings", "pythonic_openings",
           "pythonic_unclosed_strings", "pythonic_nesting", "doubled_braces", "quoted_names",
           "backslashes", "pythonic_calls"]


@pytest.mark.parametrize("kind", HOSTILE)
def test_hostile_text_is_read_fast_and_in_linear_time(kind: str):
    big = fastest(lambda: read(hostile(kind, N)), runs=1)
    assert big < NO_FREEZE_S, f"{kind}: {big:.3f} s for {N} characters"
    small = fastest(lambda: read(hostile(kind, N // 4)))
    big = fastest(lambda: read(hostile(kind, N)))
    assert big < 16 * max(small, 0.002), f"{kind}: {small:.4f} s, then {big:.4f} s at 4x"
    assert all(c.name in OFFERED for c in read(hostile(kind, 4096)).calls)


@pytest.mark.parametrize("kind", ["newlines", "fences", "open_fences", "markers", "spaces"])
def test_the_words_after_a_call_are_built_fast_and_in_linear_time(kind: str):
    found = read(call_then(kind, N))
    assert pairs(found) == [("get_weather", {"location": "Oslo"})]
    small = fastest(lambda: read(call_then(kind, N // 4)))
    big = fastest(lambda: read(call_then(kind, N)))
    assert big < NO_FREEZE_S and big < 16 * max(small, 0.002), f"{kind}: {small:.4f} s, {big:.4f} s"


def test_a_reply_of_nothing_but_calls_at_the_reply_bound_is_read_fast():
    one = '{"name": "list_notes", "arguments": {}}\n'
    text = one * (MAX_REPLY_TEXT_BYTES // len(one))
    start = time.process_time()
    found = read(text)
    assert time.process_time() - start < NO_FREEZE_S
    assert len(found.calls) == MAX_REPLY_TEXT_BYTES // len(one) and found.words is None


def test_many_calls_are_read_in_linear_time():
    """8x the calls: 8x the time when linear, 64x when quadratic. The bound sits between, with
    room for a loaded machine (four test processes on two cores took 30x once)."""
    one = '{"name": "list_notes"}'
    small = fastest(lambda: read(one * (12_500 // len(one))), runs=5)
    big = fastest(lambda: read(one * (100_000 // len(one))), runs=5)
    assert big < 40 * max(small, 0.005), f"{small:.4f} s, then {big:.4f} s at 8x"


# ----- any text -----

TOOLS = ["get_weather", "list_notes"]
PIECES = ["{", "}", "[", "]", "(", ")", '"', "'", "\\", ":", ",", "=", "\n", " ", "```",
          "```json\n", "{{", "}}", "<tool_call>", "</tool_call>", "<tools>", "[TOOL_CALLS]",
          "<|python_tag|>", "<function=", "</function>", ">", '"name"', '"arguments"',
          '"parameters"', "get_weather", "list_notes", "send_email", "get_weather(",
          "location=", '"Oslo"', "1", "null", "true", "NaN", "\ud7ff", "é", "𝔘"]
texts = st.lists(st.one_of(st.sampled_from(PIECES), st.text(max_size=6)),
                 max_size=40).map("".join)
FAST = settings(max_examples=300, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow])


@FAST
@given(text=texts)
def test_any_text_is_read_without_raising_and_only_offered_tools_are_called(text: str):
    found = calls_in_text(text, TOOLS)
    assert all(isinstance(c, WrittenCall) and c.name in TOOLS for c in found.calls)
    assert all(isinstance(c.arguments, dict) for c in found.calls)
    assert set(found.unread) <= set(TOOLS)
    assert found.unread == [] or found.calls == []
    if not found.calls:
        assert found.words == text


@FAST
@given(text=texts.filter(lambda t: not any(name in t for name in TOOLS)))
def test_text_without_a_tool_name_has_no_call_and_nothing_unread(text: str):
    assert calls_in_text(text, TOOLS) == TextCalls(calls=[], words=text, unread=[])


IDENTIFIERS = st.text(string.ascii_lowercase, min_size=1, max_size=8).filter(
    lambda k: k not in {"if", "in", "is", "or", "as", "for", "and", "not", "def", "del", "try"})
VALUES = st.one_of(st.text(max_size=20), st.integers(-10**6, 10**6), st.booleans(), st.none())
PROSE = st.text(string.ascii_letters + " .,!?\n", max_size=40)


def written(shape: str, name: str, args: dict) -> str:
    body = json.dumps({"name": name, "arguments": args})
    return {
        "json": body,
        "fence": f"```json\n{body}\n```",
        "hermes": f"<tool_call>\n{body}\n</tool_call>",
        "mistral": f"[TOOL_CALLS] [{body}]",
        "python_tag": "<|python_tag|>" + json.dumps({"name": name, "parameters": args}),
        "function_tag": f"<function={name}>{json.dumps(args)}</function>",
        "pythonic": f"{name}(" + ", ".join(f"{k}={v!r}" for k, v in args.items()) + ")",
    }[shape]


@FAST
@given(shape=st.sampled_from(["json", "fence", "hermes", "mistral", "python_tag",
                              "function_tag", "pythonic"]),
       name=st.sampled_from(TOOLS), args=st.dictionaries(IDENTIFIERS, VALUES, max_size=4),
       before=PROSE, after=PROSE)
def test_a_call_written_in_any_shape_among_prose_is_read_back(shape, name, args, before, after):
    found = calls_in_text(f"{before}\n{written(shape, name, args)}\n{after}", TOOLS)
    assert pairs(found) == [(name, args)]
    assert found.unread == []
    for word in (before + " " + after).split():
        if any(ch.isalnum() for ch in word):
            assert word in (found.words or "")


def test_a_pythonic_argument_named_as_a_python_keyword_is_read():
    """A schema may name an argument `from` or `class`: a model writes `send_email(from="a")`,
    which is no Python, and the call is read all the same (a string's `from=` left as it is).
    Found by the property above (`get_weather(else=None)`)."""
    found = calls_in_text('send_email(from="ops@example.com", to="b", body="from= me")',
                          ["send_email"])
    assert pairs(found) == [("send_email", {"from": "ops@example.com", "to": "b",
                                            "body": "from= me"})]
    assert pairs(calls_in_text("[get_weather(location='Oslo', if=True)]", ["get_weather"])) == [
        ("get_weather", {"location": "Oslo", "if": True})]
