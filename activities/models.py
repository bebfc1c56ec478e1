"""Model entries (DESIGN "Models and providers"): `AGENT_MODELS` names a JSON file of endpoints,

    {"models": {"main":   {"model": "gpt-4o-mini", "api_key_env": "OPENAI_API_KEY",
                           "max_concurrency": 32, "max_requests_per_s": 8},
                "backup": {"model": "qwen2.5:7b", "base_url": "http://localhost:11434/v1",
                           "params": {"temperature": 0}}},
     "default": "main",
     "fallbacks": {"main": ["backup"]}}

read in the worker process only (a key is named by its variable, never written here). Without
the file, `OPENAI_*` describe one entry, `default`, as before. A conversation's `model` names an
entry, or, as before, a model on the default entry's endpoint.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, model_validator

from ..contract import EntryLimits
from .config_file import read_config
from .pricing import ModelPrice

DEFAULT_ENTRY = "default"
OUTPUT_PARAMS = frozenset({"max_tokens", "max_completion_tokens"})  # what a reply may take
MIN_CONTEXT_TOKENS = 256
NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:-]{0,63}")
# What `params` may not set: the call's own fields, which the conversation decides.
RESERVED_PARAMS = frozenset({"model", "messages", "tools", "tool_choice", "stream",
                             "stream_options", "response_format"})


class ModelsError(ValueError):
    """An AGENT_MODELS file the worker cannot use."""


class ModelEntry(BaseModel, extra="forbid"):
    model: str = Field(min_length=1, max_length=256)
    base_url: str | None = None  # None: OpenAI's
    api_key_env: str | None = "OPENAI_API_KEY"  # the variable holding the key (None: no key)
    params: dict[str, Any] = {}  # passed to the endpoint as they are (reasoning_effort, ...)
    max_concurrency: int | None = Field(default=None, ge=1)  # calls at once, per worker process
    max_requests_per_s: float | None = Field(default=None, gt=0)  # across every worker
    # The model's window (None: as its server says, where it does: `activities.windows`), and
    # what a reply may take of it (sent as `max_tokens`, and kept free of the prompt)
    context_tokens: int | None = Field(default=None, ge=MIN_CONTEXT_TOKENS)
    max_output_tokens: int | None = Field(default=None, ge=1)
    # A call's deadline and heartbeat (None: the conversation's, made for a hosted model)
    timeout_s: float | None = Field(default=None, gt=0, le=3600)
    heartbeat_s: float | None = Field(default=None, gt=0, le=600)
    free: bool = False  # costs nothing (a model on one's own machine)
    price: ModelPrice | None = None  # dollars per million tokens, beside AGENT_PRICES

    @model_validator(mode="after")
    def _params_are_extra(self) -> ModelEntry:
        clash = sorted(RESERVED_PARAMS & self.params.keys())
        if clash:
            raise ValueError(f"params may not set {', '.join(clash)}: the conversation does")
        if self.max_output_tokens is not None and OUTPUT_PARAMS & self.params.keys():
            raise ValueError("max_output_tokens and params' max_tokens say the same: keep one")
        if self.free and self.price is not None:
            raise ValueError("an entry is free or has a price, not both")
        if self.max_output_tokens and self.context_tokens and \
                self.max_output_tokens >= self.context_tokens:
            raise ValueError("max_output_tokens must leave room for a prompt in context_tokens")
        return self

    @property
    def call_params(self) -> dict[str, Any]:
        """What a model call sends beside its messages: `params`, and `max_tokens` where the
        entry says what a reply may take."""
        if self.max_output_tokens is None:
            return self.params
        return {"max_tokens": self.max_output_tokens, **self.params}

    def limits(self, window: int | None = None) -> EntryLimits | None:
        """What a conversation keeps of the entry (`window`: the one its server said, when the
        entry does not say), or None if nothing is set."""
        said = [v for k in OUTPUT_PARAMS if type(v := self.params.get(k)) is int and v > 0]
        limits = EntryLimits(context_tokens=self.context_tokens or window,
                             max_output_tokens=self.max_output_tokens or min(said, default=None),
                             timeout_s=self.timeout_s,
                             heartbeat_s=self.heartbeat_s)
        return None if limits == EntryLimits() else limits


class ModelsFile(BaseModel, extra="forbid"):
    models: dict[str, ModelEntry] = Field(min_length=1)
    default: str | None = None
    fallbacks: dict[str, list[str]] = {}

    @model_validator(mode="after")
    def _names_are_known(self) -> ModelsFile:
        for name in self.models:
            if not NAME.fullmatch(name):
                raise ValueError(f"entry name {name!r} must be 1-64 letters, digits, _ . : -")
        default = self.default or next(iter(self.models))
        if default not in self.models:
            raise ValueError(f"default names {default!r}, which is no entry")
        for name, chain in self.fallbacks.items():
            unknown = [n for n in (name, *chain) if n not in self.models]
            if unknown:
                raise ValueError(f"fallbacks of {name!r} name {', '.join(map(repr, unknown))}, "
                                 "which are no entries")
            if name in chain or len(set(chain)) != len(chain):
                raise ValueError(f"fallbacks of {name!r} repeat an entry")
        return self


class Models:
    """The entries, the default one, and each entry's fallbacks."""

    def __init__(self, entries: Mapping[str, ModelEntry], default: str = DEFAULT_ENTRY,
                 fallbacks: Mapping[str, list[str]] | None = None):
        self.entries = dict(entries)
        self.default = default
        self.fallbacks = {k: list(v) for k, v in (fallbacks or {}).items()}

    @classmethod
    def single(cls, model: str, base_url: str | None) -> Models:
        """Today's one endpoint: `OPENAI_MODEL` on `OPENAI_BASE_URL` with `OPENAI_API_KEY`."""
        return cls({DEFAULT_ENTRY: ModelEntry(model=model, base_url=base_url)})

    @classmethod
    def load(cls, path: Path) -> Models:
        """The entries of an AGENT_MODELS file (`ModelsError`: why it cannot be used)."""
        parsed = read_config(path, ModelsFile, "AGENT_MODELS", ModelsError)
        return cls(parsed.models, parsed.default or next(iter(parsed.models)), parsed.fallbacks)

    def resolve(self, name: str | None) -> tuple[str, ModelEntry]:
        """The entry a conversation's `model` names: an entry by name; None, the default; any
        other name, that model on the default entry's endpoint (as before entries)."""
        if name is None:
            return self.default, self.entries[self.default]
        if name in self.entries:
            return name, self.entries[name]
        default = self.entries[self.default]
        return self.default, default.model_copy(update={"model": name})

    def chain(self, name: str | None) -> list[str]:
        """The entries a call on `name` may use, in order: it, then its fallbacks."""
        entry, _ = self.resolve(name)
        return [entry, *self.fallbacks.get(entry, [])]

    def api_key(self, entry: ModelEntry, env: Mapping[str, str] = os.environ) -> str:
        """The entry's key, from the worker's environment (local endpoints need none; the SDK
        insists on one)."""
        return (env.get(entry.api_key_env) if entry.api_key_env else None) or "unset"

    def limited(self) -> dict[str, float]:
        """The entries whose requests per second hold across workers."""
        return {name: e.max_requests_per_s for name, e in self.entries.items()
                if e.max_requests_per_s is not None}


