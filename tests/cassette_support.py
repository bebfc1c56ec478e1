"""The recorded cassettes of a real local model (tests/cassettes/), as the scripted model
replays them."""

from __future__ import annotations

import json
from pathlib import Path

from durable_react_agent.testing import RawReply, ScriptedReply

CASSETTES = Path(__file__).parent / "cassettes"


def cassette(name: str) -> RawReply:
    return RawReply.model_validate(json.loads((CASSETTES / f"{name}.json").read_text())["reply"])


def recorded(name: str) -> ScriptedReply:
    return ScriptedReply(raw=cassette(name))
