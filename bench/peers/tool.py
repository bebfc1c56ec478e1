"""The peers' `get_weather`: our handler, as our tool activity runs it."""

from __future__ import annotations

import os

import httpx

from durable_react_agent.activities.settings import ActivitySettings
from durable_react_agent.activities.tools import ToolContext, default_registry

_http: httpx.AsyncClient | None = None


async def weather_of(location: str) -> str:
    """Our `get_weather`, as our tool activity runs it (one HTTP client per worker process)."""
    global _http
    if _http is None:
        _http = httpx.AsyncClient(timeout=15)
    spec = default_registry().get("get_weather")
    settings = ActivitySettings(geocoding_url=os.environ["OPEN_METEO_GEOCODING_URL"],
                                forecast_url=os.environ["OPEN_METEO_FORECAST_URL"])
    ctx = ToolContext(settings=settings, http=_http, call_id="peer", idempotency_key="peer")
    return await spec.handler(spec.args_model(location=location), ctx)
