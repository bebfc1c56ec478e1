"""Agent profiles (`AGENT_PROFILES`): specialised agents a conversation can delegate to. Each
profile becomes the tool `agent__<name>(task: str)`; calling it runs a child conversation with
the profile's system prompt, tools, model and limits.

    {"agents": {"researcher": {"description": "Finds facts", "system_prompt": "You research.",
                               "tools": ["get_weather", "create_note"], "model": null,
                               "max_steps": 6, "max_cost_usd": null,
                               "output_schema": null}}}

A profile's `tools` name native tools, MCP tools (`server__tool`) or other profiles (`writer` or
`agent__writer`). The worker loads the file; a conversation's history holds the profile's name
and limits, and the child's tool listing its system prompt, as MCP tool schemas are held.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, field_validator

from ..contract import AgentSpec, ToolDefinition
from ..rules.output import output_schema_problem
from .config_file import read_config

AGENT_PREFIX = "agent__"
NAME_PATTERN = r"^[A-Za-z0-9_-]{1,40}$"


class ProfilesError(ValueError):
    """An AGENT_PROFILES file the worker cannot use."""


class AgentProfile(BaseModel):
    description: str = Field(min_length=1, max_length=1024)
    system_prompt: str = Field(min_length=1, max_length=32_768)
    tools: list[str] = []
    model: str | None = None
    max_steps: int = Field(default=6, ge=1, le=100)
    max_cost_usd: float | None = Field(default=None, gt=0)
    max_total_tokens: int | None = Field(default=None, gt=0)
    output_schema: dict[str, Any] | None = None  # the agent answers with JSON that fits it

    @field_validator("output_schema")
    @classmethod
    def _usable(cls, schema: dict[str, Any] | None) -> dict[str, Any] | None:
        problem = None if schema is None else output_schema_problem(schema)
        if problem is not None:
            raise ValueError(problem)
        return schema


class ProfilesFile(BaseModel):
    agents: dict[str, AgentProfile]

    @field_validator("agents")
    @classmethod
    def _names(cls, agents: dict[str, AgentProfile]) -> dict[str, AgentProfile]:
        for name in agents:
            if not re.match(NAME_PATTERN, name):
                raise ValueError(f"profile name {name!r} must be 1-40 letters, digits, _ or -")
        return agents


class Profiles:
    """The loaded profiles, and the tools they become."""

    def __init__(self, agents: dict[str, AgentProfile] | None = None):
        self.agents = agents or {}

    @classmethod
    def load(cls, path: Path | None) -> Profiles:
        if path is None:
            return cls()
        parsed = read_config(path, ProfilesFile, "AGENT_PROFILES", ProfilesError)
        return cls(parsed.agents)

    def tool(self, name: str) -> ToolDefinition:
        p = self.agents[name]
        return ToolDefinition(
            name=AGENT_PREFIX + name,
            description=f"Delegate a task to the {name} agent: {p.description}",
            parameters={"type": "object", "additionalProperties": False, "required": ["task"],
                        "properties": {"task": {"type": "string", "minLength": 1,
                                                "description": "the task, with all it needs"}}},
            risk="safe",  # delegating runs nothing risky itself: the child's own gate applies
            timeout_s=3600.0,
            agent=AgentSpec(profile=name, model=p.model, max_steps=p.max_steps,
                            max_cost_usd=p.max_cost_usd, max_total_tokens=p.max_total_tokens,
                            output_schema=p.output_schema),
        )

    def tools(self) -> list[ToolDefinition]:
        return [self.tool(name) for name in self.agents]

    def allowed(self, profile: str, tools: list[ToolDefinition]) -> list[ToolDefinition]:
        """Of `tools` (everything the worker has, agents included), what `profile` may use."""
        wanted = {n if n.startswith(AGENT_PREFIX) or n not in self.agents else AGENT_PREFIX + n
                  for n in self.agents[profile].tools}
        return [t for t in tools if t.name in wanted]
