"""The MCP servers the tests run (tests/mcp_servers), and the token the HTTP one expects (not
collected: no `test_` prefix). The `http_ports` fixture that starts the HTTP ones is in
conftest.py."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import ActivityEnvironment

PYTHON = sys.executable
SERVERS = Path(__file__).parent / "mcp_servers"
TOKEN = "tok-3f9a1c77e2b04d5a"  # what the HTTP server expects as a bearer token: a secret


def asking_config(directory: Path, **entry: object) -> tuple[Path, Path]:
    """An `mcpServers` file in `directory` with the server `asking` (mcp_servers/asking_server.py,
    as safe; `entry`'s keys over that), and the file it writes down what it was told in."""
    directory.mkdir(parents=True, exist_ok=True)
    log, config = directory / "asking.log", directory / "mcp.json"
    config.write_text(json.dumps({"mcpServers": {"asking": {
        "command": PYTHON, "args": [str(SERVERS / "asking_server.py")],
        "env": {"ASKING_LOG": str(log)}, "risk": "safe", **entry}}}))
    return config, log


def told(log: Path) -> list[dict]:
    """What the `asking` server wrote down, one record per line."""
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def tool_env(tool: str, conversation: str = "conversation") -> ActivityEnvironment:
    """An environment to run the tool activity in, as the worker does: a call of `tool` by the
    conversation (the workflow id) `conversation`."""
    env = ActivityEnvironment()
    env.payload_converter = pydantic_data_converter.payload_converter
    env.info = dataclasses.replace(env.info, activity_type=tool, workflow_id=conversation)
    return env
