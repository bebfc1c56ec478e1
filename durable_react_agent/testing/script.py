"""Script models and the pure, deterministic choice of the next scripted reply.

Kept free of I/O so the selection rules can be unit-tested and reasoned about
without a server: the same request messages always give the same reply.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel

from ..rules.prompts import SUMMARIZER_PROMPT
from ..rules.review import REVIEWER_MARK
from .intents import is_runtime_recall, read_intent
from .replies import ScriptedReply, ScriptedToolCall, message_text


class Scenario(BaseModel):
    """Replies for conversations whose first user message contains `trigger`."""

    trigger: str
    replies: list[ScriptedReply]
    summary_errors: list[int] = []  # statuses of its first summary requests, in order
    summary_hold: bool = False  # summary replies wait for `release()`
    # what the reviewer model (`AGENT_REVIEWER`) answers of this scenario's calls (None: it
    # passes them to a person)
    review: str | None = None


class Script(BaseModel):
    scenarios: list[Scenario] = []


class Selection(BaseModel):
    """The outcome of `select_reply`: which scenario (if any), which step, what reply."""

    trigger: str | None
    step: int
    reply: ScriptedReply
    kind: Literal["chat", "summary", "review"] = "chat"


def load_script(path: str | Path) -> Script:
    return Script.model_validate_json(Path(path).read_text(encoding="utf-8"))


def _text_of(messages: list[dict[str, Any]], role: str, last: bool) -> str:
    matching = [m for m in messages if m.get("role") == role]
    if not matching:
        return ""
    return message_text(matching[-1] if last else matching[0])


def _fill_template(content: str, messages: list[dict[str, Any]]) -> str:
    # str.replace, not str.format: scripted content may contain JSON braces.
    return (
        content.replace("{last_tool}", _text_of(messages, "tool", last=True))
        .replace("{last_user}", _text_of(messages, "user", last=True))
        .replace("{first_user}", _text_of(messages, "user", last=False))
    )


_DROPPED = re.compile(r"^\[(\d+) earlier tool steps dropped")
_FOLDED = re.compile(r"^\[Summary of turns \d+-\d+ of this conversation \((\d+) model steps\)")
_FIRST_REQUEST = re.compile(r"^First request: (.*)$", re.MULTILINE)
_USER_LINE = re.compile(r"^User: (.*)$", re.MULTILINE)
_TURNS = re.compile(r"^Turns (\d+)-(\d+) to fold in:$", re.MULTILINE)
SUMMARIZER_MARK = SUMMARIZER_PROMPT[:60]


def _dropped_steps(messages: list[dict[str, Any]]) -> int:
    """Steps the agent's context compaction or summary removed, so the script keeps its place."""
    steps = 0
    for msg in messages:
        if msg.get("role") != "system":
            continue
        text = message_text(msg)
        found = _DROPPED.match(text) or _FOLDED.match(text)
        steps += int(found.group(1)) if found else 0
    return steps


def is_summary_request(messages: list[dict[str, Any]]) -> bool:
    return bool(messages) and message_text(messages[0]).startswith(SUMMARIZER_MARK)


NO_REVIEW = '{"verdict": "ask", "reason": "no review was scripted"}'


def select_review(script: Script, messages: list[dict[str, Any]]) -> Selection | None:
    """The reviewer's answer, for a review request: its scenario's (found in the request the
    call is reviewed against), else a pass to a person."""
    if not messages or not message_text(messages[0]).startswith(REVIEWER_MARK):
        return None
    shown = _text_of(messages, "user", last=True)
    scenario = next((s for s in script.scenarios if s.trigger in shown), None)
    answer = scenario.review if scenario is not None and scenario.review is not None else NO_REVIEW
    return Selection(trigger=scenario.trigger if scenario else None, step=-1,
                     reply=ScriptedReply(content=answer), kind="review")


