"""What the scripted model answers, and how it reads a message: shared by scripts and intents."""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel


class ScriptedToolCall(BaseModel):
    """One tool call the model "decides" to make."""

    name: str
    arguments: str | dict = {}
    id: str | None = None  # None: a deterministic id; "" sends a call with no id at all

    def arguments_text(self) -> str:
        """A dict is JSON-encoded; a str is sent verbatim (it may be invalid JSON on purpose)."""
        if isinstance(self.arguments, str):
            return self.arguments
        return json.dumps(self.arguments)


class RawReply(BaseModel):
    """An answer sent as it was recorded from a real endpoint (a cassette): its status, its
    content type and its body, byte for byte (an SSE stream, or an error's JSON)."""

    status: int = 200
    content_type: str = "text/event-stream"
    body: str


class ScriptedReply(BaseModel):
    """What the model answers at one step of a conversation."""

    content: str | None = None
    tool_calls: list[ScriptedToolCall] = []
    errors: list[int] = []  # statuses answered first, one per hit, before the reply
    error_message: str | None = None  # what those errors say (default: "scripted <status>")
    error_code: str | None = None  # their `error.code` (e.g. context_length_exceeded)
    retry_after: str | None = None  # their Retry-After header (seconds or an HTTP date)
    # count the errors per scenario step, not per conversation: a prompt that changes between
    # attempts (folded into a summary) still moves on through them
    errors_per_step: bool = False
    hold: bool = False
    delay_s: float = 0.0
    stream_pause_s: float = 0.0  # a streamed reply's pause after each of its pieces of text
    finish_reason: str | None = None
    content_without_tools: str | None = None  # the answer instead, when no tools are offered
    no_usage: bool = False  # answer without any usage, as some endpoints do
    usage_patch: dict[str, Any] = {}  # usage fields set to these values (None: null)
    usage_missing: list[str] = []  # usage fields left out
    # streamed replies cut after this many bytes, one per hit after the `errors`: the endpoint
    # dropped the connection mid-stream
    cut_at: list[int] = []
    raw: RawReply | None = None  # sent instead of the reply built from the fields above
    raw_hits: int | None = None  # `raw` for this many hits of the step, then the fields' reply

    def effective_finish_reason(self) -> str:
        if self.finish_reason is not None:
            return self.finish_reason
        return "tool_calls" if self.tool_calls else "stop"


def message_text(message: dict[str, Any]) -> str:
    """Text of a message whose content is a str, a list of text parts, or absent."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            part.get("text", "")
            for part in content
            if isinstance(part, dict) and part.get("type") == "text"
        )
    return ""
