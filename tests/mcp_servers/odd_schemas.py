"""An MCP stdio server whose tool schemas cannot be used as they are: a `$ref` to nowhere, a
`$ref` to a remote URL, and a schema that is not valid JSON Schema; and one fine tool."""

from __future__ import annotations

from mcp.server.mcpserver import MCPServer

server = MCPServer("odd")


@server.tool()
def fine(text: str) -> str:
    """Says `text` back."""
    return text


@server.tool()
def dangling(text: str) -> str:
    """Its schema points at a definition that does not exist."""
    return text


@server.tool()
def remote(text: str) -> str:
    """Its schema points at a URL."""
    return text


@server.tool()
def invalid(text: str) -> str:
    """Its schema is not JSON Schema."""
    return text


SCHEMAS = {
    "dangling": {"type": "object", "properties": {"text": {"$ref": "#/$defs/Missing"}}},
    "remote": {"type": "object", "properties": {"text": {"$ref": "http://127.0.0.1:9/s.json"}}},
    "invalid": {"type": "object", "properties": {"text": {"type": 5}}},
}
for name, schema in SCHEMAS.items():
    server._tool_manager.get_tool(name).parameters = schema

if __name__ == "__main__":
    server.run()