def select_summary(script: Script, messages: list[dict[str, Any]]) -> Selection:
    """A deterministic summary: the first request (kept from summary to summary, so the scenario
    stays known) and the latest one."""
    text = _text_of(messages, "user", last=True)
    earlier = _FIRST_REQUEST.search(text.split("\n\nTurns ")[0])
    users = _USER_LINE.findall(text)
    first = earlier.group(1) if earlier else (users[0] if users else "")
    turns = _TURNS.search(text)
    summary = (f"First request: {first[:160]}\n"
               f"Folded through turn {turns.group(2) if turns else '?'}; latest request: "
               f"{(users[-1] if users else '')[:160]}")
    scenario = next((s for s in script.scenarios if s.trigger in first), None)
    reply = ScriptedReply(content=summary, errors=scenario.summary_errors if scenario else [],
                          hold=bool(scenario and scenario.summary_hold))
    return Selection(trigger=scenario.trigger if scenario else None, step=-1, reply=reply,
                     kind="summary")


def select_reply(script: Script, messages: list[dict[str, Any]], tools_offered: bool = True
                 ) -> Selection:
    """Pick the reply for a request: scenario by first user message, step by assistant turns
    (counting those the context folded or dropped); a summary request gets a summary. With no
    scenario, the intent reader answers what the latest user message asks."""
    if is_summary_request(messages):
        return select_summary(script, messages)
    review = select_review(script, messages)
    if review is not None:
        return review
    selection = _select_step(script, messages, tools_offered)
    without = selection.reply.content_without_tools
    if tools_offered or without is None:
        return selection
    reply = ScriptedReply(content=_fill_template(without, messages))
    return selection.model_copy(update={"reply": reply})


def _select_step(script: Script, messages: list[dict[str, Any]], tools_offered: bool
                 ) -> Selection:
    first_user = _text_of(messages, "user", last=False)
    step = sum(1 for m in messages if m.get("role") == "assistant" and not is_runtime_recall(m)) \
        + _dropped_steps(messages)
    folded = next((found for msg in messages if msg.get("role") == "system"
                   and (found := _FIRST_REQUEST.search(message_text(msg)))), None)
    known = first_user + ("\n" + folded.group(1) if folded else "")  # a summary keeps the scenario
    scenario = next((s for s in script.scenarios if s.trigger in known), None)
    if scenario is None:
        return Selection(trigger=None, step=step, reply=read_intent(messages, tools_offered))
    if step >= len(scenario.replies):
        exhausted = (
            f"The script for {scenario.trigger!r} is exhausted at step {step} "
            f"(it has {len(scenario.replies)} replies)."
        )
        return Selection(trigger=scenario.trigger, step=step, reply=ScriptedReply(content=exhausted))
    reply = scenario.replies[step]
    update: dict[str, Any] = {}
    if reply.content is not None:
        update["content"] = _fill_template(reply.content, messages)
    if any(isinstance(c.arguments, dict) for c in reply.tool_calls):
        update["tool_calls"] = [_fill_arguments(c, messages) for c in reply.tool_calls]
    return Selection(trigger=scenario.trigger, step=step, reply=reply.model_copy(update=update))


def _fill_arguments(call: ScriptedToolCall, messages: list[dict[str, Any]]) -> ScriptedToolCall:
    """Templates in string values of dict arguments; raw-string arguments stay verbatim."""
    if isinstance(call.arguments, str):
        return call
    filled = {
        k: _fill_template(v, messages) if isinstance(v, str) else v for k, v in call.arguments.items()
    }
    return call.model_copy(update={"arguments": filled})


def tool_call_payloads(step: int, reply: ScriptedReply) -> list[dict[str, Any]]:
    """OpenAI-shaped tool calls with deterministic ids `call_{step}_{i}`."""
    return [
        {
            "id": f"call_{step}_{i}" if call.id is None else call.id,
            "type": "function",
            "function": {"name": call.name, "arguments": call.arguments_text()},
        }
        for i, call in enumerate(reply.tool_calls)
    ]


def usage(
    messages: list[dict[str, Any]], tools: list[Any] | None, reply: ScriptedReply
) -> dict[str, Any]:
    """A rough, deterministic token count (about 4 characters per token)."""
    prompt = math.ceil(len(json.dumps(messages) + json.dumps(tools or [])) / 4)
    completion_text = (reply.content or "") + "".join(c.arguments_text() for c in reply.tool_calls)
    completion = max(1, math.ceil(len(completion_text) / 4))
    # Like an endpoint with prefix caching: the messages before the last were seen before.
    cached = math.ceil(len(json.dumps(messages[:-1])) / 4) if len(messages) > 1 else 0
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": min(cached, prompt)},
    }
