"""What a model's reply becomes before the loop acts on it (pure): the calls a local model wrote
in its text read as calls, calls written twice in one reply made one, a recap of calls that ran
this turn taken as the answer it is, every call given an id of its own, and the whole kept within
the bounds of what the context keeps. `workflows.model_step` tells watchers what became of it.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field

from ..contract import ChatMessage
from ..contract.bounds import MAX_REPLY_TEXT_BYTES, Limits, clip_bytes
from ..contract.state import RanCall
from .repair import bound_reply, calls_from_text, recover_tool_calls, unique_call_ids
from .repeats import (
    distinct,
    ran_before,
    repeat_observation,
    repeated_in_reply,
    restated,
    restated_observation,
)
from .text_calls import announced


@dataclass(frozen=True)
class Intake:
    """A reply as the loop acts on it."""

    message: ChatMessage
    refused: dict[str, str] = field(default_factory=dict)  # call id: its observation, not run
    unread: list[str] = field(default_factory=list)  # tools called in a shape not read
    announced: list[str] = field(default_factory=list)  # tools it says, in prose, it calls
    from_text: bool = False  # its calls were read from its text


@dataclass(frozen=True)
class Turn:
    """What of the conversation a reply is read against."""

    tools: Collection[str]  # the offered tools' names
    seen_call_ids: Collection[str]
    ran: list[RanCall]  # the calls that ran this turn
    messages: list[ChatMessage]  # the context, where their results are
    number: int
    step: int


def intake(message: ChatMessage, offered: bool, turn: Turn, limits: Limits) -> Intake:
    """The reply made usable and bounded (`offered`: tools were offered this step): calls
    written in its text are read, a call announced in prose is named, calls written again are
    answered rather than run, and its call ids are its own, of a safe alphabet."""
    unread: list[str] = []
    said: list[str] = []
    written = None
    if offered and not message.tool_calls and message.content:
        message = written = message.model_copy(update={  # read within what the context keeps
            "content": clip_bytes(message.content, MAX_REPLY_TEXT_BYTES, "reply text")})
        message, unread = calls_from_text(message, turn.tools)
        if not message.tool_calls and not unread:
            # not the tools that ran this turn: "you can use `create_note`" after it ran is
            # no call to make again
            ran = {r.tool for r in turn.ran}
            said = announced(message.content or "", [t for t in turn.tools if t not in ran])
        if message.tool_calls:
            calls = distinct(message.tool_calls)
            if message.content and all(ran_before(c, turn.ran) for c in calls):
                return Intake(written)  # a recap of what ran: the answer, as it was written
            message = message.model_copy(update={"tool_calls": calls})
    else:
        message = recover_tool_calls(message, turn.tools)
    if message.tool_calls:
        message = message.model_copy(update={"tool_calls": unique_call_ids(
            message.tool_calls, turn.seen_call_ids, turn.number, turn.step)})
    from_text = written is not None and bool(message.tool_calls)
    message, refused = bound_reply(message, limits)
    if message.tool_calls:
        refused = {**_repeated(message, turn, from_text), **refused}
    return Intake(message, refused, unread, said, from_text)


def _repeated(message: ChatMessage, turn: Turn, from_text: bool) -> dict[str, str]:
    """The observations of the calls a reply repeats: one identical to an earlier call of the
    reply, and (read from its text) one identical to a call that ran this turn."""
    calls = message.tool_calls or []
    said = {dup: repeat_observation(first) for dup, first in repeated_in_reply(calls).items()}
    if from_text:
        said.update({cid: restated_observation(ran, turn.messages)
                     for cid, ran in restated(calls, turn.ran).items()})
    return said
