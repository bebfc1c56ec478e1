"""What a conversation takes in at its start, bounded at the edge: settings beyond their ceilings
are brought within them (with a notice where that changes what the caller asked for), and a first
message over the size limit is refused, not run. Pure functions."""

from __future__ import annotations

from ..contract import ConversationInput, ForkPoint, ToolDefinition
from ..contract.bounds import (
    MAX_APPROVER_BYTES,
    MAX_CONTEXT_BUDGET_TOKENS,
    MAX_MODEL_NAME_BYTES,
    MAX_OBSERVATION_BYTES,
    MAX_SYSTEM_PROMPT_BYTES,
    MAX_TOOL_NAME_BYTES,
    Limits,
    check_message,
    clip,
    clip_bytes,
    keep_within,
    text_size,
)
from ..contract.state import ContextState, ConversationState, TurnState
from .prompts import DEFAULT_SYSTEM_PROMPT


def settled_input(inp: ConversationInput, limits: Limits) -> tuple[ConversationInput, list[str]]:
    """The input with every setting within its ceiling, and notices of what had to change."""
    notices: list[str] = []
    update: dict = {
        "max_observation_bytes": min(inp.max_observation_bytes, MAX_OBSERVATION_BYTES),
        "model": clip(inp.model, MAX_MODEL_NAME_BYTES),
        "owner": clip(inp.owner, MAX_APPROVER_BYTES),  # compared with approvers, as clipped
    }
    if inp.context_budget_tokens is not None:
        update["context_budget_tokens"] = min(inp.context_budget_tokens, MAX_CONTEXT_BUDGET_TOKENS)
    if inp.system_prompt is not None:
        update["system_prompt"] = clip_bytes(inp.system_prompt, MAX_SYSTEM_PROMPT_BYTES, "system prompt")
        if update["system_prompt"] != inp.system_prompt:
            notices.append(f"the system prompt was cut to {MAX_SYSTEM_PROMPT_BYTES // 1024} KiB")
    names = inp.approval.auto_approve
    if limits.auto_approve is not None:
        kept = [n for n in names if text_size(n) <= MAX_TOOL_NAME_BYTES][: limits.auto_approve]
        if kept != names:
            notices.append(f"the approval policy names {len(names)} tools to auto-approve; "
                           f"only the first {len(kept)} valid names count")
            update["approval"] = inp.approval.model_copy(update={"auto_approve": kept})
    return inp.model_copy(update=update), notices


def first_state(inp: ConversationInput, limits: Limits, notices: list[str],
                default_prompt: str = DEFAULT_SYSTEM_PROMPT) -> ConversationState:
    """The state a run starts from: carried by continue-as-new, a fork's, or new with the first
    message (`default_prompt`: the system prompt, unless it names one)."""
    if inp.state is not None:
        return inp.state
    if inp.carry is not None:
        return inp.carry.to_state(default_prompt)
    if inp.fork is not None:
        state = forked_state(inp.fork, inp.system_prompt, default_prompt)
    else:
        state = ConversationState(
            context=ContextState(system_prompt=inp.system_prompt or default_prompt))
    for notice in notices:
        state.notice(notice)
    if inp.fork is not None:  # it goes on with a turn: it has no first message to take
        return state
    refusal = check_message(inp.prompt, limits.message_bytes) if limits.message_bytes else None
    if refusal is None:
        state.inbox.append(inp.prompt)
    else:
        state.notice(f"the first message was refused: {refusal}")
    return state


def forked_state(fork: ForkPoint, system_prompt: str | None,
                 default_prompt: str = DEFAULT_SYSTEM_PROMPT) -> ConversationState:
    """A fork's first state: the original's messages before the step (its system prompt replaced
    by the fork's, if it has one), and the original's turn under way, to be thought on."""
    messages = list(fork.messages)
    system = default_prompt
    if messages and messages[0].role == "system":
        system = messages.pop(0).content or system
    return ConversationState(
        context=ContextState(system_prompt=system_prompt or system, messages=messages),
        current=TurnState(number=fork.turn, in_progress=True))


def admitted_tools(found: list[ToolDefinition], limits: Limits) -> tuple[list[ToolDefinition], list[str]]:
    """The discovered tools a conversation keeps, and notices of those it leaves out: names no
    model accepts, and what passes the catalog's size bound."""
    if limits.catalog_bytes is None:
        return found, []
    named = [t for t in found if text_size(t.name) <= MAX_TOOL_NAME_BYTES]
    kept, too_many = keep_within(named, limits.catalog_bytes)
    notices = []
    if len(named) < len(found):
        notices.append(f"{len(found) - len(named)} tool(s) left out: names over "
                       f"{MAX_TOOL_NAME_BYTES} bytes")
    if too_many:
        notices.append("tools left out, past the catalog's size bound: "
                       + ", ".join(t.name for t in too_many))
    return kept, notices
