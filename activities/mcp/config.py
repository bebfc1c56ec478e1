"""The `mcpServers` file: which MCP servers the worker talks to, and how far to trust their tools.

Values may name environment variables as `${VAR}`. They are resolved once, at load time, and every
resolved value is kept out of reprs and masked in the messages built from a server's errors.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal

import structlog
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError

from ...contract import Risk

log = structlog.get_logger()

_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
# Shorter values are no secrets, and masking them would garble every message.
_MIN_SECRET_LEN = 6
DEFAULT_TIMEOUT_S = 15.0


class McpConfigError(Exception):
    """The config file as a whole is unusable: missing, unreadable, or not the expected JSON."""


class _ServerConfigError(Exception):
    """One server's entry is unusable; the others still load."""


class ToolOverride(BaseModel):
    # Our own keys only, so a typo is an error rather than a silently ignored override.
    model_config = ConfigDict(extra="forbid")

    risk: Risk | None = None
    timeout_s: float | None = Field(default=None, gt=0)
    idempotent: bool | None = None


class _ServerConfig(BaseModel):
    # Other clients' keys (`type`, `disabled`, ...) must not cost a server: they are ignored.
    model_config = ConfigDict(extra="ignore")

    name: str = Field(min_length=1)
    risk: Risk | None = None
    timeout_s: float = Field(default=DEFAULT_TIMEOUT_S, gt=0)
    enabled_tools: list[str] | None = None
    tools: dict[str, ToolOverride] = Field(default_factory=dict)
    # Its sampling requests are answered by the conversation's model (`activities.mcp.sampling`)
    sampling: bool = False
    _secrets: frozenset[str] = PrivateAttr(default=frozenset())

    def redact(self, text: str) -> str:
        """`text` with every secret of this server masked."""
        for secret in sorted(self._secrets, key=len, reverse=True):
            text = text.replace(secret, "***")
        return text


class StdioServerConfig(_ServerConfig):
    command: str = Field(min_length=1)
    args: list[str] = Field(default_factory=list, repr=False)
    env: dict[str, str] = Field(default_factory=dict, repr=False)
    cwd: str | None = None


class HttpServerConfig(_ServerConfig):
    url: str = Field(min_length=1, repr=False)
    headers: dict[str, str] = Field(default_factory=dict, repr=False)
    transport: Literal["streamable_http", "sse"] | None = None


McpServerConfig = StdioServerConfig | HttpServerConfig


class McpConfig(BaseModel):
    servers: list[McpServerConfig] = Field(default_factory=list)
    errors: list[str] = Field(default_factory=list)  # one line per server left out


def load_mcp_config(path: str | Path, environ: Mapping[str, str]) -> McpConfig:
    """Read the file; a bad server entry becomes an error line, a bad file raises McpConfigError."""
    path = Path(path)
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise McpConfigError(f"cannot read MCP config {path}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise McpConfigError(f"MCP config {path} is not valid JSON: {exc}") from None
    entries = document.get("mcpServers") if isinstance(document, dict) else None
    if not isinstance(entries, dict):
        raise McpConfigError(f'MCP config {path} must be an object with an "mcpServers" object')

    config = McpConfig()
    for name, entry in entries.items():
        try:
            config.servers.append(_parse_server(name, entry, environ))
        except _ServerConfigError as exc:
            config.errors.append(f'server "{name}": {exc}')
    for error in config.errors:
        log.warning("mcp server left out", error=error)
    return config


def _parse_server(name: str, entry: Any, environ: Mapping[str, str]) -> McpServerConfig:
    if not isinstance(entry, dict):
        raise _ServerConfigError("must be a JSON object")
    if ("command" in entry) == ("url" in entry):
        raise _ServerConfigError('needs exactly one of "command" (stdio) or "url" (HTTP)')
    model = StdioServerConfig if "command" in entry else HttpServerConfig
    try:
        server = model.model_validate({**entry, "name": name})
    except ValidationError as exc:
        # Built from locations and messages only: the input values may be secrets.
        problems = "; ".join(
            f"{'.'.join(str(part) for part in err['loc'])}: {err['msg']}" for err in exc.errors()
        )
        raise _ServerConfigError(problems) from None
    if unknown := sorted(set(entry) - set(model.model_fields)):
        log.info("mcp config keys ignored", server=name, keys=unknown)
    return _resolved(server, environ)


def _resolved(server: McpServerConfig, environ: Mapping[str, str]) -> McpServerConfig:
    """Substitute `${VAR}`s and record every value that must never be shown."""
    substituted: set[str] = set()
    missing: list[str] = []

    def resolve(value: str) -> str:
        def one(match: re.Match[str]) -> str:
            variable = match.group(1)
            if variable not in environ:
                missing.append(variable)
                return ""
            substituted.add(environ[variable])
            return environ[variable]

        return _VARIABLE.sub(one, value)

    if isinstance(server, StdioServerConfig):
        update: dict[str, Any] = {
            "command": resolve(server.command),
            "args": [resolve(arg) for arg in server.args],
            "env": _resolve_values(server.env, resolve),
        }
        always_secret = update["env"].values()
    else:
        update = {"url": resolve(server.url), "headers": _resolve_values(server.headers, resolve)}
        always_secret = update["headers"].values()
    if missing:
        names = ", ".join(dict.fromkeys(missing))
        if len(set(missing)) == 1:
            raise _ServerConfigError(f"environment variable {names} is not set")
        raise _ServerConfigError(f"environment variables {names} are not set")
    resolved = server.model_copy(update=update)
    resolved._secrets = frozenset(
        value for value in substituted | set(always_secret) if len(value) >= _MIN_SECRET_LEN
    )
    return resolved


def _resolve_values(values: dict[str, str], resolve: Callable[[str], str]) -> dict[str, str]:
    return {key: resolve(value) for key, value in values.items()}
