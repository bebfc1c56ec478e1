"""When a conversation lists its tools again: an MCP server said its list changed
(`notifications/tools/list_changed`), and the worker's listing now differs from the one the
conversation's handshake kept. Pure functions."""

from __future__ import annotations


def changed_servers(kept: dict[str, str], now: dict[str, str]) -> list[str]:
    """The servers whose tools differ from the handshake's (`kept`: each server's digest of its
    tools then; `now`: as the worker lists them now), or that list tools now and did not then.
    A server that does not list now (it is down, say) is no change: its tools stay offered, and
    a call to one of them says why it fails."""
    return sorted(name for name, digest in now.items() if kept.get(name) != digest)
