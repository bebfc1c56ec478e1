"""Remote A2A agents (`AGENT_A2A_AGENTS`), as the worker's settings read them: each agent the
file names becomes a tool (`activities.a2a_calls.remote_agent_tools`), described by its card.

    {"agents": {"forecaster": {"card": "https://forecast.example/.well-known/agent-card.json",
                               "auth": "FORECASTER_TOKEN", "risk": "safe"}}}

`auth` names the environment variable holding the agent's bearer token: the worker reads it,
and neither the conversation's history nor the file holds it. `risk` is the gate's, as a native
tool's (default `sensitive`: a person approves each message). `timeout_s` bounds a call.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from pydantic import BaseModel, Field

from ..contract import Risk
from .config_file import read_config


class RemoteAgentsError(ValueError):
    """An AGENT_A2A_AGENTS file the worker cannot use."""


class RemoteAgentConfig(BaseModel):
    card: str = Field(pattern=r"^https?://", max_length=2048)  # the agent card's URL
    auth: str | None = Field(default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    risk: Risk = "sensitive"
    description: str | None = Field(default=None, max_length=1024)  # while its card is unread
    timeout_s: float = Field(default=600.0, ge=1, le=86_400)


class RemoteAgentsFile(BaseModel):
    agents: dict[str, RemoteAgentConfig]  # each a tool of that name (`worker.app.tool_registry`)


def load_remote_agents(path: Path, env: Mapping[str, str]) -> RemoteAgentsFile:
    """The file `AGENT_A2A_AGENTS` names; each `auth` must name a variable that is set."""
    agents = read_config(path, RemoteAgentsFile, "AGENT_A2A_AGENTS", RemoteAgentsError)
    for name, agent in agents.agents.items():
        if agent.auth is not None and not env.get(agent.auth):
            raise RemoteAgentsError(f"AGENT_A2A_AGENTS: agent {name!r} takes its token from "
                                    f"{agent.auth}, which is not set")
    return agents
