"""Pure decisions of the ReAct loop: no I/O, no clock, no randomness; unit-tested without a server."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ..contract import ChatMessage, ToolCall, ToolDefinition
from ..contract.bounds import (
    HANDOVER_BYTES,
    HANDOVER_EVENTS,
    MAX_HANDOVER_EVENTS,
    valid_json,
)
from .schemas import argument_problem

MAX_ECHOED_ARGS = 300
MAX_CALL_REMINDERS = 1  # a turn's reminders of a call written in a shape that was not read


@dataclass(frozen=True)
class ReadyCall:
    """A tool call whose tool exists and whose arguments match its schema."""

    call: ToolCall
    tool: ToolDefinition
    arguments: dict[str, Any]


@dataclass(frozen=True)
class InvalidCall:
    """A tool call the model must correct; `observation` tells it how."""

    call: ToolCall
    observation: str


@dataclass(frozen=True)
class RunTools:
    calls: list[ToolCall]


@dataclass(frozen=True)
class FinalAnswer:
    text: str
    stop_reason: str


def history_full(events: int, size: int, max_events: int = HANDOVER_EVENTS) -> bool:
    """Whether a run's history is large enough to hand over to a fresh run."""
    return events >= min(max_events, MAX_HANDOVER_EVENTS) or size >= HANDOVER_BYTES


def tools_offered(step: int, max_steps: int) -> bool:
    """Tools are offered on every step but the last, which must produce an answer."""
    return step < max_steps


def next_move(
    message: ChatMessage, offered_tools: bool, forced_reason: str | None = None
) -> RunTools | FinalAnswer:
    """The next move after a model reply: a reply with tool calls continues the loop; anything
    else ends the turn. A reply to a call made without tools (the last step, or after a stopping
    rule) always ends it."""
    calls = message.tool_calls or []
    if calls and offered_tools:
        return RunTools(calls)
    reason = forced_reason or ("answered" if offered_tools else "max_steps")
    return FinalAnswer(text=message.content or "", stop_reason=reason)


def validate_arguments(tool: ToolDefinition, arguments: Any) -> str | None:
    """The reason `arguments` does not fit the tool's schema, or None when they do."""
    return argument_problem(tool.parameters, arguments)


def check_tool_call(call: ToolCall, catalog: dict[str, ToolDefinition]) -> ReadyCall | InvalidCall:
    """Resolve a model's tool call against the catalog, or explain what is wrong with it."""
    name = call.function.name
    tool = catalog.get(name)
    if tool is None:
        available = ", ".join(sorted(catalog)) or "none"
        return InvalidCall(call, f"Error: unknown tool '{name}'. Available tools: {available}.")
    raw = call.function.arguments.strip() or "{}"
    try:
        arguments = valid_json(json.loads(raw))  # "\ud800" is valid JSON, not valid text
    except (ValueError, RecursionError) as exc:  # not JSON; or numbers, nesting past the limits
        why = f"{exc.msg} at position {exc.pos}" if isinstance(exc, json.JSONDecodeError) else (
            str(exc) or type(exc).__name__)
        return InvalidCall(
            call,
            f"Error: the arguments of {name} are not valid JSON ({_clip(why)}): {_clip(raw)}. "
            "Send a JSON object matching the tool's schema.",
        )
    problem = validate_arguments(tool, arguments)
    if problem is not None:
        schema = json.dumps(tool.parameters, separators=(",", ":"))
        return InvalidCall(
            call,
            f"Error: invalid arguments for {name}: {problem}. Expected schema: {schema}",
        )
    return ReadyCall(call, tool, arguments)


def describe_call(name: str, arguments: dict[str, Any], limit: int = 60) -> str:
    """A short one-line rendering such as `get_weather(location=Beijing)` for UI summaries."""
    inner = ", ".join(f"{k}={_scalar(v)}" for k, v in arguments.items())
    text = f"{name}({inner})"
    return text if len(text) <= limit else text[: limit - 1] + "…"


def tool_failure_observation(tool: ToolDefinition, reason: str, attempts: int) -> str:
    """The observation for a tool activity that failed for good."""
    if tool.retry_safe:
        return f"Error: {tool.name} failed after {attempts} attempt(s): {reason}"
    return (
        f"Error: {tool.name} failed and was not retried because it is not idempotent; "
        f"its outcome is unknown: {reason}"
    )


def _scalar(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))


def _clip(text: str) -> str:
    return text if len(text) <= MAX_ECHOED_ARGS else text[:MAX_ECHOED_ARGS] + "…"


def call_reminder(tools: list[str], in_prose: bool = False) -> str:
    """What the model reads after a reply that wrote a call of `tools` in its text in a shape that
    could not be read (`in_prose`: said in words that it calls them): that nothing ran, and a
    shape that is read."""
    names = ", ".join(tools)
    looks = (f"Your reply says to call {names}, but no tool ran: words are not a call." if in_prose
             else f"Your reply looks like a call of {names}, but no tool ran: it could not be "
                  "read as a call.")
    return (f"{looks} To run a tool, call it through the tools you were given, or write exactly "
            f'{{"name": "{tools[0]}", "arguments": {{...}}}} with its arguments as a JSON object. '
            "To answer instead, answer in words, without writing a call.")


def unread_calls_error(tools: list[str], cut: bool = False) -> str:
    """The turn's note when the model kept writing a call that could not be read (`cut`: its
    reply was cut off at its output limit)."""
    why = " (the reply was cut off at the model's output limit)" if cut else ""
    return (f"the model wrote a call of {', '.join(tools)} in its answer, but it could not be "
            f"read{why} and did not run: nothing was done")


def over_the_step_limit(calls: list[ToolCall], max_calls: int | None) -> dict[str, str]:
    """The calls of a step past `max_calls` (`max_calls_per_step`), each with what the model
    reads: they are not run, and it may make them in its next step."""
    if max_calls is None or len(calls) <= max_calls:
        return {}
    why = (f"Error: not run: a step may make at most {max_calls} tool calls and this one made "
           f"{len(calls)}; make the calls left in your next step")
    return {c.id: why for c in calls[max_calls:]}