WORKER_ROLES = ("all", "workflows", "models", "tools")


def role_queues(task_queue: str) -> dict[str, str]:
    """Where model calls and tool runs go when workers split the roles (`--role`)."""
    return {"models": f"{task_queue}.models", "tools": f"{task_queue}.tools"}


def model_queue(task_queue: str, entry: str) -> str:
    """The task queue of a rate-limited entry's model calls: the server dispatches its tasks at
    the entry's rate, whatever the number of workers that poll it."""
    return f"{task_queue}.model.{entry}"


def model_routes(models: Models | None, task_queue: str,
                 windows: Mapping[str, int] | None = None) -> dict[str, Any]:
    """What a conversation keeps of the entries (`WorkerHandshake`): without AGENT_MODELS, only the
    limits of the one entry (`windows`: those the servers said), so that conversations route as
    before."""
    limits = {name: limited for name, entry in (models.entries if models else {}).items()
              if (limited := entry.limits((windows or {}).get(name))) is not None}
    if models is None or set(models.entries) == {DEFAULT_ENTRY} and not models.fallbacks \
            and not models.limited():
        return {"model_limits": limits} if limits else {}
    return {"model_entries": list(models.entries), "default_model_entry": models.default,
            "model_fallbacks": models.fallbacks, "model_limits": limits,
            "model_queues": {name: model_queue(task_queue, name) for name in models.limited()}}
