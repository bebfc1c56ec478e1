"""Fitting a conversation to the model, without a server: the budget a known window leaves, a
message no fold makes room for left out (on the server's count where it counted the message, on
a count that errs low at the door); each server's way of saying a prompt is too long,
read for its window and the prompt's tokens; a mid-stream error told apart; a model entry's own
window, reply size, deadlines and price; a failed model call as the user reads it; and the
failed calls, the window and a turn's error as `status` and `watch` print them."""

from __future__ import annotations

import io
import json
from pathlib import Path

import httpx
import openai
import pytest
from pydantic import ValidationError
from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    RetryState,
    TimeoutType,
)
from temporalio.exceptions import TimeoutError as ActivityTimeout

from durable_react_agent.activities.llm_errors import (
    CONTEXT_TOO_LONG,
    FormatError,
    classify_status_error,
    classify_stream_error,
    context_too_long,
)
from durable_react_agent.activities.models import (
    MIN_CONTEXT_TOKENS,
    ModelEntry,
    Models,
    ModelsError,
    model_routes,
)
from durable_react_agent.activities.pricing import ModelPrice, Prices
from durable_react_agent.client.render import CONTINUED, render_status
from durable_react_agent.client.watch import Renderer
from durable_react_agent.contract import (
    ChatMessage,
    ContextUse,
    ConversationStatus,
    EntryLimits,
    StreamEvent,
    Usage,
)
from durable_react_agent.contract.state import ContextState
from durable_react_agent.rules.context import (
    LENIENT_RATIO,
    MAX_COUNTED,
    MIN_FITTED_TOKENS,
    OUTPUT_RESERVE_TOKENS,
    Budget,
    fitted_budget,
    left_out,
    message_tokens,
    text_digest,
    with_counts,
)
from durable_react_agent.workflows.failures import model_failure

# ----- the budget a known window leaves -----


@pytest.mark.parametrize("tokens, window, max_output, fitted", [
    (24_000, None, None, 24_000),  # no window known: the conversation's own
    (24_000, None, 4_000, 24_000),  # a reply size alone changes nothing
    (24_000, 8192, None, 8192 - OUTPUT_RESERVE_TOKENS),
    (24_000, 4096, None, 4096 - 1024),  # a quarter of the window is the reserve, exactly
    (24_000, 4100, None, 4100 - OUTPUT_RESERVE_TOKENS),  # past it: the reserve's cap
    (24_000, 2048, None, 2048 - 512),  # a small window keeps a quarter for the reply
    (24_000, 8192, 2000, 8192 - 2000),  # the entry's reply size, above the default reserve
    (24_000, 8192, 100, 8192 - 100),  # and below it
    (7168, 8192, None, 7168),  # the window less the reserve, exactly
    (7169, 8192, None, 7168),
    (1000, 8192, None, 1000),  # a budget below the window is kept
    (24_000, 256, 255, MIN_FITTED_TOKENS),  # a reply that takes it all: never less than this
    (24_000, 256, None, 256 - 64),
])
def test_the_budget_fitted_to_a_window(tokens, window, max_output, fitted):
    assert fitted_budget(tokens, window, max_output) == fitted


def test_a_known_window_larger_than_the_budget_leaves_the_budget_alone():
    assert fitted_budget(50, None) == 50
    assert fitted_budget(50, 8192) == 50


# ----- a message no fold makes room for -----

SYSTEM = "You are a helpful agent."  # 24 characters: 6 + 4 estimated tokens
FIXED = len(SYSTEM) // 4 + 4 + 64  # with the note's reserve


def text_of(tokens: int) -> str:
    """A user message estimated at exactly `tokens` (4 characters a token, 4 for the message)."""
    return "x" * ((tokens - 4) * 4)


def ctx_of(*messages: ChatMessage) -> ContextState:
    return ContextState(system_prompt=SYSTEM, messages=list(messages))


def test_a_message_that_fits_beside_the_system_prompt_is_no_problem():
    budget = Budget(tokens=1000)
    assert message_tokens(text_of(1000 - FIXED), ctx_of(), budget) is None
    assert message_tokens(text_of(1000 - FIXED + 1), ctx_of(), budget) == 1000 - FIXED + 1


