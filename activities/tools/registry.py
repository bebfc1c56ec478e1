"""The native tool registry: each tool is a `ToolSpec` with a typed args model and a handler."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

import httpx
from pydantic import BaseModel

from activities.settings import ActivitySettings
from workflows.models import Question, Risk, ToolDefinition

# Activity types already taken by the runtime; a tool with one of these names would shadow them.
RESERVED_NAMES = frozenset({"llm_call", "list_tools"})


class ToolError(Exception):
    """A failure the model should read and can act on. It becomes an observation, never a retry."""


class NeedsInput(Exception):
    """The tool cannot go on without a human's answer; it is run again with `ctx.answer` set."""

    def __init__(self, question: Question):
        super().__init__(question.message)
        self.question = question


@dataclass(frozen=True)
class ToolContext:
    settings: ActivitySettings
    http: httpx.AsyncClient
    call_id: str
    idempotency_key: str
    answer: str | None = None


Handler = Callable[[Any, ToolContext], Awaitable[str]]


@dataclass(frozen=True)
class ToolSpec:
    name: str
    description: str
    args_model: type[BaseModel]
    handler: Handler
    risk: Risk = "safe"
    idempotent: bool = True
    keyed: bool = False  # writes under `ctx.idempotency_key`, so a retry cannot write twice
    timeout_s: float = 30.0
    max_attempts: int = 3

    def definition(self) -> ToolDefinition:
        return ToolDefinition(
            name=self.name,
            description=self.description,
            parameters=self.args_model.model_json_schema(),
            risk=self.risk,
            idempotent=self.idempotent,
            keyed=self.keyed,
            timeout_s=self.timeout_s,
            max_attempts=self.max_attempts,
        )


class ToolRegistry:
    def __init__(self, specs: Iterable[ToolSpec]):
        self._specs: dict[str, ToolSpec] = {}
        for spec in specs:
            if spec.name in RESERVED_NAMES:
                raise ValueError(f"tool name {spec.name!r} is reserved")
            if "__" in spec.name:
                raise ValueError(f"tool name {spec.name!r}: '__' is kept for MCP tools (server__tool)")
            if spec.name in self._specs:
                raise ValueError(f"tool {spec.name!r} is registered twice")
            self._specs[spec.name] = spec
        # Schemas are fixed per process; building them on every list_tools cost 2% of worker CPU.
        self._definitions = [spec.definition() for spec in self._specs.values()]

    def get(self, name: str) -> ToolSpec | None:
        return self._specs.get(name)

    def definitions(self) -> list[ToolDefinition]:
        return list(self._definitions)
