"""From MCP tool listings to the agent's catalog: names the model API accepts, risk, timeouts.

The names must be stable across worker processes, since a workflow schedules a tool by the name an
earlier `discover` gave it, possibly on another worker: every rule here is a pure function of the
listings.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from mcp.types import Tool, ToolAnnotations

from ...contract import Risk, ToolDefinition
from ...rules.schemas import schema_problem
from .config import McpServerConfig, ToolOverride

# OpenAI's rule for function names: ^[a-zA-Z0-9_-]{1,64}$
MAX_NAME_LEN = 64
_FORBIDDEN = re.compile(r"[^a-zA-Z0-9_-]")
_DIGEST_LEN = 8


@dataclass(frozen=True)
class CatalogEntry:
    server: McpServerConfig
    tool: str  # the name the server knows it by
    definition: ToolDefinition


def _digest(server: str, tool: str) -> str:
    # a name is the server's text: even a lone surrogate in it hashes (stably), never raises
    return hashlib.sha256(f"{server}\0{tool}".encode(errors="surrogatepass")).hexdigest()[
        :_DIGEST_LEN]


def _with_digest(name: str, server: str, tool: str) -> str:
    return f"{name[: MAX_NAME_LEN - _DIGEST_LEN - 1]}_{_digest(server, tool)}"


def exposed_name(server: str, tool: str) -> str:
    """`<server>__<tool>`, made to fit the model API's function-name rule."""
    name = _FORBIDDEN.sub("_", f"{server}__{tool}")
    return name if len(name) <= MAX_NAME_LEN else _with_digest(name, server, tool)


def tool_risk(hints: ToolAnnotations | None) -> Risk:
    if hints is not None and hints.read_only_hint:
        return "safe"
    if hints is not None and hints.destructive_hint:
        return "destructive"
    return "sensitive"


def tool_definition(server: McpServerConfig, tool: Tool, name: str) -> ToolDefinition:
    """The agent's view of one MCP tool; the config's overrides beat the server's hints."""
    override = server.tools.get(tool.name, ToolOverride())
    hints = tool.annotations
    hinted_idempotent = hints is not None and bool(hints.read_only_hint or hints.idempotent_hint)
    title = tool.title or (hints.title if hints is not None else None)
    description = tool.description or title or tool.name
    return ToolDefinition(
        name=name,
        description=f"[{server.name}] {description}",
        parameters=tool.input_schema,
        risk=override.risk or server.risk or tool_risk(hints),
        idempotent=hinted_idempotent if override.idempotent is None else override.idempotent,
        timeout_s=override.timeout_s or server.timeout_s,
        samples=server.sampling,
    )


def build_catalog(
    listings: Sequence[tuple[McpServerConfig, Sequence[Tool]]],
) -> tuple[dict[str, CatalogEntry], list[str]]:
    """Exposed name -> entry for every enabled tool with a usable schema, and why others were left out."""
    candidates: list[tuple[str, McpServerConfig, Tool]] = []
    errors: list[str] = []
    for server, tools in listings:
        for tool in tools:
            if server.enabled_tools is not None and tool.name not in server.enabled_tools:
                continue
            problem = schema_problem(tool.input_schema)
            if problem is not None:
                errors.append(
                    f'MCP server "{server.name}": tool {tool.name} left out, '
                    f"its input schema cannot be used: {problem}"
                )
                continue
            candidates.append((exposed_name(server.name, tool.name), server, tool))

    taken = Counter(name for name, _, _ in candidates)
    catalog: dict[str, CatalogEntry] = {}
    for name, server, tool in candidates:
        if taken[name] > 1:
            name = _with_digest(name, server.name, tool.name)
        catalog[name] = CatalogEntry(server, tool.name, tool_definition(server, tool, name))
    return catalog, errors


def listing_digests(catalog: dict[str, CatalogEntry], servers: Iterable[str]) -> dict[str, str]:
    """Each listed server's digest of its tools as the catalog offers them (none: a digest
    too), for a conversation to tell when one changed (`rules.listing`)."""
    offered: dict[str, list[dict]] = {name: [] for name in servers}
    for entry in catalog.values():
        offered.setdefault(entry.server.name, []).append(entry.definition.model_dump(mode="json"))
    return {name: hashlib.sha256(json.dumps(sorted(tools, key=lambda t: t["name"]),
                                            sort_keys=True).encode()).hexdigest()[:16]
            for name, tools in offered.items()}