def test_a_too_long_message_is_counted_in_the_endpoints_tokens():
    budget = Budget(tokens=1000, ratio=2.0)  # room: 500 estimated tokens
    assert message_tokens(text_of(500 - FIXED), ctx_of(), budget) is None
    assert message_tokens(text_of(500 - FIXED + 1), ctx_of(), budget) == 2 * (500 - FIXED + 1)


def test_the_tools_take_their_share_of_the_room():
    budget = Budget(tokens=1000, tools=100)
    assert message_tokens(text_of(900 - FIXED), ctx_of(), budget) is None
    assert message_tokens(text_of(900 - FIXED + 1), ctx_of(), budget) == 900 - FIXED + 1


def test_when_the_system_prompt_alone_passes_the_budget_no_message_is_to_blame():
    assert message_tokens(text_of(100_000), ctx_of(), Budget(tokens=FIXED - 1)) is None
    assert message_tokens(text_of(5), ctx_of(), Budget(tokens=FIXED)) == 5


def test_each_too_long_user_message_is_left_out_and_the_others_kept():
    budget = Budget(tokens=1000)
    huge, bigger = text_of(2000), text_of(3000)
    kept = [ChatMessage(role="user", content="short question"),
            ChatMessage(role="assistant", content=huge),  # a reply is not the user's to shorten
            ChatMessage(role="tool", tool_call_id="c1", content=huge),
            ChatMessage(role="user", content=None)]
    messages = [kept[0], ChatMessage(role="user", content=huge), *kept[1:3],
                ChatMessage(role="user", content=bigger), kept[3]]
    out, longest = left_out(ctx_of(*messages), budget)
    assert longest == 3000
    assert [out[0], *out[2:4], out[5]] == kept
    assert out[1] == ChatMessage(role="user", content=(
        "[a message of about 2,000 tokens was left out here: it is longer than the model can "
        "read (1,000 tokens)]"))
    assert out[4].role == "user" and out[4].content.startswith("[a message of about 3,000 tokens")


def test_at_the_door_a_message_is_counted_low_so_one_that_fits_is_never_refused():
    """Prose of 1,000 tokens by four characters a token is some 830 by the model's tokenizer: a
    count that errs low (six characters a token) lets it through where the estimate would not;
    past what even that count allows, it is refused, the number said being that low count."""
    budget = Budget(tokens=1000 - FIXED, ratio=LENIENT_RATIO)  # room: 1.5 estimated tokens each
    fits = text_of(1000)
    assert message_tokens(fits, ctx_of(), Budget(tokens=1000 - FIXED)) == 1000
    assert message_tokens(fits, ctx_of(), budget) is None
    over = text_of(1700)
    assert message_tokens(over, ctx_of(), budget) == int(1700 * LENIENT_RATIO)


def test_a_message_the_server_counted_is_judged_on_that_count():
    words = text_of(2000)  # 2,000 by the estimate; the server counted 700
    counted = ctx_of().model_copy(update={"counted": {text_digest(words): 700}})
    assert message_tokens(words, ctx_of(), Budget(tokens=1000)) == 2000
    assert message_tokens(words, counted, Budget(tokens=1000)) is None
    assert message_tokens(words, counted, Budget(tokens=700)) == 700  # its count, not estimated
    out, longest = left_out(counted.model_copy(update={
        "messages": [ChatMessage(role="user", content=words)]}), Budget(tokens=700))
    assert longest == 700 and out[0].content.startswith("[a message of 700 tokens was left out")


def test_a_conversation_keeps_the_latest_counts_only():
    ctx = ctx_of()
    for n in range(MAX_COUNTED + 3):
        ctx = ctx.model_copy(update={"counted": with_counts(ctx, {f"d{n}": n + 1})})
    assert list(ctx.counted) == [f"d{n}" for n in range(3, MAX_COUNTED + 3)]
    nonsense = {"odd": -1, "odder": "9", "k" * 65: 5}
    assert with_counts(ctx, nonsense) == ctx.counted  # is not kept
    assert text_digest("a\ud800b") != text_digest("ab")  # any text has one, lone halves too


def test_nothing_left_out_when_every_message_fits():
    messages = [ChatMessage(role="user", content="hi"),
                ChatMessage(role="assistant", content="hey")]
    assert left_out(ctx_of(*messages), Budget(tokens=1000)) == (messages, 0)


# ----- each server's "the prompt is too long" -----


