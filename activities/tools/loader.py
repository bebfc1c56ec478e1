"""The tools of user modules: those `AGENT_TOOLS` names, and those of installed packages that
declare the entry-point group `durable_react_agent.tools`.

A module's tools are the `ToolSpec`s among its attributes (what `@tool` made), read after
importing it. `@tool` records nothing globally: imports are cached, so a record filled as a side
effect of importing would be empty the second time a process loads a module, and shared by all
that load one. Here the same modules always give the same tools, however often they are loaded.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from importlib.metadata import entry_points
from types import ModuleType
from typing import Any

import structlog

from .registry import ToolSpec, name_problem

ENTRY_POINT_GROUP = "durable_react_agent.tools"
BUILTIN = "the built-in tools"

log = structlog.get_logger()


class ToolLoadError(Exception):
    """A tools module the worker cannot use; the worker does not start."""

    def __init__(self, source: str, reason: str):
        super().__init__(f"{source}: {reason}")
        self.source = source
        self.reason = reason


def load_tools(modules: Sequence[str], builtins: Sequence[ToolSpec] = (),
               more: Sequence[tuple[str, Sequence[ToolSpec]]] = ()) -> list[ToolSpec]:
    """`builtins`, then the tools of `modules`, then those of the installed entry points, then
    `more` (each a source's name and its tools: the remote agents'), each once (a module may
    re-export another's). Raises `ToolLoadError` for a source that cannot be imported or defines
    no tools, and for a tool whose name is taken or not allowed."""
    taken: dict[str, tuple[ToolSpec, str]] = {spec.name: (spec, BUILTIN) for spec in builtins}
    given = [(source, partial(list, specs)) for source, specs in more if specs]
    for source, load in [*sources(modules), *given]:
        try:
            found = tools_of(load())
        except Exception as err:  # whatever importing user code raises
            raise ToolLoadError(source, f"{type(err).__name__}: {err}") from err
        if not found:
            raise ToolLoadError(source, "it defines no tools (functions decorated with @tool)")
        for spec in found:
            problem = name_problem(spec.name)
            if problem is not None:
                raise ToolLoadError(source, problem)
            holder = taken.setdefault(spec.name, (spec, source))
            if holder[0] is not spec:
                raise ToolLoadError(source, f"tool {spec.name!r} is already defined by {holder[1]}")
        log.info("tools loaded", source=source, tools=[spec.name for spec in found])
    return [spec for spec, _ in taken.values()]


def sources(modules: Sequence[str]) -> Iterator[tuple[str, Callable[[], Any]]]:
    """Each source of tools, named for error messages, with what loads it."""
    for module in modules:
        yield f"module {module}", partial(importlib.import_module, module)
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        of = f" of {ep.dist.name}" if ep.dist is not None else ""
        yield f"entry point {ep.name} = {ep.value}{of}", ep.load


def tools_of(loaded: Any) -> list[ToolSpec]:
    """The tools of a module, or those an entry point names: one tool, or a list of them."""
    if isinstance(loaded, ModuleType):
        return [value for value in vars(loaded).values() if isinstance(value, ToolSpec)]
    if isinstance(loaded, ToolSpec):
        return [loaded]
    if isinstance(loaded, (list, tuple)) and all(isinstance(v, ToolSpec) for v in loaded):
        return list(loaded)
    raise TypeError(f"it names a {type(loaded).__name__}, not a module, a tool or a list of tools")
