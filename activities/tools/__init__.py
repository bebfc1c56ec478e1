"""Native tools, one file per family, each made with `@tool` as any user's tool is."""

from .notes import NOTES_TOOLS
from .registry import (
    NeedsInput,
    ToolContext,
    ToolError,
    ToolRegistry,
    ToolSpec,
)
from .weather import get_weather

BUILTIN_TOOLS: tuple[ToolSpec, ...] = (get_weather, *NOTES_TOOLS)


def default_registry() -> ToolRegistry:
    return ToolRegistry(BUILTIN_TOOLS)


__all__ = ["BUILTIN_TOOLS", "NeedsInput", "ToolContext", "ToolError", "ToolRegistry", "ToolSpec",
           "default_registry"]