def status_error(status: int, body: object) -> openai.APIStatusError:
    """The error the openai SDK itself makes of an endpoint's error response."""
    request = httpx.Request("POST", "http://model.test/v1/chat/completions")
    response = httpx.Response(status, request=request, content=json.dumps(body).encode())
    client = openai.OpenAI(api_key="unset", base_url="http://model.test/v1", max_retries=0)
    return client._make_status_error_from_response(response)


def said(err: ApplicationError) -> dict:
    assert err.type == "LLMContextTooLong" and err.non_retryable, err.message
    return err.details[0]


LLAMA_CPP = ("request (9636 tokens) exceeds the available context size (8192 tokens), try "
             "increasing it")
LM_STUDIO = ("Trying to keep the first 5000 tokens when context the overflows. However, the model "
             "is loaded with context length of only 4096 tokens, which is not enough. Try to load "
             "the model with a larger context length, or provide a shorter input")
LM_STUDIO_KEEP = ("The number of tokens to keep from the initial prompt is greater than the "
                  "context length. Try to load the model with a larger context length, or "
                  "provide a shorter input")
VLLM_DECODER = ("The decoder prompt (length 5000) is longer than the maximum model length of "
                "4096. Make sure that `max_model_len` is no smaller than the number of text "
                "tokens.")
OPENAI = ("This model's maximum context length is 8192 tokens. However, your messages resulted in "
          "9000 tokens. Please reduce the length of the messages.")
REQUESTED = ("This model's maximum context length is 4096 tokens. However, you requested 5000 "
             "tokens (4000 in the messages, 1000 in the completion). Please reduce the length of "
             "the messages or completion.")  # OpenAI's and vLLM's older words
VLLM_OUTPUT = ("This model's maximum context length is 262144 tokens. However, you requested 4096 "
               "output tokens and your prompt contains at least 258049 input tokens, for a total "
               "of at least 262145 tokens.")  # vLLM's newer


def test_llama_cpp_says_its_window_and_the_prompt_in_its_error_body():
    err = classify_status_error(status_error(400, {"error": {
        "code": 400, "message": LLAMA_CPP, "type": "exceed_context_size_error",
        "n_prompt_tokens": 9636, "n_ctx": 8192}}))
    assert said(err) == {"window": 8192, "prompt_tokens": 9636}
    assert err.message == f"the prompt is longer than the model's context window (400): {LLAMA_CPP}"


def test_the_body_wins_over_the_words_and_the_type_alone_is_enough():
    err = classify_status_error(status_error(400, {"error": {
        "message": "request too big", "type": "exceed_context_size_error",
        "n_prompt_tokens": 3000, "n_ctx": 2048}}))
    assert said(err) == {"window": 2048, "prompt_tokens": 3000}


@pytest.mark.parametrize("message, window, prompt", [
    (LLAMA_CPP, 8192, 9636),  # llama.cpp's words, without its body's numbers
    ("the input length exceeds the context length", None, None),  # Ollama
    (LM_STUDIO, 4096, 5000),
    (LM_STUDIO_KEEP, None, None),
    (VLLM_DECODER, 4096, 5000),
    (OPENAI, 8192, 9000),
])
def test_each_servers_words_give_the_window_and_the_prompt(message, window, prompt):
    assert CONTEXT_TOO_LONG.search(message)
    err = classify_status_error(status_error(400, {"error": {"message": message}}))
    assert said(err) == {"window": window, "prompt_tokens": prompt}
    assert message in err.message


@pytest.mark.parametrize("message, prompt", [(REQUESTED, 4000), (VLLM_OUTPUT, 258049)])
def test_the_prompt_tokens_are_the_prompts_not_the_requests(message, prompt):
    details = context_too_long(f"(400): {message}", None).details[0]
    assert details["prompt_tokens"] == prompt


def test_lm_studio_saying_it_in_a_plain_error_text_is_told_apart():
    err = classify_status_error(status_error(400, {"error": LM_STUDIO}))
    assert said(err) == {"window": 4096, "prompt_tokens": 5000}


@pytest.mark.parametrize("body", [
    {"n_ctx": True, "n_prompt_tokens": False},  # a bool is no count
    {"n_ctx": "8192", "n_prompt_tokens": -5},
    {"n_ctx": 0, "n_prompt_tokens": 10**9},
    "not an object",
    None,
])
def test_odd_numbers_in_a_body_are_not_believed(body):
    assert context_too_long("(400): too long", body).details[0] == {
        "window": None, "prompt_tokens": None}


