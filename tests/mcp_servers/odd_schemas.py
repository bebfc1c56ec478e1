"""An MCP stdio server whose tool schemas cannot be used as they are: a `$ref` to nowhere, a
`$ref` to a remote URL, and a schema that is not valid JSON Schema; one fine tool; and two whose
pattern takes a backtracking matcher forever on 'aaa…!', one behind a lookahead RE2 cannot run."""

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


@server.tool()
def catastrophic(text: str) -> str:
    """Says `text` back, if it matches a catastrophic pattern."""
    return text


@server.tool()
def lookahead(text: str) -> str:
    """Says `text` back, if it matches a catastrophic pattern behind a lookahead."""
    return text


SCHEMAS = {
    "dangling": {"type": "object", "properties": {"text": {"$ref": "#/$defs/Missing"}}},
    "remote": {"type": "object", "properties": {"text": {"$ref": "http://127.0.0.1:9/s.json"}}},
    "invalid": {"type": "object", "properties": {"text": {"type": 5}}},
    "catastrophic": {"type": "object", "properties": {"text": {"type": "string", "pattern": "^(a+)+$"}}},
    "lookahead": {"type": "object", "properties": {"text": {"type": "string", "pattern": "^(?=a)(a|a)+$"}}},
}
for name, schema in SCHEMAS.items():
    server._tool_manager.get_tool(name).parameters = schema

if __name__ == "__main__":
    server.run()
