"""What the model is shown, kept within a token budget for any number of turns. Pure functions.

A step sends the system prompt, the running summary of the turns folded away, the latest turns
verbatim, and the current turn with its older tool rounds compacted (`rules.compaction`).
When that would pass the budget, the oldest turns are folded into the summary, down to a low-water
mark so that folding is occasional. The latest tool round gets a share of what is left, so one
step's prompt stays within the budget unless the user's message alone passes it. Estimates are
scaled by what the endpoint reported for the previous request (`token_ratio`).

Whether a user's message can fit at all is told three ways. Where the model's server counted it
(`counted`, after a refusal), on that count. At the door (a message sent, before any count can be
asked), on a count that errs toward letting it through (`LENIENT_RATIO`), not on the ratio: one
calibrated on a whole prompt carries the cost of the chat template and of the tool schemas, and
scaled a long message's estimate by half again. A message let through that still cannot fit is
left out at its turn, on the server's count.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from ..contract import ChatMessage
from ..contract.bounds import (
    MAX_CONTEXT_BUDGET_TOKENS,
    MAX_SUMMARY_BYTES,
    clip_bytes,
    json_size,
    text_size,
)
from ..contract.state import ContextState
from .compaction import (
    CHARS_PER_TOKEN,
    MESSAGE_OVERHEAD_TOKENS,
    NOTE_RESERVE_TOKENS,
    compact,
    estimate_tokens,
    model_steps,
)

LOW_WATER = 0.5  # a fold leaves the prompt at most this share of the budget
# The door counts a text at 6 characters a token: prose takes 4 to 5 with the tokenizers of
# today's models (Qwen, Llama 3, GPT-4o), code and other languages fewer; only text such as
# long runs of one character packs more into a token.
LENIENT_CHARS_PER_TOKEN = 6
LENIENT_RATIO = CHARS_PER_TOKEN / LENIENT_CHARS_PER_TOKEN
MAX_COUNTED = 8  # user messages whose counts a conversation keeps
MIN_RATIO, MAX_RATIO = 0.25, 8.0
MIN_SHARE_BYTES = 256  # what an observation keeps even when the budget is spent
CUT_MARKER_BYTES = 48  # "…[cut: observation of N bytes]"


@dataclass(frozen=True)
class Budget:
    """The context budget in the endpoint's tokens, seen through the calibrated estimate."""

    tokens: int
    ratio: float = 1.0  # endpoint tokens per estimated token
    tools: int = 0  # estimated tokens of the tool schemas every request carries

    @property
    def room(self) -> int:
        """Estimated tokens the messages may take."""
        return int(self.tokens / self.ratio) - self.tools

    @property
    def summary_tokens(self) -> int:
        """The most the running summary may take (what the summarizer is asked for)."""
        return max(64, min(self.tokens // 8, MAX_SUMMARY_BYTES // CHARS_PER_TOKEN))


def budget_tokens(configured: int | None) -> int:
    """The budget in force: the configured one, within what one model request may carry."""
    return min(configured or MAX_CONTEXT_BUDGET_TOKENS, MAX_CONTEXT_BUDGET_TOKENS)


OUTPUT_RESERVE_TOKENS = 1024  # what a reply may take of a known window, when its entry says not
MIN_FITTED_TOKENS = 128


def fitted_budget(tokens: int, window: int | None, max_output: int | None = None) -> int:
    """The budget a prompt keeps to: the conversation's own, or, when the model's window is
    known and smaller, the window less what the reply may take (`max_output`, else a quarter
    of the window up to `OUTPUT_RESERVE_TOKENS`)."""
    if window is None:
        return tokens
    reserve = max_output or min(OUTPUT_RESERVE_TOKENS, window // 4)
    return min(tokens, max(MIN_FITTED_TOKENS, window - reserve))


def text_digest(text: str) -> str:
    """What a text's count is kept under (`ContextState.counted`), in the worker that counts
    it and in the workflow alike."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def counted_tokens(text: str, ctx: ContextState) -> int | None:
    """A user's message's tokens as the model's server counted them, if it did."""
    return ctx.counted.get(text_digest(text)) if ctx.counted else None


def with_counts(ctx: ContextState, counts: dict[str, int]) -> dict[str, int]:
    """The counts a conversation keeps once the server counted `counts` (the latest few)."""
    kept = {k: v for k, v in ctx.counted.items() if k not in counts}
    fresh = {k: v for k, v in counts.items()
             if isinstance(k, str) and len(k) <= 64 and type(v) is int and v > 0}
    return dict(list({**kept, **fresh}.items())[-MAX_COUNTED:])


def message_tokens(text: str, ctx: ContextState, budget: Budget) -> int | None:
    """The endpoint tokens a user's message takes (as the server counted it, else as estimated),
    when it is what cannot fit: the system prompt and tools fit the budget without it, not with
    it, so no fold makes room for it. None when it fits, or when even the system prompt and
    tools do not."""
    need = estimate_tokens([ChatMessage(role="user", content=text)])
    counted = counted_tokens(text, ctx)
    if counted is not None:
        need = counted / budget.ratio + MESSAGE_OVERHEAD_TOKENS
    fixed = estimate_tokens([ChatMessage(role="system", content=ctx.system_prompt)]) + \
        NOTE_RESERVE_TOKENS
    if fixed > budget.room or fixed + need <= budget.room:
        return None
    return counted if counted is not None else int(need * budget.ratio)


def left_out(ctx: ContextState, budget: Budget) -> tuple[list[ChatMessage], int]:
    """The messages with each user message that cannot fit the budget even alone replaced by a
    note (it would fail every later prompt too), and the tokens of the longest left out (0:
    none was)."""
    messages, longest = [], 0
    for m in ctx.messages:
        tokens = (message_tokens(m.content, ctx, budget)
                  if m.role == "user" and isinstance(m.content, str) else None)
        if tokens is None:
            messages.append(m)
            continue
        longest = max(longest, tokens)
        about = "" if counted_tokens(m.content or "", ctx) == tokens else "about "
        messages.append(ChatMessage(role="user", content=(
            f"[a message of {about}{tokens:,} tokens was left out here: it is longer than the "
            f"model can read ({budget.tokens:,} tokens)]")))
    return messages, longest


def tools_tokens(tools: list[dict[str, Any]]) -> int:
    return len(json.dumps(tools, separators=(",", ":"))) // CHARS_PER_TOKEN if tools else 0


def calibrated_ratio(sent_estimate: int, reported: int, previous: float) -> float:
    """Endpoint tokens per estimated token, from what the endpoint counted for the last request."""
    if reported <= 0 or sent_estimate <= 0:
        return previous
    return min(MAX_RATIO, max(MIN_RATIO, reported / sent_estimate))


# ----- the shape of the context -----


def current_turn_start(messages: list[ChatMessage]) -> int:
    """Where the current (latest) turn begins: its user message."""
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].role == "user":
            return i
    return 0


def last_request(ctx: ContextState) -> str | None:
    """The latest message of the conversation's person, if the context holds one."""
    users = [m for m in ctx.messages if m.role == "user"]
    return users[-1].content if users else None


def turn_starts(messages: list[ChatMessage]) -> list[int]:
    return [i for i, m in enumerate(messages) if m.role == "user"]


def summary_message(ctx: ContextState) -> ChatMessage | None:
    if not ctx.folded_turns:
        return None
    lines = [f"[Summary of turns 1-{ctx.folded_turns} of this conversation ({ctx.folded_steps} "
             "model steps), folded to bound the context]"]
    if ctx.dropped_turns:
        lines.append(f"[{ctx.dropped_turns} of those turns were dropped without a summary: "
                     f"{ctx.drop_reason}]")
    lines.append(ctx.summary or "(no summary yet)")
    return ChatMessage(role="system", content="\n".join(lines))


def head(ctx: ContextState) -> list[ChatMessage]:
    summary = summary_message(ctx)
    system = ChatMessage(role="system", content=ctx.system_prompt)
    return [system] if summary is None else [system, summary]


def shown(ctx: ContextState) -> list[ChatMessage]:
    """The whole context as stored (what the `messages` query answers)."""
    return [*head(ctx), *ctx.messages]


# ----- folding -----


def plan_fold(ctx: ContextState, budget: Budget) -> int:
    """How many of the oldest turns to fold into the summary before the next step; 0 for none.

    The current turn never folds. When the prompt would pass the budget, fold the fewest oldest
    turns that bring it down to the low-water mark (counting the summary at its largest), or all
    of them."""
    start = current_turn_start(ctx.messages)
    older, current = ctx.messages[:start], ctx.messages[start:]
    if not older:
        return 0
    if estimate_tokens(head(ctx)) + estimate_tokens(older) + estimate_tokens(current) <= budget.room:
        return 0
    system = ChatMessage(role="system", content=ctx.system_prompt)
    kept = estimate_tokens([system]) + budget.summary_tokens + estimate_tokens(current)
    target = budget.room * LOW_WATER
    starts = [i for i in turn_starts(older) if i > 0]  # a turn's messages run to the next start
    for k, cut in enumerate(starts, start=1):
        if kept + estimate_tokens(older[cut:]) <= target:
            return k
    return len(starts) + 1


def fold_cut(ctx: ContextState, turns: int) -> int:
    """The index of the first message kept when the oldest `turns` turns fold."""
    starts = [i for i in turn_starts(ctx.messages) if i > 0]
    current = current_turn_start(ctx.messages)
    return starts[turns - 1] if turns <= len(starts) and starts[turns - 1] <= current else current


def folded(ctx: ContextState, cut: int, summary: str | None, drop_reason: str | None = None
           ) -> ContextState:
    """The context once `messages[:cut]` left it: into `summary`, or dropped (`drop_reason`)."""
    gone = ctx.messages[:cut]
    turns = max(1, sum(1 for m in gone if m.role == "user"))
    update: dict[str, Any] = {
        "messages": ctx.messages[cut:],
        "folded_turns": ctx.folded_turns + turns,
        "folded_steps": ctx.folded_steps + model_steps(gone),
    }
    if drop_reason is None:
        update["summary"] = summary
    else:
        update["dropped_turns"] = ctx.dropped_turns + turns
        update["drop_reason"] = drop_reason
    return ctx.model_copy(update=update)


def answer_open_calls(messages: list[ChatMessage], observation: str,
                      by_call: dict[str, str] | None = None) -> list[ChatMessage]:
    """The messages with a tool message for every call of the last round that has none (after
    an interrupted round), so no call is left without its result: `by_call`'s for its calls
    (those that were running), `observation` for the others."""
    by_call = by_call or {}
    start = next((i for i in range(len(messages) - 1, -1, -1)
                  if messages[i].role == "assistant" and messages[i].tool_calls), None)
    if start is None:
        return messages
    answered = {m.tool_call_id for m in messages[start + 1:] if m.role == "tool"}
    missing = [ChatMessage(role="tool", tool_call_id=c.id, content=by_call.get(c.id, observation))
               for c in messages[start].tool_calls or [] if c.id not in answered]
    return [*messages, *missing]


# ----- the next step -----


def prompt(ctx: ContextState, budget: Budget) -> tuple[list[ChatMessage], list[ChatMessage]]:
    """The messages of the next step, and the context's messages with the current turn compacted
    as sent (kept, so the context holds no more than the model was last shown)."""
    start = current_turn_start(ctx.messages)
    older, current = ctx.messages[:start], ctx.messages[start:]
    first = head(ctx)
    room = budget.room - estimate_tokens(first) - estimate_tokens(older)
    current = compact(current, max(room, 0))
    return [*first, *older, *current], [*older, *current]


def observation_share(ctx: ContextState, budget: Budget, call_message: ChatMessage) -> int:
    """Bytes each observation of the round `call_message` starts may take, so that the next step
    fits: what the budget leaves after the system prompt, the summary, the user's message and
    the calls (older turns fold and older rounds compact to make room)."""
    calls = len(call_message.tool_calls or []) or 1
    start = current_turn_start(ctx.messages)
    user = ctx.messages[start] if ctx.messages else None
    summary = summary_message(ctx)
    may_fold = start > 0  # older turns may fold into a summary as large as its bound
    fixed = (
        estimate_tokens([m for m in (user, call_message) if m is not None])
        + estimate_tokens([ChatMessage(role="system", content=ctx.system_prompt)])
        + max(estimate_tokens([summary]) if summary else 0,
              budget.summary_tokens if may_fold else 0)
        + NOTE_RESERVE_TOKENS + calls * MESSAGE_OVERHEAD_TOKENS
    )
    return max(MIN_SHARE_BYTES, (budget.room - fixed) // calls * CHARS_PER_TOKEN)


# ----- the carry -----


def fit_bytes(ctx: ContextState, max_bytes: int, reason: str) -> ContextState:
    """The context within `max_bytes` of JSON, deterministically: drop the oldest turns with a
    note, then the current turn's older rounds, then cut the latest observations, the largest
    first (`level`)."""
    sizes = [json_size(m) + 1 for m in ctx.messages]
    slack = json_size(reason) + 64  # the drop note, and counters that grow
    fixed = json_size(ctx.model_copy(update={"messages": []})) + slack
    if fixed + sum(sizes) <= max_bytes:
        return ctx
    start = current_turn_start(ctx.messages)
    cut, left = 0, fixed + sum(sizes)
    for turn_start in [i for i in turn_starts(ctx.messages) if 0 < i <= start] or [start]:
        cut, left = turn_start, fixed + sum(sizes[turn_start:])
        if left <= max_bytes:
            break
    if cut:
        ctx = folded(ctx, cut, None, reason)
    if left <= max_bytes:
        return ctx
    ctx = ctx.model_copy(update={"messages": compact(ctx.messages, 0)})
    over = json_size(ctx) - max_bytes
    tools = [i for i, m in enumerate(ctx.messages) if m.role == "tool"]
    if over <= 0 or not tools:
        return ctx
    messages = list(ctx.messages)
    sizes = [text_size(messages[i].content or "") for i in tools]
    cap = level(sizes, sum(sizes) - over - len(tools) * CUT_MARKER_BYTES)
    for i in tools:
        messages[i] = messages[i].model_copy(update={
            "content": clip_bytes(messages[i].content or "", cap + CUT_MARKER_BYTES, "observation")})
    return ctx.model_copy(update={"messages": messages})


def level(sizes: list[int], total: int) -> int:
    """The largest cap such that the sizes, each cut to the cap, add up to at most `total`."""
    remaining, left = max(total, 0), len(sizes)
    for size in sorted(sizes):
        if size * left > remaining:
            return remaining // left
        remaining -= size
        left -= 1
    return max(sizes, default=0)
