"""Tools from MCP servers: the config file, and the toolbox that discovers and calls their tools.

The toolbox imports the MCP SDK, which takes a second or more to import: it is loaded when first
named, so a worker without MCP servers starts (and restarts after a crash) that much sooner."""

from typing import TYPE_CHECKING, Any

from .config import McpConfig, McpConfigError, load_mcp_config

if TYPE_CHECKING:
    from .toolbox import McpDiscovery, McpToolbox

__all__ = ["McpConfig", "McpConfigError", "McpDiscovery", "McpToolbox", "load_mcp_config"]


def __getattr__(name: str) -> Any:
    if name in ("McpDiscovery", "McpToolbox"):
        from . import toolbox

        return getattr(toolbox, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
