"""Native tools, one file per family."""

from activities.tools.notes import NOTES_TOOLS
from activities.tools.registry import (
    NeedsInput,
    ToolContext,
    ToolError,
    ToolRegistry,
    ToolSpec,
)
from activities.tools.weather import WEATHER


def default_registry() -> ToolRegistry:
    return ToolRegistry([WEATHER, *NOTES_TOOLS])


__all__ = ["NeedsInput", "ToolContext", "ToolError", "ToolRegistry", "ToolSpec", "default_registry"]