@pytest.mark.parametrize("status", [401, 404, 429, 500])
def test_the_words_with_another_status_are_not_a_prompt_too_long(status: int):
    err = classify_status_error(status_error(status, {"error": {
        "message": LLAMA_CPP, "type": "exceed_context_size_error"}}))
    assert err.type != "LLMContextTooLong"


# ----- an error inside a stream that had begun -----


def stream_error(message: str, body: object = None) -> openai.APIError:
    request = httpx.Request("POST", "http://model.test/v1/chat/completions")
    return openai.APIError(message, request, body=body)


def test_a_reply_the_server_could_not_parse_is_a_format_error():
    message = ("Failed to parse input at pos 12: the model produced output that does not match "
               "the expected peg-native format")
    err = classify_stream_error(stream_error(message, {"code": 500, "message": message}))
    assert isinstance(err, FormatError) and str(err) == message


def test_a_prompt_too_long_said_in_the_stream_is_told_apart():
    err = classify_stream_error(stream_error(LLAMA_CPP, {
        "message": LLAMA_CPP, "type": "exceed_context_size_error", "n_ctx": 8192,
        "n_prompt_tokens": 9636}))
    assert isinstance(err, ApplicationError)
    assert said(err) == {"window": 8192, "prompt_tokens": 9636}
    assert "(in its stream)" in err.message


def test_any_other_error_in_the_stream_is_transient():
    err = classify_stream_error(stream_error("upstream connection reset", None))
    assert isinstance(err, ApplicationError) and err.type == "LLMTransientError"
    assert not err.non_retryable
    assert err.message == "model endpoint failed mid-stream: upstream connection reset"


def test_a_stream_errors_text_is_bounded_and_valid():
    err = classify_stream_error(stream_error("boom \ud800 " + "x" * 10_000))
    assert len(err.message) < 2200 and "\ud800" not in err.message


# ----- a model entry's own limits -----


@pytest.mark.parametrize("fields, problem", [
    ({"context_tokens": MIN_CONTEXT_TOKENS - 1}, "greater than or equal to 256"),
    ({"context_tokens": "lots"}, "valid integer"),
    ({"max_output_tokens": 0}, "greater than or equal to 1"),
    ({"timeout_s": 0}, "greater than 0"),
    ({"timeout_s": 3601}, "less than or equal to 3600"),
    ({"heartbeat_s": -1}, "greater than 0"),
    ({"heartbeat_s": 601}, "less than or equal to 600"),
    ({"price": {"input_per_mtok": -1, "output_per_mtok": 1}}, "greater than or equal to 0"),
    ({"price": {"input_per_mtok": 1}}, "output_per_mtok"),
    ({"free": True, "price": {"input_per_mtok": 1, "output_per_mtok": 2}},
     "an entry is free or has a price, not both"),
    ({"context_tokens": 4096, "max_output_tokens": 4096},
     "max_output_tokens must leave room for a prompt in context_tokens"),
    ({"window": 4096}, "Extra inputs are not permitted"),
])
def test_an_entrys_invalid_limits_are_refused_with_why(fields: dict, problem: str):
    with pytest.raises(ValidationError) as refused:
        ModelEntry(model="qwen", **fields)
    assert problem in str(refused.value)


def test_valid_limits_at_their_bounds_are_taken():
    entry = ModelEntry(model="qwen", context_tokens=MIN_CONTEXT_TOKENS, max_output_tokens=255,
                       timeout_s=3600, heartbeat_s=600, free=True)
    assert entry.limits() == EntryLimits(context_tokens=256, max_output_tokens=255,
                                         timeout_s=3600, heartbeat_s=600)


def test_an_agent_models_file_with_a_bad_limit_says_which(tmp_path: Path):
    path = tmp_path / "models.json"
    path.write_text(json.dumps({"models": {"local": {"model": "qwen", "context_tokens": 100}}}))
    with pytest.raises(ModelsError) as refused:
        Models.load(path)
    assert "AGENT_MODELS" in str(refused.value) and "context_tokens" in str(refused.value)


def test_max_tokens_is_sent_only_when_the_entry_sets_a_reply_size():
    assert ModelEntry(model="m", params={"temperature": 0}).call_params == {"temperature": 0}
    assert "max_tokens" not in ModelEntry(model="m").call_params
    assert ModelEntry(model="m", max_output_tokens=512, params={"temperature": 0}).call_params \
        == {"max_tokens": 512, "temperature": 0}


