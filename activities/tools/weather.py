"""`get_weather`: Open-Meteo geocoding, then the current forecast."""

from __future__ import annotations

from collections import OrderedDict
from typing import Annotated

import httpx
from pydantic import Field

from .function_tool import tool
from .registry import ToolContext, ToolError

MAX_PLACES = 1024  # places a worker keeps found, the least recently asked for going first
_PLACES: OrderedDict[tuple[str, str], dict] = OrderedDict()
CURRENT_FIELDS = "temperature_2m,relative_humidity_2m,wind_speed_10m,weather_code"
WMO_CODES = {
    0: "clear sky", 1: "mainly clear", 2: "partly cloudy", 3: "overcast", 45: "fog",
    48: "depositing rime fog", 51: "light drizzle", 53: "drizzle", 55: "dense drizzle",
    61: "slight rain", 63: "rain", 65: "heavy rain", 71: "slight snow", 73: "snow",
    75: "heavy snow", 80: "rain showers", 81: "rain showers", 82: "violent rain showers",
    95: "thunderstorm", 96: "thunderstorm with hail", 99: "thunderstorm with heavy hail",
}


@tool(timeout_s=20.0)
async def get_weather(location: Annotated[str, Field(min_length=1)], ctx: ToolContext) -> str:
    """Get the current weather (temperature, sky, humidity, wind) for a place.

    Args:
        location: A city or place name, e.g. 'Paris'
    """
    place = await _place(ctx, location)
    forecast = await _get_json(
        ctx.http, ctx.settings.forecast_url,
        {"latitude": place["latitude"], "longitude": place["longitude"],
         "current": CURRENT_FIELDS, "timezone": "auto"},
    )
    current = forecast.get("current") or {}
    units = forecast.get("current_units") or {}
    where = ", ".join(p for p in (place.get("name"), place.get("country")) if p)
    sky = WMO_CODES.get(current.get("weather_code"), f"weather code {current.get('weather_code')}")
    return (
        f"{where}: {current.get('temperature_2m')}{units.get('temperature_2m', '°C')}, {sky}, "
        f"humidity {current.get('relative_humidity_2m')}{units.get('relative_humidity_2m', '%')}, "
        f"wind {current.get('wind_speed_10m')} {units.get('wind_speed_10m', 'km/h')} "
        f"(observed {current.get('time')} local time)"
    )


async def _place(ctx: ToolContext, location: str) -> dict:
    """The place a name stands for, as the geocoding service found it; found once per worker
    (places do not move): the forecast is the only call a repeated city costs."""
    key = (ctx.settings.geocoding_url, location.strip().casefold())
    if (place := _PLACES.get(key)) is not None:
        _PLACES.move_to_end(key)
        return place
    geo = await _get_json(
        ctx.http, ctx.settings.geocoding_url,
        {"name": location, "count": 1, "language": "en", "format": "json"},
    )
    results = geo.get("results") or []
    if not results:  # not kept: a name may be found later (a service that was catching up)
        raise ToolError(
            f"no place named {location!r} was found; check the spelling or name a larger "
            "place nearby"
        )
    _PLACES[key] = place = results[0]
    if len(_PLACES) > MAX_PLACES:
        _PLACES.popitem(last=False)
    return place


async def _get_json(http: httpx.AsyncClient, url: str, params: dict) -> dict:
    response = await http.get(url, params=params)
    if 400 <= response.status_code < 500:
        # The request is wrong, so a retry cannot help: tell the model instead.
        raise ToolError(f"the weather service refused the request ({response.status_code}): "
                        f"{response.text[:200]}")
    response.raise_for_status()  # 5xx: raised, so Temporal retries this idempotent tool
    return response.json()
