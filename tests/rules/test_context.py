"""Unit tests of the bounded context and the edge: pure functions, no server."""

from __future__ import annotations

from durable_react_agent.contract import (
    ApprovalPolicy,
    ChatMessage,
    ConversationInput,
    FunctionCall,
    ToolCall,
    ToolDefinition,
)
from durable_react_agent.contract.bounds import (
    DEFAULT_MESSAGE_BYTES,
    Limits,
    Tail,
    check_message,
    clip,
    clip_bytes,
    json_size,
    keep_within,
    text_size,
)
from durable_react_agent.contract.state import ContextState
from durable_react_agent.rules.compaction import estimate_tokens
from durable_react_agent.rules.context import (
    LOW_WATER,
    Budget,
    calibrated_ratio,
    fit_bytes,
    fold_cut,
    folded,
    level,
    observation_share,
    plan_fold,
    prompt,
    shown,
    summary_message,
)
from durable_react_agent.rules.repair import bound_reply, unique_call_ids
from durable_react_agent.rules.start_input import admitted_tools, first_state, settled_input
from durable_react_agent.testing.script import select_reply

BOUNDED = Limits.bounded(DEFAULT_MESSAGE_BYTES)


def call(call_id: str, args: str = "{}") -> ToolCall:
    return ToolCall(id=call_id, function=FunctionCall(name="get_weather", arguments=args))


def chat(turns: int, size: int = 2000) -> list[ChatMessage]:
    out = []
    for i in range(turns):
        out += [ChatMessage(role="user", content=f"{i}:" + "u" * size),
                ChatMessage(role="assistant", content="a" * size)]
    return out


def tool_turn(rounds: int, size: int = 4000) -> list[ChatMessage]:
    out = [ChatMessage(role="user", content="do it")]
    for i in range(rounds):
        out += [ChatMessage(role="assistant", tool_calls=[call(f"c{i}")]),
                ChatMessage(role="tool", tool_call_id=f"c{i}", content="x" * size)]
    return out


def ctx_of(messages: list[ChatMessage], **kw) -> ContextState:
    return ContextState(system_prompt="You help.", messages=messages, **kw)


# ----- folding -----


def test_no_fold_while_the_prompt_fits():
    ctx = ctx_of(chat(5))
    assert plan_fold(ctx, Budget(tokens=10_000)) == 0


def test_fold_takes_the_oldest_turns_down_to_the_low_water_mark():
    ctx = ctx_of(chat(30) + [ChatMessage(role="user", content="now")])
    budget = Budget(tokens=10_000)
    turns = plan_fold(ctx, budget)
    assert 0 < turns < 30
    cut = fold_cut(ctx, turns)
    kept = ctx.messages[cut:]
    assert kept[0].role == "user" and kept[0].content.startswith(f"{turns}:")
    after = folded(ctx, cut, "the gist")
    assert estimate_tokens(after.messages) + budget.summary_tokens <= budget.room * LOW_WATER
    assert (after.folded_turns, after.folded_steps, after.summary) == (turns, turns, "the gist")
    assert plan_fold(after, budget) == 0  # nothing more to fold for a while


def test_the_current_turn_never_folds_and_a_huge_one_folds_every_older_turn():
    ctx = ctx_of(chat(3) + tool_turn(40))
    turns = plan_fold(ctx, Budget(tokens=5_000))
    assert turns == 3
    assert fold_cut(ctx, turns) == 6  # the current turn's user message
    assert plan_fold(ctx_of(tool_turn(40)), Budget(tokens=5_000)) == 0  # nothing older to fold


def test_a_failed_fold_drops_the_turns_with_a_note_and_keeps_the_summary():
    ctx = folded(ctx_of(chat(10)), 4, "first summary")
    dropped = folded(ctx, 4, None, "summarizing failed: boom")
    assert (dropped.summary, dropped.folded_turns, dropped.dropped_turns) == ("first summary", 4, 2)
    note = summary_message(dropped).content
    assert note.startswith("[Summary of turns 1-4 of this conversation (4 model steps)")
    assert "[2 of those turns were dropped without a summary: summarizing failed: boom]" in note
    assert note.endswith("first summary")
    assert shown(dropped)[1].content == note and len(shown(dropped)) == 2 + 12


