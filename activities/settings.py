"""Worker-side settings, read from the environment once, in the worker process only."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ..contract.memory import DEFAULT_MAX_PER_OWNER, DEFAULT_RECALL, MAX_RECALLED
from ..contract.owner import OwnerLimitsFile
from .config_file import read_config
from .context_cache import DEFAULT_MAX_BYTES as DEFAULT_CONTEXT_CACHE_BYTES
from .memory import check_url, default_url
from .models import ModelEntry, Models
from .policy import Policy, load_policy
from .pricing import Prices
from .profiles import Profiles
from .remote_agents import RemoteAgentsFile, load_remote_agents
from .webhooks import DEFAULT_LINK_TTL_S, Webhooks

DEFAULT_GEOCODING_URL = "https://geocoding-api.open-meteo.com/v1/search"
DEFAULT_FORECAST_URL = "https://api.open-meteo.com/v1/forecast"
FOUR_EYES_RISKS = ("sensitive", "destructive")  # a safe call waits for nobody


@dataclass(frozen=True)
class ActivitySettings:
    """What activities need from the environment. Secrets stay here, never in workflow input."""

    openai_api_key: str | None = field(default=None, repr=False)
    openai_base_url: str | None = None
    openai_model: str = "gpt-4o-mini"
    geocoding_url: str = DEFAULT_GEOCODING_URL
    forecast_url: str = DEFAULT_FORECAST_URL
    data_dir: Path = Path(".agent-data")
    mcp_config: Path | None = None  # AGENT_MCP_CONFIG: an mcpServers JSON file
    # AGENT_AUTO_APPROVE: the non-safe tools a conversation's policy may let run without a human
    # (comma-separated names; `*`: any). By default none: every non-safe call needs a person.
    auto_approvable: frozenset[str] | None = frozenset()
    # AGENT_POLICY: the operator's rules over calls and their arguments (`activities.policy`).
    # Its `allow` rules are the operator's own, as AGENT_AUTO_APPROVE is: they may let run the
    # non-safe tools AGENT_AUTO_APPROVE lists when it is set, any when it is not.
    policy: Policy | None = None
    auto_approve_set: bool = False
    # AGENT_REVIEWER: the model entry that reviews the calls of the policy's `review` rules
    reviewer: str | None = None
    # AGENT_CONTEXT_CACHE_MB: what the worker may hold of conversations' last prompts and tool
    # lists, so that model calls carry deltas (a miss refetches the prompt; nothing is lost).
    context_cache_bytes: int = DEFAULT_CONTEXT_CACHE_BYTES
    prices: Prices = field(default_factory=Prices)  # AGENT_PRICES over genai-prices
    profiles: Profiles = field(default_factory=Profiles)  # AGENT_PROFILES: subagents
    # AGENT_TOOLS: modules of `@tool` functions, comma-separated (installed packages that declare
    # the entry-point group `durable_react_agent.tools` come too).
    tool_modules: tuple[str, ...] = ()
    builtin_tools: bool = True  # AGENT_BUILTIN_TOOLS=off: no get_weather, no notes
    # AGENT_LOCAL_TOOLS=off: every tool runs as an activity of its own, none as a local activity
    # in the workflow task (`ToolSpec.local`); a worker that splits the roles runs none locally
    local_tools: bool = True
    # AGENT_FOUR_EYES: risks (comma-separated) whose calls someone other than the conversation's
    # owner must decide; reaches each conversation with its tools, as the floor above does
    four_eyes: tuple[str, ...] = ()
    # AGENT_MODELS: model entries and their fallbacks (None: OPENAI_* describe one entry)
    models: Models | None = None
    # AGENT_WEBHOOKS: where events are delivered; AGENT_WEBHOOK_RETRY_S: for how long a
    # delivery is retried before it is given up (and recorded as failed)
    webhooks: Webhooks | None = None
    webhook_retry_s: float = 3600.0
    # Memory across conversations: AGENT_MEMORY=off turns it off; AGENT_MEMORY_URL names the
    # store (None: SQLite in the data dir); AGENT_MEMORY_RECALL, how many memories a turn
    # recalls; AGENT_MEMORY_MAX, how many an owner keeps (past it the least-used go)
    memory: bool = True
    memory_url: str | None = field(default=None, repr=False)  # may hold a password
    memory_recall: int = DEFAULT_RECALL
    memory_max: int = DEFAULT_MAX_PER_OWNER
    # AGENT_MEMORY_EMBEDDINGS: the model entry whose /v1/embeddings ranks memories beside the
    # full-text rank (None: the text rank alone)
    memory_embeddings: str | None = None
    # AGENT_OWNER_LIMITS: each owner's running turns at once, tokens and dollars a day, held
    # by the owner's ledger workflow (`workflows.owner_ledger`); None: no limits
    owner_limits: OwnerLimitsFile | None = None
    remote_agents: RemoteAgentsFile | None = None  # AGENT_A2A_AGENTS: A2A agents as tools

    @classmethod
    def from_env(cls) -> ActivitySettings:
        env = os.environ
        settings = cls(
            openai_api_key=env.get("OPENAI_API_KEY") or None,
            openai_base_url=env.get("OPENAI_BASE_URL") or None,
            openai_model=env.get("OPENAI_MODEL") or cls.openai_model,
            geocoding_url=env.get("OPEN_METEO_GEOCODING_URL") or DEFAULT_GEOCODING_URL,
            forecast_url=env.get("OPEN_METEO_FORECAST_URL") or DEFAULT_FORECAST_URL,
            data_dir=Path(env.get("AGENT_DATA_DIR") or ".agent-data"),
            mcp_config=Path(env["AGENT_MCP_CONFIG"]) if env.get("AGENT_MCP_CONFIG") else None,
            auto_approvable=auto_approvable(env.get("AGENT_AUTO_APPROVE", "")),
            auto_approve_set=bool(env.get("AGENT_AUTO_APPROVE", "").strip()),
            policy=load_policy(Path(env["AGENT_POLICY"])) if env.get("AGENT_POLICY") else None,
            context_cache_bytes=megabytes("AGENT_CONTEXT_CACHE_MB",
                                          env.get("AGENT_CONTEXT_CACHE_MB", ""),
                                          cls.context_cache_bytes),
            prices=Prices.load(Path(env["AGENT_PRICES"]) if env.get("AGENT_PRICES") else None),
            profiles=Profiles.load(Path(env["AGENT_PROFILES"]) if env.get("AGENT_PROFILES")
                                   else None),
            tool_modules=tuple(m.strip() for m in env.get("AGENT_TOOLS", "").split(",")
                               if m.strip()),
            builtin_tools=on_or_off("AGENT_BUILTIN_TOOLS", env.get("AGENT_BUILTIN_TOOLS", ""),
                                    default=True),
            local_tools=on_or_off("AGENT_LOCAL_TOOLS", env.get("AGENT_LOCAL_TOOLS", ""),
                                  default=True),
            four_eyes=four_eyes(env.get("AGENT_FOUR_EYES", "")),
            models=Models.load(Path(env["AGENT_MODELS"])) if env.get("AGENT_MODELS") else None,
            webhooks=Webhooks.load(Path(env["AGENT_WEBHOOKS"]), env,
                                   seconds(env, "AGENT_LINK_TTL_S", DEFAULT_LINK_TTL_S))
            if env.get("AGENT_WEBHOOKS") else None,
            webhook_retry_s=float(seconds(env, "AGENT_WEBHOOK_RETRY_S", 3600)),
            memory=on_or_off("AGENT_MEMORY", env.get("AGENT_MEMORY", ""), default=True),
            memory_url=check_url(env["AGENT_MEMORY_URL"]) if env.get("AGENT_MEMORY_URL")
            else None,
            memory_recall=count(env, "AGENT_MEMORY_RECALL", DEFAULT_RECALL, low=0,
                                high=MAX_RECALLED),
            memory_max=count(env, "AGENT_MEMORY_MAX", DEFAULT_MAX_PER_OWNER, low=1,
                             high=1_000_000),
            memory_embeddings=env.get("AGENT_MEMORY_EMBEDDINGS", "").strip() or None,
            reviewer=env.get("AGENT_REVIEWER", "").strip() or None,
            owner_limits=read_config(Path(env["AGENT_OWNER_LIMITS"]), OwnerLimitsFile,
                                     "AGENT_OWNER_LIMITS", ValueError)
            if env.get("AGENT_OWNER_LIMITS") else None,
            remote_agents=load_remote_agents(Path(env["AGENT_A2A_AGENTS"]), env)
            if env.get("AGENT_A2A_AGENTS") else None,
        )
        entries = settings.model_entries().entries
        if settings.memory_embeddings is not None and settings.memory_embeddings not in entries:
            raise ValueError(f"AGENT_MEMORY_EMBEDDINGS names {settings.memory_embeddings!r}, "
                             f"which is no model entry (the entries: {', '.join(entries)})")
        reviewing = settings.policy.reviewing() if settings.policy else []
        if reviewing and settings.reviewer is None:
            raise ValueError(f"AGENT_POLICY: rule {reviewing[0]!r} hands calls to a reviewer "
                             "model, and AGENT_REVIEWER names none (a model entry)")
        if settings.reviewer is not None and settings.reviewer not in entries:
            raise ValueError(f"AGENT_REVIEWER names {settings.reviewer!r}, which is no model "
                             f"entry (the entries: {', '.join(entries)})")
        return settings

    @property
    def policy_floor(self) -> frozenset[str] | None:
        """The non-safe tools the policy's `allow` rules may let run without a person: those
        AGENT_AUTO_APPROVE lists, if it is set; else any (None)."""
        return self.auto_approvable if self.auto_approve_set else None

    @property
    def memory_store_url(self) -> str:
        """Where memories are kept: AGENT_MEMORY_URL, else SQLite in the data dir."""
        return self.memory_url or default_url(self.data_dir)

    def api_key(self, entry: ModelEntry) -> str:
        """A model entry's key: OPENAI_API_KEY as read with the settings; another entry's from
        the variable it names, read here, in the worker (local endpoints need none)."""
        if entry.api_key_env == "OPENAI_API_KEY":
            return self.openai_api_key or "unset"
        return self.model_entries().api_key(entry)

    def model_entries(self) -> Models:
        """The model entries: AGENT_MODELS's, or the one OPENAI_* describe."""
        return self.models or Models.single(self.openai_model, self.openai_base_url)


