"""The MCP servers the tests run (tests/mcp_servers), and the token the HTTP one expects (not
collected: no `test_` prefix). The `http_ports` fixture that starts the HTTP ones is in
conftest.py."""

from __future__ import annotations

import sys
from pathlib import Path

PYTHON = sys.executable
SERVERS = Path(__file__).parent / "mcp_servers"
TOKEN = "tok-3f9a1c77e2b04d5a"  # what the HTTP server expects as a bearer token: a secret
