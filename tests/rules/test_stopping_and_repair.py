"""Unit tests of stopping rules, output repair and compaction: pure functions, no server."""

from __future__ import annotations

from durable_react_agent.contract import (
    ChatMessage,
    FunctionCall,
    StreamEvent,
    ToolCall,
    ToolDefinition,
    Usage,
)
from durable_react_agent.rules.compaction import ELIDED_PREFIX, compact, estimate_tokens
from durable_react_agent.rules.context import answer_open_calls
from durable_react_agent.rules.loop import over_the_step_limit
from durable_react_agent.rules.repair import recover_tool_calls, unique_call_ids
from durable_react_agent.rules.stopping import (
    STOPPED,
    call_record,
    interrupted_reply,
    is_looping,
    over_budget,
    said_so_far,
    stopped_call,
)

KNOWN = {"get_weather", "create_note"}


def call(call_id: str, name: str = "get_weather", args: str = "{}") -> ToolCall:
    return ToolCall(id=call_id, function=FunctionCall(name=name, arguments=args))


def test_same_tool_same_args_same_result_twice_is_a_loop():
    a = call_record("get_weather", {"location": "Paris"}, "Sunny, 20°C")
    b = call_record("get_weather", {"location": "  paris "}, "sunny,   20°c")
    assert is_looping([a, b])
    assert not is_looping([a])
    assert not is_looping([a, call_record("get_weather", {"location": "Paris"}, "Rain")])
    assert not is_looping([a, call_record("get_weather", {"location": "Rome"}, "Sunny, 20°C")])
    assert not is_looping([a, call_record("list_notes", {"location": "Paris"}, "Sunny, 20°C")])
    assert not is_looping([a, call_record("x", {}, "y"), a])  # not in a row


def test_budget():
    assert not over_budget(Usage(total_tokens=999), 1000)
    assert over_budget(Usage(total_tokens=1000), 1000)
    assert not over_budget(Usage(total_tokens=10**9), None)


def test_tool_call_in_content_is_recovered():
    for content in (
        '{"name": "get_weather", "arguments": {"location": "Paris"}}',
        '```json\n{"name": "get_weather", "parameters": {"location": "Paris"}}\n```',
        '[{"type": "function", "function": {"name": "get_weather", "arguments": "{\\"location\\": \\"Paris\\"}"}}]',
        '{"tool_calls": [{"id": "x1", "function": {"name": "get_weather", "arguments": {"location": "Paris"}}}]}',
    ):
        fixed = recover_tool_calls(ChatMessage(role="assistant", content=content), KNOWN)
        assert fixed.content is None, content
        [recovered] = fixed.tool_calls
        assert recovered.function.name == "get_weather"
        assert '"location": "Paris"' in recovered.function.arguments


def test_ordinary_or_unknown_json_content_is_left_alone():
    for content in ("It is sunny.", '{"name": "launch_rockets", "arguments": {}}', '{"answer": 42}',
                    "[1, 2]", "{broken"):
        message = ChatMessage(role="assistant", content=content)
        assert recover_tool_calls(message, KNOWN) == message
    with_calls = ChatMessage(role="assistant", content='{"name": "get_weather"}', tool_calls=[call("a")])
    assert recover_tool_calls(with_calls, KNOWN) == with_calls


def test_missing_and_repeated_ids_become_unique_and_deterministic():
    calls = [call(""), call("dup"), call("dup"), call("seen"), call("fine")]
    fixed = unique_call_ids(calls, seen={"seen", "call_t2s3_0"}, turn=2, step=3)
    ids = [c.id for c in fixed]
    assert ids == ["call_t2s3_0_2", "dup", "call_t2s3_2", "call_t2s3_3", "fine"]
    assert unique_call_ids(calls, {"seen", "call_t2s3_0"}, 2, 3) == fixed


def history(rounds: int, size: int = 4000) -> list[ChatMessage]:
    messages = [ChatMessage(role="system", content="s"), ChatMessage(role="user", content="u")]
    for i in range(rounds):
        messages.append(ChatMessage(role="assistant", tool_calls=[call(f"c{i}", "get_weather")]))
        messages.append(ChatMessage(role="tool", tool_call_id=f"c{i}", content="x" * size))
    return messages