def test_folded_steps_count_the_rounds_compaction_dropped():
    messages = tool_turn(3) + [ChatMessage(role="system", content="[7 earlier tool steps dropped to "
                                           "bound the context: get_weather x7]")] + chat(1)
    after = folded(ctx_of(messages), len(messages) - 2, "s")
    assert after.folded_steps == 3 + 7


def test_the_scripted_model_keeps_its_place_across_a_fold():
    from durable_react_agent.testing import Scenario, Script, ScriptedReply

    script = Script(scenarios=[Scenario(trigger="keep", replies=[
        ScriptedReply(content=f"reply {i}") for i in range(12)])])
    ctx = ctx_of([ChatMessage(role="user", content="keep 0")])
    for i in range(1, 10):
        ctx.messages += [ChatMessage(role="assistant", content=f"reply {i - 1}"),
                         ChatMessage(role="user", content=f"keep {i}")]
    before = select_reply(script, [m.to_openai() for m in shown(ctx)])
    after = folded(ctx, fold_cut(ctx, 4), "First request: keep 0")
    again = select_reply(script, [m.to_openai() for m in shown(after)])
    assert before.reply.content == again.reply.content == "reply 9"


# ----- the next step -----


def test_the_prompt_keeps_older_turns_verbatim_and_compacts_the_current_turn():
    ctx = folded(ctx_of(chat(4) + tool_turn(30)), 2 * 2, "sum")
    messages, kept = prompt(ctx, Budget(tokens=8_000))
    assert [m.role for m in messages[:2]] == ["system", "system"]
    assert messages[2:6] == ctx.messages[:4]  # the latest two turns, verbatim
    assert estimate_tokens(messages) <= 8_000
    assert kept == messages[2:]  # the context keeps what the model was shown
    assert kept[-1] == ctx.messages[-1] and kept[-2] == ctx.messages[-2]  # the latest round whole


def test_each_observation_gets_a_share_that_keeps_the_next_step_within_budget():
    ctx = ctx_of(chat(2) + [ChatMessage(role="user", content="compare")])
    reply = ChatMessage(role="assistant", tool_calls=[call(f"c{i}") for i in range(4)])
    budget = Budget(tokens=6_000, tools=500)
    share = observation_share(ctx, budget, reply)
    ctx.messages.append(reply)
    ctx.messages += [ChatMessage(role="tool", tool_call_id=f"c{i}", content="x" * share)
                     for i in range(4)]
    messages, _ = prompt(folded(ctx, fold_cut(ctx, 2), "s" * 400), budget)
    assert estimate_tokens(messages) <= budget.room
    assert observation_share(ctx_of([ChatMessage(role="user", content="u" * 100_000)]),
                             budget, reply) == 256  # spent already: a minimum share


def test_calibration_follows_what_the_endpoint_counted_within_bounds():
    assert calibrated_ratio(1000, 1500, 1.0) == 1.5
    assert calibrated_ratio(1000, 0, 1.3) == 1.3  # no usage reported: keep the last ratio
    assert calibrated_ratio(1000, 100_000, 1.0) == 8.0 and calibrated_ratio(1000, 1, 1.0) == 0.25
    assert Budget(tokens=12_000, ratio=1.5, tools=1000).room == 7000


# ----- byte bounds -----


def test_fitting_bytes_drops_old_turns_then_cuts_the_latest_observations():
    ctx = ctx_of(chat(50) + tool_turn(5, size=20_000))
    fitted = fit_bytes(ctx, 60_000, "bound")
    assert json_size(fitted) <= 60_000
    assert fitted.messages[0].content == "do it" and fitted.dropped_turns == 50
    calls = [c.id for m in fitted.messages for c in (m.tool_calls or [])]
    assert calls == [m.tool_call_id for m in fitted.messages if m.role == "tool"]
    assert fit_bytes(ctx, 10**9, "bound") is ctx


def test_level_shares_a_total_fairly():
    assert level([10, 10, 10], 30) == 10
    assert level([5, 100, 100], 105) == 50
    assert level([5, 100, 100], 0) == 0


