"""The `summarize` activity's prompt: the summary so far and the turns to fold in, as text."""

from __future__ import annotations

from ..contract import ChatMessage, SummaryRequest
from ..rules.prompts import SUMMARIZER_PROMPT

WORDS_PER_TOKEN = 0.75


def summary_messages(request: SummaryRequest) -> list[dict[str, str]]:
    words = max(50, int(request.max_tokens * WORDS_PER_TOKEN))
    return [
        {"role": "system", "content": SUMMARIZER_PROMPT.format(words=words)},
        {"role": "user", "content": transcript(request)},
    ]


def transcript(request: SummaryRequest) -> str:
    lines = ["Summary so far:", request.previous or "(none yet)", "",
             f"Turns {request.first_turn}-{request.last_turn} to fold in:"]
    lines.extend(_line(m) for m in request.messages)
    return "\n".join(line for line in lines if line is not None)


def _line(m: ChatMessage) -> str | None:
    if m.role == "user":
        return f"User: {m.content or ''}"
    if m.role == "tool":
        return f"Tool result: {m.content or ''}"
    if m.role == "system":
        return f"Note: {m.content or ''}"
    calls = [f"Assistant called {c.function.name}({c.function.arguments})"
             for c in m.tool_calls or []]
    text = [f"Assistant: {m.content}"] if m.content else []
    return "\n".join(text + calls) or None