def test_the_limits_a_conversation_keeps_of_an_entry():
    assert ModelEntry(model="m").limits() is None
    assert ModelEntry(model="m").limits(window=8192) == EntryLimits(context_tokens=8192)
    own = ModelEntry(model="m", context_tokens=4096, timeout_s=600)
    assert own.limits(window=8192) == EntryLimits(context_tokens=4096, timeout_s=600)
    assert ModelEntry(model="m", free=True).limits() is None  # a price is no limit


def test_only_entries_with_limits_are_routed_with_them():
    models = Models({"default": ModelEntry(model="m")})
    assert model_routes(models, "q") == {}
    assert model_routes(models, "q", windows={"default": 2048}) == {
        "model_limits": {"default": EntryLimits(context_tokens=2048)}}
    assert model_routes(None, "q") == {}


# ----- a failed model call, as the user reads it -----


def activity_error(cause: BaseException, retry_state: RetryState | None) -> ActivityError:
    err = ActivityError("activity error", scheduled_event_id=5, started_event_id=6,
                        identity="worker", activity_type="llm_call", activity_id="1",
                        retry_state=retry_state)
    err.__cause__ = cause
    return err


def timeout(kind: TimeoutType) -> ActivityTimeout:
    return ActivityTimeout("activity timeout", type=kind, last_heartbeat_details=[])


def test_a_call_out_of_attempts_says_how_often_it_was_tried():
    err = activity_error(ApplicationError("model endpoint answered 503: busy",
                                          type="LLMTransientError"),
                         RetryState.MAXIMUM_ATTEMPTS_REACHED)
    assert model_failure(err, 6, 120, 10) == \
        "model call failed (tried 6 times): model endpoint answered 503: busy"


def test_a_call_past_its_deadline_points_at_timeout_s():
    reason = model_failure(activity_error(timeout(TimeoutType.START_TO_CLOSE), RetryState.TIMEOUT),
                           6, 90, 10)
    assert reason.startswith("model call failed: timed out (start-to-close)")
    assert "a call may take 90 s" in reason and "timeout_s on its entry" in reason
    assert "tried" not in reason


def test_a_call_with_no_heartbeat_points_at_heartbeat_s():
    reason = model_failure(activity_error(timeout(TimeoutType.HEARTBEAT),
                                          RetryState.MAXIMUM_ATTEMPTS_REACHED), 3, 120, 7.5)
    assert reason.startswith("model call failed (tried 3 times): timed out (heartbeat)")
    assert "no sign of the call for 7.5 s" in reason and "heartbeat_s on its entry" in reason


def test_a_rejected_request_says_asking_again_will_not_help():
    err = activity_error(ApplicationError("model endpoint rejected the request (400): bad tool",
                                          type="LLMRequestRejected", non_retryable=True),
                         RetryState.NON_RETRYABLE_FAILURE)
    assert model_failure(err, 6, 120, 10) == (
        "model call failed: model endpoint rejected the request (400): bad tool; the endpoint "
        "refuses the request itself: asking again will not help")


def test_other_failures_get_no_hint():
    reason = model_failure(activity_error(timeout(TimeoutType.SCHEDULE_TO_CLOSE), None), 6, 1, 1)
    assert reason == "model call failed: timed out (schedule-to-close)"
    err = activity_error(ApplicationError("the prompt is longer than the model's context window",
                                          type="LLMContextTooLong", non_retryable=True),
                         RetryState.NON_RETRYABLE_FAILURE)
    assert model_failure(err, 6, 1, 1) == (
        "model call failed: the prompt is longer than the model's context window")


# ----- an entry's price -----

USED = Usage(prompt_tokens=1000, completion_tokens=500, total_tokens=1500)


def test_a_free_entry_costs_nothing_even_for_a_model_with_a_price():
    priced = Prices().for_entry("https://api.openai.com/v1", free=True).priced("gpt-4o", USED)
    assert (priced.cost_usd, priced.cost_note, priced.unpriced_calls) == (0.0, None, 0)


