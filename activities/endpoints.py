"""The model entries' endpoints as a worker process calls them (`AGENT_MODELS`, or `OPENAI_*`):
one client per endpoint, made once, with the entry's prices and concurrency slots. The model
activities call them, and so does a tool run whose MCP server asks the conversation's model
(`activities.mcp.sampling`)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import urlsplit

import openai
from temporalio import activity
from temporalio.exceptions import ApplicationError

from . import telemetry
from .models import ModelEntry, Models
from .pricing import Prices
from .settings import ActivitySettings

T = TypeVar("T")


@dataclass
class Endpoint:
    """A model entry as a call uses it: its name, spec, client, prices and concurrency slots."""

    name: str
    spec: ModelEntry
    client: openai.AsyncOpenAI
    prices: Prices
    server: str | None  # server.address, on spans
    label: str  # its model as metrics name it (`telemetry.model_label`)
    slots: asyncio.Semaphore | None = None  # the entry's max_concurrency, in this process

    def traced(self, attributes: dict[str, Any], content: dict[str, Any] | None = None
               ) -> AbstractContextManager[telemetry.ModelCall]:
        """The call's span and metrics (`telemetry.model_call`), with the entry's attributes."""
        return telemetry.model_call(self.spec.model, self.label, {
            "gen_ai.conversation.id": activity.info().workflow_id,
            "server.address": self.server, "agent.model_entry": self.name, **attributes},
            content)

    async def in_slot(self, call: Awaitable[T]) -> T:
        """`call`, once one of the entry's slots is free. Waiting for it is part of the call:
        a caller heartbeats through both, or a queued call would time out, be retried, and the
        old attempt send its request anyway once it got the slot."""
        if self.slots is None:
            return await call
        async with self.slots:
            return await call


class Endpoints:
    """The worker's model entries, each with its endpoint's client once asked for."""

    def __init__(self, settings: ActivitySettings, client: openai.AsyncOpenAI | None = None):
        """`client` serves the default entry (a test's endpoint, say)."""
        self._settings = settings
        self.models: Models = settings.model_entries()
        # By (base URL, key variable), made once: an endpoint's client and its host
        self._clients: dict[tuple[str | None, str | None],
                            tuple[openai.AsyncOpenAI, str | None]] = {}
        if client is not None:
            default = self.models.entries[self.models.default]
            self._clients[(default.base_url, default.api_key_env)] = _with_host(client)
        self._known = telemetry.known_models(settings)  # what a metric may name
        self._slots = {name: asyncio.Semaphore(e.max_concurrency)
                       for name, e in self.models.entries.items() if e.max_concurrency}

    def get(self, model: str | None, entry: str | None) -> Endpoint:
        """The entry a call goes to: the one the conversation fell back to, else the one its
        model names (`Models.resolve`)."""
        if entry is None:
            name, spec = self.models.resolve(model)
        elif entry in self.models.entries:
            name, spec = entry, self.models.entries[entry]
        else:
            raise ApplicationError(f"this worker has no model entry {entry!r} (AGENT_MODELS)",
                                   type="LLMModelUnavailable", non_retryable=True)
        key = (spec.base_url, spec.api_key_env)
        if key not in self._clients:
            self._clients[key] = _with_host(openai.AsyncOpenAI(
                api_key=self._settings.api_key(spec), base_url=spec.base_url,
                max_retries=0))  # Temporal's retry policy owns retries
        client, server = self._clients[key]
        prices = self._settings.prices.for_entry(spec.base_url, spec.free, spec.price)
        return Endpoint(name, spec, client, prices, server,
                        telemetry.model_label(spec.model, self._known), self._slots.get(name))


def _with_host(client: openai.AsyncOpenAI) -> tuple[openai.AsyncOpenAI, str | None]:
    return client, urlsplit(str(client.base_url)).hostname
