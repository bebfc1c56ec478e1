"""What a model call costs in dollars: `genai-prices` (the maintained price database pydantic-ai
also uses), under a price-override file for private or local models (`AGENT_PRICES`). A call is
priced by its entry's model, never by the name the endpoint answers with, and it costs 0 only
where the configuration says so (an override of zero prices): a host or port that looks local
may be a proxy in front of a paid endpoint. An unknown model costs `None`, with a note saying
so: never a made-up number.

The override file:

    {"models": {"my-vllm-model": {"input_per_mtok": 0.2, "output_per_mtok": 0.6,
                                  "cached_input_per_mtok": 0.1}}}

prices per million tokens; a missing cached price is the input price.
"""

from __future__ import annotations

import json
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel, Field, ValidationError

from ..contract import Usage


class ModelPrice(BaseModel):
    input_per_mtok: float = Field(ge=0)
    output_per_mtok: float = Field(ge=0)
    cached_input_per_mtok: float | None = Field(default=None, ge=0)

    def cost(self, usage: Usage) -> float:
        cached = min(usage.cached_tokens, usage.prompt_tokens)
        cached_price = (self.input_per_mtok if self.cached_input_per_mtok is None
                        else self.cached_input_per_mtok)
        return ((usage.prompt_tokens - cached) * self.input_per_mtok
                + cached * cached_price + usage.completion_tokens * self.output_per_mtok) / 1e6


class PriceFile(BaseModel):
    models: dict[str, ModelPrice] = {}


class PricesError(ValueError):
    """An AGENT_PRICES file the worker cannot use."""


@dataclass(frozen=True)
class Prices:
    """Prices a call's usage; `base_url` is the model endpoint (OPENAI_BASE_URL)."""

    base_url: str | None = None
    overrides: dict[str, ModelPrice] = field(default_factory=dict)
    free: bool = False  # the entry's own word: it costs nothing
    price: ModelPrice | None = None  # or its own price

    @classmethod
    def load(cls, path: Path | None) -> Prices:
        """The overrides of an AGENT_PRICES file; an entry binds its own by `for_entry`."""
        if path is None:
            return cls()
        try:
            parsed = PriceFile.model_validate(json.loads(path.read_text()))
        except (OSError, json.JSONDecodeError, ValidationError) as err:
            raise PricesError(f"AGENT_PRICES={path} cannot be used: {err}") from None
        return cls(overrides=parsed.models)

    def for_entry(self, base_url: str | None, free: bool = False,
                  price: ModelPrice | None = None) -> Prices:
        """The prices of a model entry: its own (`free`, `price`), else AGENT_PRICES's, else
        what genai-prices knows of its endpoint's provider."""
        return Prices(base_url, self.overrides, free, price)

    def priced(self, model: str, usage: Usage) -> Usage:
        """The usage with its cost (or None and a note). A call with no usage reported stays
        of unknown cost: pricing its zero tokens would say it cost nothing."""
        if usage.unmetered_calls:
            return usage
        cost, note = self.cost(model, usage)
        return usage.model_copy(update={"cost_usd": cost, "cost_note": note,
                                        "unpriced_calls": int(cost is None)})

    def cost(self, model: str, usage: Usage) -> tuple[float | None, str | None]:
        if self.free:
            return 0.0, None
        if self.price is not None:
            return round(self.price.cost(usage), 10), None
        if model in self.overrides:
            return round(self.overrides[model].cost(usage), 10), None
        import genai_prices  # imported on first use: its price data takes a moment to load

        counted = genai_prices.Usage(input_tokens=usage.prompt_tokens,
                                     output_tokens=usage.completion_tokens,
                                     cache_read_tokens=min(usage.cached_tokens,
                                                           usage.prompt_tokens))
        # The endpoint's provider first; a local or unknown endpoint: by the model's name alone.
        wheres = [{"provider_api_url": self.base_url}] if self.base_url else []
        for where in [*wheres, {}]:
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    price = genai_prices.calc_price(counted, model, **where)
            except LookupError:
                continue
            return round(float(price.total_price), 10), None
        return None, (f"no price for {model!r}: give its entry \"free\": true or a \"price\" "
                      "(AGENT_MODELS), or add it to AGENT_PRICES")
