"""What an MCP server's sampling requests may spend of a conversation's budgets. Pure.

The calls of one round that may sample split what is left between them: each is granted, as it
starts, its share of what neither the conversation used nor the calls in flight were granted
(`call_grant`, the split subagents use too). Within its grant a request counts its prompt as
well as its answer (`answer_room`), and a cost budget is never spent on a model whose price is
unknown: a conversation with a cost budget cannot count it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from ..contract.models import SamplingGrant, Usage
from .stopping import child_share, dollars, over_budget


def call_grant(model: str | None, max_total_tokens: int | None, max_cost_usd: float | None,
               used: Usage, in_flight: Iterable[SamplingGrant], starting: int) -> SamplingGrant:
    """One call's grant: its share of what is left of the conversation's budgets, split
    evenly with the `starting - 1` other calls of its round that may sample and have not
    started; nothing when the budgets are spent, or cannot be counted (as the model's own calls
    stop there: `rules.stopping.over_budget`)."""
    held = list(in_flight)
    spent = over_budget(used, max_total_tokens, max_cost_usd)
    tokens = child_share(max_total_tokens, used.total_tokens,
                         sum(g.tokens_left or 0 for g in held), starting)
    usd = child_share(max_cost_usd, used.known_cost, sum(g.usd_left or 0.0 for g in held),
                      starting)
    return SamplingGrant(model=model, tokens_left=None if tokens is None else int(tokens),
                         usd_left=None if usd is None else round(usd, 10), spent=spent)


@dataclass(frozen=True)
class RequestPrice:
    """What one request costs at a model entry: its prompt, and each token of its answer."""

    prompt_usd: float
    usd_per_answer_token: float


def answer_room(grant: SamplingGrant, used: Usage, prompt_tokens: int,
                price: RequestPrice | None) -> int | str | None:
    """How many tokens the answer to a request may take within its call's grant, having
    `used` already and its prompt to pay for (`price`: at the entry that would answer, None
    if unknown); None if no budget bounds it; or why it may not be answered."""
    if grant.spent is not None:
        return grant.spent
    room: int | None = None
    if grant.tokens_left is not None:
        if used.unmetered_calls:
            return ("a model call of this tool call reported no token usage, so the "
                    "conversation's token budget cannot be enforced")
        left = grant.tokens_left - used.total_tokens
        if left <= 0:
            return "the conversation's token budget is used up"
        room = left - prompt_tokens
        if room < 1:
            return (f"the request's prompt (about {prompt_tokens:,} tokens) leaves no room for an "
                    f"answer: this call has {left:,} left of the conversation's token budget")
    if grant.usd_left is not None:
        left_usd = grant.usd_left - used.known_cost
        if left_usd <= 0:
            return "the conversation's cost budget is used up"
        if price is None:
            return ("the model's price is unknown, and a conversation with a cost budget "
                    "cannot spend on a model whose cost it cannot count")
        if price.usd_per_answer_token > 0:
            # (rounded first: dollars are counted to 10 places, and 9.999999 tokens are 10)
            affordable = math.floor(round(
                (left_usd - price.prompt_usd) / price.usd_per_answer_token, 6))
            if affordable < 1:
                return (f"the request's prompt and an answer cost more than the "
                        f"{dollars(left_usd)} this call has left of the conversation's budget")
            room = affordable if room is None else min(room, affordable)
        elif price.prompt_usd > left_usd:
            return (f"the request's prompt costs more than the {dollars(left_usd)} this call "
                    "has left of the conversation's budget")
    return room