def test_compaction_leaves_a_history_under_budget_alone():
    messages = history(10)
    assert compact(messages, None) is messages
    assert compact(messages, 10**6) is messages


def test_compaction_elides_old_observations_first_and_keeps_calls_paired():
    messages = history(10)
    compacted = compact(messages, 5000)
    assert estimate_tokens(compacted) <= 5000
    assert [(m.role, m.tool_call_id) for m in compacted] == [(m.role, m.tool_call_id) for m in messages]
    assert compacted[-1].content == "x" * 4000  # the latest round is intact
    assert compacted[3].content.startswith(ELIDED_PREFIX) and "4000 bytes" in compacted[3].content
    assert compact(compacted, 5000) == compacted  # stable


def test_compaction_drops_whole_old_rounds_when_eliding_is_not_enough():
    messages = history(200)
    compacted = compact(messages, 1500)
    assert estimate_tokens(compacted) <= 1500
    assert compacted[:2] == messages[:2]
    note = compacted[2]
    assert note.role == "system" and "earlier tool steps dropped to bound the context" in note.content
    dropped = (len(messages) - len(compacted) + 1) // 2
    assert note.content == f"[{dropped} earlier tool steps dropped to bound the context: get_weather x{dropped}]"
    assert compacted[-2:] == messages[-2:]
    calls = [c.id for m in compacted for c in (m.tool_calls or [])]
    assert calls == [m.tool_call_id for m in compacted if m.role == "tool"]  # every call has its result


# ----- what a person's stop leaves of a turn -----

def token(text: str, turn: int = 2, step: int = 3, kind: str = "token") -> StreamEvent:
    return StreamEvent(kind=kind, turn=turn, step=step, text=text)


def test_what_a_cut_reply_said_is_its_step_s_tokens_after_the_last_reset():
    events = [token("old ", step=2), token("first "), token("try", turn=1), token(None, kind="reset"),
              token("Hello, "), token("wor"), token("ld", step=4)]
    assert said_so_far(events, turn=2, step=3) == "Hello, wor"
    assert said_so_far(events, turn=2, step=5) == ""  # a call that streamed nothing yet
    assert interrupted_reply("Hello, wor") == f"Hello, wor\n\n[interrupted: {STOPPED}]"


def test_a_running_write_that_may_run_once_is_said_to_have_maybe_run_under_its_key():
    def tool(**fields) -> ToolDefinition:
        return ToolDefinition(name="pay", description="d", parameters={}, **fields)

    assert stopped_call(tool(), "k1", STOPPED) == f"interrupted: {STOPPED}"  # a safe read
    assert stopped_call(tool(risk="sensitive", keyed=True), "k1", STOPPED) == \
        f"interrupted: {STOPPED}"  # a retry finds what it wrote: nothing is unknown
    assert stopped_call(tool(risk="sensitive", idempotent=False), "k1", STOPPED) == (
        f"stopped: pay may have run ({STOPPED} while it ran; idempotency key k1): check before "
        "calling it again")


def test_open_calls_are_answered_each_as_it_stood():
    calls = [ToolCall(id=i, function=FunctionCall(name="pay", arguments="{}")) for i in "abc"]
    messages = [ChatMessage(role="user", content="pay"),
                ChatMessage(role="assistant", tool_calls=calls),
                ChatMessage(role="tool", tool_call_id="a", content="paid")]
    answered = answer_open_calls(messages, "interrupted", {"b": "may have run"})
    assert [(m.tool_call_id, m.content) for m in answered[3:]] == [
        ("b", "may have run"), ("c", "interrupted")]


def test_the_calls_past_a_step_s_limit_are_not_run_and_say_why():
    calls = [ToolCall(id=f"c{i}", function=FunctionCall(name="pay", arguments="{}"))
             for i in range(4)]
    assert over_the_step_limit(calls, None) == {} and over_the_step_limit(calls, 4) == {}
    over = over_the_step_limit(calls, 2)
    assert list(over) == ["c2", "c3"]
    assert over["c2"] == ("Error: not run: a step may make at most 2 tool calls and this one "
                          "made 4; make the calls left in your next step")
