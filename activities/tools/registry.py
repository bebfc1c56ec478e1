"""The native tool registry: each tool is a `ToolSpec` with a typed args model and a handler."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import httpx
from pydantic import BaseModel

from ...contract import (
    NOTIFY_ACTIVITY,
    RUNTIME_ACTIVITIES,
    Question,
    QuestionKind,
    Risk,
    ToolDefinition,
    ToolOutcome,
)
from ...rules.questions import ASK_TOOLS
from ..settings import ActivitySettings

if TYPE_CHECKING:
    from .reporter import CallReporter

# Names a tool cannot take: the runtime's own activity types, which a tool would shadow, and the
# ask_* tools, which every conversation has and which would hide it.
RESERVED_NAMES = frozenset({*RUNTIME_ACTIVITIES, NOTIFY_ACTIVITY,
                            *(t.name for t in ASK_TOOLS)})
NAME_PATTERN = re.compile(r"^[A-Za-z0-9_-]{1,64}$")  # what OpenAI-compatible APIs accept
# The longest deadline of a tool that runs locally unless it says: a signal (a stop, an end, a
# decision) or a query reaches the conversation only between workflow tasks, so a read that may
# take longer runs as an activity of its own, which a stop cancels at its next heartbeat.
QUICK_READ_S = 30.0


class ToolError(Exception):
    """A failure the model should read and can act on. It becomes an observation, never a retry."""


class NeedsInput(Exception):
    """The tool cannot go on without a human's answer; it is run again with `ctx.answer` set.

    `NeedsInput("Which account?", options=["savings", "checking"])` asks a choice (a free-text
    question without options); `kind` asks otherwise ("multi_choice", "confirm"). `resume`
    (text, at most 4 KiB) is what the next run needs to pick up where this one asked, say a
    remote task's id: it comes back as `ctx.resume` beside `ctx.answer`."""

    def __init__(self, question: Question | str, *, options: Iterable[str] = (),
                 kind: QuestionKind | None = None, resume: str | None = None):
        if isinstance(question, str):
            options = list(options)
            question = Question(kind=kind or ("choice" if options else "input"),
                                message=question, options=options)
        super().__init__(question.message)
        self.question = question
        # (checked here, where the tool's author sees it, not when the outcome is built)
        self.resume = None if resume is None else ToolOutcome(resume=resume).resume


@dataclass(frozen=True)
class ToolContext:
    """What a running tool may use: the worker's settings and HTTP client, the call's ids and the
    human's answer (after `NeedsInput`), and a line to the conversation while it runs."""

    settings: ActivitySettings
    http: httpx.AsyncClient
    call_id: str
    idempotency_key: str  # the same on every attempt of this call: write under it (`keyed`)
    # Who the call acts for: the conversation's owner (a subagent's: its parent's), and the
    # conversation it was made in (None outside a worker)
    owner: str | None = None
    conversation_id: str | None = None
    answer: str | None = None
    resume: str | None = None  # what the run that asked for `answer` kept (`NeedsInput.resume`)
    heartbeat_details: Any = None  # what the previous attempt last heartbeated, to resume from
    # Absent outside a worker (a tool's own unit tests): heartbeats and progress then go nowhere.
    reporter: CallReporter | None = field(default=None, repr=False)

    def heartbeat(self, details: Any = None) -> None:
        """Tell Temporal the call is alive; `details` (JSON-able) reach the next attempt as
        `heartbeat_details`. The worker heartbeats on its own while a tool runs, repeating the
        latest details, so call this to record progress, not to stay alive."""
        if self.reporter is not None:
            self.reporter.heartbeat(details)

    def progress(self, text: str) -> None:
        """Show a line of progress on the conversation's live stream (a `tool_progress` event)."""
        if self.reporter is not None:
            self.reporter.progress(text)


Handler = Callable[[Any, ToolContext], Awaitable[str]]


@dataclass(frozen=True)
class ToolSpec:
    """A tool the worker runs: its name and description for the model, its argument model, its
    handler, and how its calls may run (risk, retries, deadline, local or not)."""

    name: str
    description: str
    args_model: type[BaseModel]
    handler: Handler
    risk: Risk = "safe"
    idempotent: bool = True
    keyed: bool = False  # writes under `ctx.idempotency_key`, so a retry cannot write twice
    timeout_s: float = 30.0
    max_attempts: int = 3  # for a tool a retry cannot harm (idempotent or keyed); others run once
    # Runs as a local activity, in the worker that runs the conversation's workflow task: no
    # server round trip of its own, so a step costs one workflow task instead of two. None: every
    # safe tool that may run again does, unless its deadline is past `QUICK_READ_S`. A local run
    # has no heartbeat (`ToolContext.heartbeat` keeps no details), signals and queries wait while
    # it runs, and after a worker dies it runs again once the workflow task times out: for quick
    # reads, not for long ones.
    local: bool | None = None

    @property
    def runs_locally(self) -> bool:
        """Whether its calls run as local activities: a safe tool that may run again (idempotent
        or keyed) and is quick (`timeout_s` within `QUICK_READ_S`), unless it says otherwise."""
        may = self.risk == "safe" and (self.idempotent or self.keyed)
        if self.local is None:
            return may and self.timeout_s <= QUICK_READ_S
        return may and self.local

    def definition(self, local: bool = True) -> ToolDefinition:
        """What a conversation knows of the tool; `local=False`: its calls never run as local
        activities (the worker does not run tools itself, or is told not to)."""
        return ToolDefinition(
            name=self.name,
            description=self.description,
            parameters=self.args_model.model_json_schema(),
            risk=self.risk,
            idempotent=self.idempotent,
            keyed=self.keyed,
            timeout_s=self.timeout_s,
            max_attempts=self.max_attempts,
            local=local and self.runs_locally,
        )


def name_problem(name: str) -> str | None:
    """Why a tool cannot be called `name`, if it cannot."""
    if name in RESERVED_NAMES:
        return f"tool name {name!r} is reserved"
    if "__" in name:
        return f"tool name {name!r}: '__' is kept for MCP tools (server__tool) and agent profiles"
    if not NAME_PATTERN.match(name):
        return f"tool name {name!r} must be 1-64 letters, digits, _ or -"
    return None


class ToolRegistry:
    def __init__(self, specs: Iterable[ToolSpec]):
        self._specs: dict[str, ToolSpec] = {}
        for spec in specs:
            problem = name_problem(spec.name)
            if problem is not None:
                raise ValueError(problem)
            if spec.name in self._specs:
                raise ValueError(f"tool {spec.name!r} is registered twice")
            self._specs[spec.name] = spec
        # Schemas are fixed per process; building them on every list_tools cost 2% of worker CPU.
        self._definitions = {local: [spec.definition(local) for spec in self._specs.values()]
                             for local in (True, False)}

    def get(self, name: str) -> ToolSpec | None:
        return self._specs.get(name)

    def names(self) -> list[str]:
        return list(self._specs)

    def definitions(self, local: bool = True) -> list[ToolDefinition]:
        """The tools' definitions; `local=False`: none runs as a local activity (the worker
        does not run the tools itself, or is told not to)."""
        return list(self._definitions[local])
