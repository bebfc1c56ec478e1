"""`get_weather`: Open-Meteo geocoding, then the current forecast."""

from __future__ import annotations

import httpx
from pydantic import BaseModel, Field

from activities.tools.registry import ToolContext, ToolError, ToolSpec

CURRENT_FIELDS = "temperature_2m,relative_humidity_2m,wind_speed_10m,weather_code"
WMO_CODES = {
    0: "clear sky", 1: "mainly clear", 2: "partly cloudy", 3: "overcast", 45: "fog",
    48: "depositing rime fog", 51: "light drizzle", 53: "drizzle", 55: "dense drizzle",
    61: "slight rain", 63: "rain", 65: "heavy rain", 71: "slight snow", 73: "snow",
    75: "heavy snow", 80: "rain showers", 81: "rain showers", 82: "violent rain showers",
    95: "thunderstorm", 96: "thunderstorm with hail", 99: "thunderstorm with heavy hail",
}


class WeatherArgs(BaseModel):
    location: str = Field(min_length=1, description="A city or place name, e.g. 'Paris'")


async def get_weather(args: WeatherArgs, ctx: ToolContext) -> str:
    geo = await _get_json(
        ctx.http, ctx.settings.geocoding_url,
        {"name": args.location, "count": 1, "language": "en", "format": "json"},
    )
    results = geo.get("results") or []
    if not results:
        raise ToolError(
            f"no place named {args.location!r} was found; check the spelling or name a larger "
            "place nearby"
        )
    place = results[0]
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


async def _get_json(http: httpx.AsyncClient, url: str, params: dict) -> dict:
    response = await http.get(url, params=params)
    if 400 <= response.status_code < 500:
        # The request is wrong, so a retry cannot help: tell the model instead.
        raise ToolError(f"the weather service refused the request ({response.status_code}): "
                        f"{response.text[:200]}")
    response.raise_for_status()  # 5xx: raised, so Temporal retries this idempotent tool
    return response.json()


WEATHER = ToolSpec(
    name="get_weather",
    description="Get the current weather (temperature, sky, humidity, wind) for a place.",
    args_model=WeatherArgs,
    handler=get_weather,
    risk="safe",
    idempotent=True,
    timeout_s=20.0,
)
