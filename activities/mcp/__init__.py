"""Tools from MCP servers: the config file, and the toolbox that discovers and calls their tools."""

from activities.mcp.config import McpConfig, McpConfigError, load_mcp_config
from activities.mcp.toolbox import McpDiscovery, McpToolbox

__all__ = ["McpConfig", "McpConfigError", "McpDiscovery", "McpToolbox", "load_mcp_config"]