def test_messages_are_measured_in_json_bytes():
    assert check_message("   ", 100) == "the message is empty"
    assert check_message("x" * 100, 100) is None
    assert check_message("\x01" * 20, 100) == "the message is 120 bytes, over the limit of 100 bytes"
    assert check_message("x" * 10**6, None) is None
    assert text_size(clip("\x01" * 1000, 100)) <= 100 and clip("short", 100) == "short"
    cut = clip_bytes("é" * 10_000, 1000, "summary")
    assert text_size(cut) <= 1000 and cut.endswith("…[cut: summary of 20000 bytes]")


def test_a_tail_keeps_its_newest_items_within_count_and_bytes():
    items: list[str] = []
    tail = Tail(items, 3, 30, text_size)
    assert tail.append("a" * 10) == [] and tail.append("b" * 10) == []
    assert tail.append("c" * 15) == ["a" * 10]
    assert items == ["b" * 10, "c" * 15] and tail.bytes == 25
    assert not tail.fits(10) and tail.fits(5)
    assert tail.pop_first() == "b" * 10 and tail.bytes == 15
    assert keep_within([1, 22, 333, 4], 8) == ([1, 22], [333, 4])


def test_a_reply_is_bounded_in_calls_arguments_ids_and_text():
    many = ChatMessage(role="assistant", content="t" * 100_000,
                       tool_calls=[call(f"c{i}") for i in range(70)])
    message, refused = bound_reply(many, BOUNDED)
    assert len(message.tool_calls) == 64 and text_size(message.content) <= 32 * 1024
    assert list(refused) == ["c63"] and "this one and the 6 after it did not run" in refused["c63"]
    big = ChatMessage(role="assistant", tool_calls=[call("a", '{"x": "' + "y" * 20_000 + '"}'),
                                                    call("b", '{"x": "' + "y" * 20_000 + '"}')])
    message, refused = bound_reply(big, BOUNDED)
    assert list(refused) == ["b"] and message.tool_calls[1].function.arguments == "{}"
    assert bound_reply(big, Limits())[1] == {}  # a run begun before the bounds keeps its replies
    odd = ChatMessage(role="assistant", tool_calls=[
        ToolCall(id="n", function=FunctionCall(name="n" * 5000, arguments="{}"))])
    assert text_size(bound_reply(odd, BOUNDED)[0].tool_calls[0].function.name) <= 64
    [fixed] = unique_call_ids([call("x" * 300)], set(), 4, 2)
    assert fixed.id == "call_t4s2_0"


def test_settings_are_brought_within_their_ceilings_with_notices():
    inp, notices = settled_input(ConversationInput(
        prompt="hi", system_prompt="s" * 100_000, model="m" * 1000,
        approval=ApprovalPolicy(auto_approve=[f"tool{i}" for i in range(100)] + ["n" * 200]),
        max_observation_bytes=10**7, context_budget_tokens=10**7,
    ), BOUNDED)
    assert text_size(inp.system_prompt) <= 32 * 1024 and len(inp.model) <= 256
    assert len(inp.approval.auto_approve) == 64
    assert (inp.max_observation_bytes, inp.context_budget_tokens) == (65_536, 128_000)
    assert len(notices) == 2 and "system prompt was cut" in notices[0]


def test_a_first_message_over_the_limit_is_refused_not_run():
    inp = ConversationInput(prompt="p" * 300_000)
    state = first_state(inp, BOUNDED, [])
    assert state.inbox == [] and "the first message was refused: the message is 300,000 bytes" \
        in state.notices[0]
    assert first_state(inp, Limits(), []).inbox == [inp.prompt]  # as runs begun before the bounds


def test_discovered_tools_beyond_the_catalog_bound_are_left_out_with_a_notice():
    tools = [ToolDefinition(name=f"t{i}", description="d" * 1000, parameters={}) for i in range(200)]
    tools.append(ToolDefinition(name="n" * 100, description="", parameters={}))
    kept, notices = admitted_tools(tools, BOUNDED)
    assert 0 < len(kept) < 200 and json_size(kept) <= 128 * 1024
    assert "names over 64 bytes" in notices[0] and notices[1].startswith("tools left out")
    assert admitted_tools(tools, Limits()) == (tools, [])
