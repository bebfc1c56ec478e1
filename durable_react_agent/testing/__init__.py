"""A scripted, deterministic OpenAI-compatible server (plus a fake Open-Meteo) for tests and the offline demo."""

from .intents import read_intent
from .replies import RawReply, ScriptedReply, ScriptedToolCall
from .script import Scenario, Script, load_script, select_reply
from .server import RecordedRequest, ScriptedModelServer

__all__ = [
    "RawReply",
    "RecordedRequest",
    "Scenario",
    "Script",
    "ScriptedModelServer",
    "ScriptedReply",
    "ScriptedToolCall",
    "load_script",
    "read_intent",
    "select_reply",
]