def auto_approvable(value: str) -> frozenset[str] | None:
    """`AGENT_AUTO_APPROVE`: tool names, comma-separated; `*` for any."""
    names = frozenset(n.strip() for n in value.split(",") if n.strip())
    return None if "*" in names else names


def seconds(env: Mapping[str, str], name: str, default: int) -> int:
    """A whole number of seconds, at least 1, from the environment."""
    raw = env.get(name, "").strip()
    if not raw:
        return default
    if not raw.isdigit() or int(raw) < 1:
        raise ValueError(f"{name} must be a whole number of seconds, not {raw!r}")
    return int(raw)


def count(env: Mapping[str, str], name: str, default: int, low: int, high: int) -> int:
    """A whole number between `low` and `high` from the environment."""
    raw = env.get(name, "").strip()
    if not raw:
        return default
    if not raw.isdigit() or not low <= int(raw) <= high:
        raise ValueError(f"{name} must be a whole number from {low} to {high}, not {raw!r}")
    return int(raw)


def four_eyes(value: str) -> tuple[str, ...]:
    """`AGENT_FOUR_EYES`: risks, comma-separated (`destructive`, or `sensitive,destructive`)."""
    risks = tuple(dict.fromkeys(r.strip().lower() for r in value.split(",") if r.strip()))
    unknown = [r for r in risks if r not in FOUR_EYES_RISKS]
    if unknown:
        raise ValueError(f"AGENT_FOUR_EYES names {', '.join(map(repr, unknown))}: the risks it "
                         f"may name are {', '.join(FOUR_EYES_RISKS)}")
    return risks


def on_or_off(name: str, value: str, default: bool) -> bool:
    value = value.strip().lower()
    if value not in ("", "on", "off"):
        raise ValueError(f"{name} must be on or off, not {value!r}")
    return default if not value else value == "on"


def megabytes(name: str, value: str, default: int) -> int:
    """A size in MiB from the environment, in bytes; a clear error for anything but a number."""
    if not value.strip():
        return default
    try:
        mib = float(value)
    except ValueError:
        raise ValueError(f"{name} must be a number of MiB, not {value!r}") from None
    if not 0 <= mib <= 2**20:
        raise ValueError(f"{name} must be between 0 and {2**20} MiB, not {value!r}")
    return int(mib * 2**20)
