"""The API's settings, read once from the environment at start-up, with a clear error for each
bad value (`agent-api` exits 2 on it)."""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from ..activities.memory import url_from_env
from ..activities.profiles import AgentProfile, Profiles, ProfilesError
from .access import TokenBook, TokenError

DEFAULT_ADDRESS = "127.0.0.1:8000"
DEFAULT_MAX_BODY_BYTES = 1 << 20  # a message is at most 256 KiB; the rest is JSON around it
DEFAULT_TEMPORAL_UI = "http://localhost:8233"
DEFAULT_TIMEOUT_S = 15.0


class SettingsError(ValueError):
    """An environment variable the API cannot start with."""


def _memory_url(env: Mapping[str, str]) -> str | None:
    try:
        return url_from_env(env)
    except ValueError as err:
        raise SettingsError(str(err)) from None


@dataclass(frozen=True)
class ApiSettings:
    host: str = "127.0.0.1"
    port: int = 8000
    tokens: TokenBook = field(default_factory=TokenBook)  # named tokens, with their roles
    cors_origins: tuple[str, ...] = ()
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    temporal_ui: str = DEFAULT_TEMPORAL_UI
    timeout_s: float = DEFAULT_TIMEOUT_S  # how long a request waits for a worker
    trace_url: str | None = None  # AGENT_TRACE_URL: a trace viewer's URL with {trace_id}
    link_secret: str | None = field(default=None, repr=False)  # AGENT_LINK_SECRET
    # the workers' memory store (AGENT_MEMORY_URL, AGENT_DATA_DIR); None: AGENT_MEMORY=off
    memory_url: str | None = field(default=None, repr=False)
    # where A2A clients reach this API (AGENT_PUBLIC_URL, as the worker's links say; default its
    # own address): the agent card names the JSON-RPC binding there
    public_url: str = ""
    # AGENT_PROFILES, the worker's agent profiles: each is an A2A agent of its own (`api.a2a`)
    profiles: dict[str, AgentProfile] = field(default_factory=dict)

    @classmethod
    def from_env(cls, env: Mapping[str, str] = os.environ) -> ApiSettings:
        host, port = parse_address(env.get("AGENT_API_ADDRESS") or DEFAULT_ADDRESS)
        settings = cls(
            host=host,
            port=port,
            tokens=token_book(env),
            cors_origins=tuple(o.strip().rstrip("/") for o in
                               env.get("AGENT_API_CORS_ORIGINS", "").split(",") if o.strip()),
            max_body_bytes=_positive_int(env, "AGENT_API_MAX_BODY_BYTES", DEFAULT_MAX_BODY_BYTES),
            temporal_ui=(env.get("AGENT_TEMPORAL_UI_URL") or DEFAULT_TEMPORAL_UI).rstrip("/"),
            timeout_s=float(_positive_int(env, "AGENT_API_TIMEOUT_S", int(DEFAULT_TIMEOUT_S))),
            trace_url=trace_url(env.get("AGENT_TRACE_URL", "")),
            link_secret=env.get("AGENT_LINK_SECRET") or None,
            memory_url=_memory_url(env),
            public_url=(env.get("AGENT_PUBLIC_URL") or f"http://{host}:{port}").rstrip("/"),
            profiles=_profiles(env),
        )
        settings.check_exposure()
        return settings

    @property
    def ui_origin(self) -> str:
        """The Temporal UI's origin, whose pages call the codec endpoints."""
        ui = urlsplit(self.temporal_ui)
        return f"{ui.scheme}://{ui.netloc}"

    @property
    def auth_required(self) -> bool:
        return bool(self.tokens)

    def check_exposure(self) -> None:
        """Anyone who reaches an API without tokens can approve writes: loopback only."""
        if not self.tokens and not is_loopback(self.host):
            raise SettingsError(
                f"refusing to listen on {self.host} without AGENT_API_TOKENS: anyone who can "
                "reach it could approve tool calls. Set AGENT_API_TOKENS (name:token,...) or "
                "AGENT_API_TOKENS_FILE, or bind to 127.0.0.1")


def parse_address(raw: str) -> tuple[str, int]:
    host, sep, port = raw.strip().rpartition(":")
    if not sep or not host:
        raise SettingsError(f"AGENT_API_ADDRESS must be host:port, not {raw!r}")
    try:
        number = int(port)
    except ValueError:
        raise SettingsError(f"AGENT_API_ADDRESS has no valid port: {raw!r}") from None
    if not 0 < number < 65536:
        raise SettingsError(f"AGENT_API_ADDRESS port must be 1-65535, not {number}")
    return host.strip("[]"), number


def _profiles(env: Mapping[str, str]) -> dict[str, AgentProfile]:
    path = env.get("AGENT_PROFILES")
    try:
        return Profiles.load(Path(path) if path else None).agents
    except ProfilesError as err:
        raise SettingsError(str(err)) from None


def token_book(env: Mapping[str, str]) -> TokenBook:
    """`AGENT_API_TOKENS` and `AGENT_API_TOKENS_FILE`, together."""
    path = env.get("AGENT_API_TOKENS_FILE")
    try:
        return TokenBook.load(env.get("AGENT_API_TOKENS", ""), Path(path) if path else None)
    except TokenError as err:
        raise SettingsError(str(err)) from None


def trace_url(raw: str) -> str | None:
    """`AGENT_TRACE_URL`: where a trace is shown, `{trace_id}` standing for its id."""
    raw = raw.strip()
    if not raw:
        return None
    if "{trace_id}" not in raw or not raw.startswith(("http://", "https://")):
        raise SettingsError("AGENT_TRACE_URL must be an http(s) URL with {trace_id} in it, "
                            f"not {raw[:100]!r}")
    return raw


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def is_loopback_host(header: str) -> bool:
    """Whether a Host header names a loopback address (`localhost`, 127.0.0.0/8, `[::1]`), with or
    without a port."""
    bracketed = header.startswith("[")
    if bracketed:  # an IPv6 address: `[::1]` or `[::1]:8000`
        host, _, rest = header[1:].partition("]")
        sep, port = rest[:1], rest[1:]
        if sep not in ("", ":"):
            return False
    else:
        host, sep, port = header.partition(":")
    if sep and not port.isdigit():
        return False
    return is_loopback(host.lower())


def _positive_int(env: Mapping[str, str], name: str, default: int) -> int:
    raw = env.get(name)
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise SettingsError(f"{name} must be a whole number, not {raw!r}") from None
    if value < 1:
        raise SettingsError(f"{name} must be at least 1")
    return value
