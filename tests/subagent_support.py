"""Agent profiles for the subagent tests, and scripts of a parent that delegates to a child (the
worker that serves these profiles, `agents_queue`, is in conftest.py)."""

from __future__ import annotations

from durable_react_agent.activities.profiles import AgentProfile
from durable_react_agent.testing import ScriptedModelServer, ScriptedReply, ScriptedToolCall
from tests.helpers import script, unique

PROFILES = {
    "researcher": AgentProfile(description="Finds facts", system_prompt="You research.",
                               tools=["get_weather"], max_steps=6),
    "writer": AgentProfile(description="Writes notes", system_prompt="You write notes.",
                           tools=["create_note", "ask_confirm"], max_steps=4),
    "deep": AgentProfile(description="Delegates to itself", system_prompt="You delegate.",
                         tools=["deep"], max_steps=3),
    "manager": AgentProfile(description="Has notes written", system_prompt="You delegate.",
                            tools=["writer"], max_steps=3),
}


def delegate(profile: str, task: str, call_id: str) -> ScriptedToolCall:
    return ScriptedToolCall(name=f"agent__{profile}", arguments={"task": task}, id=call_id)


def delegating(model: ScriptedModelServer, name: str, profile: str, call_id: str,
               child_replies: list[ScriptedReply], parent_answer: str = "{last_tool}") -> str:
    """Script a child (its trigger is in its task) and a parent that delegates to it once, then
    answers; returns the parent's trigger."""
    child = script(model, unique(f"{name}-child"), *child_replies)
    return script(model, unique(f"{name}-parent"),
                  ScriptedReply(tool_calls=[delegate(profile, f"{child}: go", call_id)]),
                  ScriptedReply(content=parent_answer))


def writing(model: ScriptedModelServer, title: str, call_id: str = "call_0") -> str:
    """A writer child that creates one note, its call numbered as a provider might (the same
    id in every child), then reports; returns its trigger."""
    return script(model, unique("writes"),
                  ScriptedReply(tool_calls=[ScriptedToolCall(
                      name="create_note", arguments={"title": title, "body": "b"}, id=call_id)]),
                  ScriptedReply(content="{last_tool}"))