def test_an_entrys_own_price_wins_over_agent_prices():
    prices = Prices(overrides={"qwen": ModelPrice(input_per_mtok=100, output_per_mtok=100)})
    own = ModelPrice(input_per_mtok=2, output_per_mtok=4)
    assert prices.for_entry("http://localhost:8080/v1", price=own).priced("qwen", USED).cost_usd \
        == pytest.approx(0.004)  # 1000 × $2 + 500 × $4, per million
    assert prices.for_entry(None).priced("qwen", USED).cost_usd == pytest.approx(0.15)


def test_no_price_gives_one_short_note_saying_what_to_set():
    prices = Prices().for_entry("http://localhost:8080/v1")
    priced = prices.priced("my-local-qwen-0000", USED)
    assert priced.cost_usd is None and priced.unpriced_calls == 1
    assert priced.cost_note == ("no price for 'my-local-qwen-0000': give its entry \"free\": true "
                                "or a \"price\" (AGENT_MODELS), or add it to AGENT_PRICES")
    twice = priced + prices.priced("my-local-qwen-0000", USED)
    assert twice.cost_note == priced.cost_note and twice.unpriced_calls == 2


# ----- status and watch -----


def status_of(usage: Usage, context: ContextUse | None = None, error: str | None = None
              ) -> ConversationStatus:
    return ConversationStatus(workflow_id="conv-1", status="idle", turn=1, steps=1, llm_calls=1,
                              tools_used=[], stop_reason="llm_error", final_answer=None,
                              usage=usage, error=error, context=context)


def line(shown: str, start: str) -> str:
    [found] = [ln for ln in shown.split("\n") if ln.startswith(start)]
    return found


def test_status_shows_the_failed_calls_beside_the_tokens():
    shown = render_status(status_of(Usage(failed_calls=2)))
    assert line(shown, "usage:") == ("usage: 0 tokens (0 prompt + 0 completion); 2 failed model "
                                     "call(s), whose tokens the endpoint did not report, cost: $0")
    assert "failed model call" not in render_status(status_of(Usage()))


def test_status_shows_the_models_window_even_before_a_prompt_was_counted():
    context = ContextUse(budget_tokens=7168, prompt_tokens=0, window_tokens=8192)
    assert line(render_status(status_of(Usage(), context)), "context:") == \
        "context: last prompt 0 of 7,168 tokens (the model's window: 8,192)"
    folded = ContextUse(budget_tokens=24_000, prompt_tokens=1234, folded_turns=2)
    assert line(render_status(status_of(Usage(), folded)), "context:") == \
        "context: last prompt 1,234 of 24,000 tokens; turns 1-2 folded into the summary"
    quiet = ContextUse(budget_tokens=24_000, prompt_tokens=0)
    assert "context:" not in render_status(status_of(Usage(), quiet))


def test_status_shows_an_unknown_cost_with_its_note():
    usage = Usage(cost_usd=None, cost_note="no price for 'qwen'", unpriced_calls=1)
    assert line(render_status(status_of(usage)), "usage:").endswith(
        "cost: unknown (no price for 'qwen')")


def watched(*events: StreamEvent) -> list[str]:
    out = io.StringIO()
    renderer = Renderer("conv-1", out)
    for event in events:
        renderer.render(event)
    return out.getvalue().splitlines()


def finished(**fields) -> StreamEvent:
    return StreamEvent(kind="turn_finished", turn=1, stop_reason="llm_error", **fields)


def test_watch_prints_the_error_a_turn_finished_with():
    assert watched(finished(tokens=0, cost_usd=0.0, error="model call failed (tried 3 times)")) == [
        "── turn 1 finished: llm_error (0 tokens, $0)",
        "error: model call failed (tried 3 times)"]


def test_watch_leaves_out_a_cost_it_does_not_know():
    assert watched(finished(tokens=1234, cost_usd=None)) == [
        "── turn 1 finished: llm_error (1,234 tokens)"]
    assert watched(finished(tokens=1234, cost_usd=0.0012)) == [
        "── turn 1 finished: llm_error (1,234 tokens, $0.0012)"]
    assert watched(finished()) == ["── turn 1 finished: llm_error"]


def test_watch_prints_an_answer_after_the_error_and_neither_drives_the_terminal():
    lines = watched(StreamEvent(kind="turn_finished", turn=2, stop_reason="answered",
                                tokens=10, text="fine", error="bad\x1b[2K\nsecond line"))
    assert lines == ["── turn 2 finished: answered (10 tokens)",
                     "error: bad\\u001b[2K", f"{CONTINUED}second line", "answer: fine"]
