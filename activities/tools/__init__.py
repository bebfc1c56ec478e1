"""Native tools, one file per family."""

from activities.tools.registry import ToolContext, ToolError, ToolRegistry, ToolSpec
from activities.tools.weather import WEATHER


def default_registry() -> ToolRegistry:
    return ToolRegistry([WEATHER])


__all__ = ["ToolContext", "ToolError", "ToolRegistry", "ToolSpec", "default_registry"]
