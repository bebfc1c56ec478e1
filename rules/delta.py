"""Delta context: a model call carries what changed since the conversation's previous call, not
the whole prompt and tool list again. Pure functions, shared by the workflow and the worker.

The workflow remembers the prompt it last sent (`Sent`: the messages and a hash of each). The next
prompt is sent as `parts`: ranges of the previous prompt kept as they were, and the messages that
are new or changed (the latest round, an observation compacted since, a new summary). The request
names the previous prompt by its digest and the new one by its digest, and the tool list by its
digest. The worker keeps each conversation's last prompt and the tool lists it has seen
(`activities.context_cache`); it rebuilds the prompt from the parts and checks the digest, so the
model receives exactly the messages the workflow meant, or the call does not happen.

A message's hash is the SHA-256 of the JSON the endpoint receives for it (`to_openai`); a prompt's
digest is the SHA-256 of its messages' hashes in order.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from ..contract import ChatMessage, PromptPart
from ..contract.bounds import canonical_json

DIGEST_CHARS = 32  # 128 bits: a collision would need 2^64 prompts


@dataclass(frozen=True)
class Sent:
    """A prompt as sent: its messages, each one's hash, and the prompt's digest."""

    messages: tuple[ChatMessage, ...]
    hashes: tuple[str, ...]
    digest: str


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:DIGEST_CHARS]


def message_hash(wire: dict[str, Any]) -> str:
    """The hash of a message as the endpoint receives it (`ChatMessage.to_openai()`)."""
    return _sha(canonical_json(wire))


def prompt_digest(hashes: tuple[str, ...] | list[str]) -> str:
    return _sha("".join(hashes))


def tools_digest(tools: list[dict[str, Any]]) -> str:
    return _sha(canonical_json(tools))


def diff(previous: Sent | None, messages: list[ChatMessage]) -> tuple[list[PromptPart], Sent]:
    """The parts that rebuild `messages` from the `previous` prompt, and `messages` as sent.

    A message is found in the previous prompt by identity first (the workflow keeps its messages
    as objects, so most are the very same ones) and by hash otherwise; only the messages not
    found are hashed anew and sent whole. Consecutive found messages become one range."""
    by_id: dict[int, int] = {}
    by_hash: dict[str, int] = {}
    if previous is not None:
        for i, (m, h) in enumerate(zip(previous.messages, previous.hashes)):
            by_id[id(m)] = i
            by_hash.setdefault(h, i)
    spans: list[list[int] | ChatMessage] = []  # [start, end) ranges kept, and messages sent
    hashes: list[str] = []
    for m in messages:
        run = spans[-1] if spans and isinstance(spans[-1], list) else None
        at = by_id.get(id(m))
        if at is not None and previous is not None and previous.messages[at] is m:
            h = previous.hashes[at]
        else:  # an equal message may stand elsewhere: prefer the one that continues the range
            h = message_hash(m.to_openai())
            follows = run is not None and previous is not None and run[1] < len(previous.hashes) \
                and previous.hashes[run[1]] == h
            at = run[1] if follows and run is not None else by_hash.get(h)
        hashes.append(h)
        if at is None:
            spans.append(m)
        elif run is not None and run[1] == at:
            run[1] += 1
        else:
            spans.append([at, at + 1])
    parts = [PromptPart(keep=(s[0], s[1])) if isinstance(s, list) else PromptPart(message=s)
             for s in spans]
    return parts, Sent(messages=tuple(messages), hashes=tuple(hashes), digest=prompt_digest(hashes))


def full(messages: list[ChatMessage]) -> tuple[list[PromptPart], Sent]:
    """Every message whole (no previous prompt to refer to)."""
    return diff(None, messages)


class Mismatch(Exception):
    """The parts do not rebuild the prompt they claim to."""


def rebuild(previous_wire: list[dict[str, Any]], parts: list[PromptPart]
            ) -> list[dict[str, Any]]:
    """The prompt's messages as the endpoint receives them, from the previous prompt's (as the
    worker kept them) and the parts. Raises `Mismatch` for a range outside it."""
    wire: list[dict[str, Any]] = []
    for part in parts:
        if part.keep is not None:
            start, end = part.keep
            if not 0 <= start < end <= len(previous_wire):
                raise Mismatch(f"range {start}-{end} outside a prompt of {len(previous_wire)}")
            wire.extend(previous_wire[start:end])
        elif part.message is not None:
            wire.append(part.message.to_openai())
        else:
            raise Mismatch("a part with neither a range nor a message")
    return wire
