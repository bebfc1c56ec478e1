"""A fake Open-Meteo (geocoding + current forecast) so the offline demo needs no internet.

Response shapes follow the real API closely enough for the weather tool: an
unknown city yields a body with no "results" key, and bad coordinates yield a
400 with {"error": true, "reason": ...}. Values are pure functions of the input.
"""

from __future__ import annotations

from typing import Any

# name, latitude, longitude, country, timezone
_CITIES: list[tuple[str, float, float, str, str]] = [
    ("Paris", 48.85341, 2.3488, "France", "Europe/Paris"),
    ("London", 51.50853, -0.12574, "United Kingdom", "Europe/London"),
    ("Beijing", 39.9075, 116.39723, "China", "Asia/Shanghai"),
    ("Tokyo", 35.6895, 139.69171, "Japan", "Asia/Tokyo"),
    ("New York", 40.71427, -74.00597, "United States", "America/New_York"),
    ("Berlin", 52.52437, 13.41053, "Germany", "Europe/Berlin"),
    ("Sydney", -33.86785, 151.20732, "Australia", "Australia/Sydney"),
]
CITY_NAMES = tuple(city[0] for city in _CITIES)  # what the offline model recognises in a message

_WEATHER_CODES = [0, 1, 2, 3, 45, 61, 71, 80]

CURRENT_UNITS = {
    "time": "iso8601",
    "temperature_2m": "°C",
    "relative_humidity_2m": "%",
    "wind_speed_10m": "km/h",
    "weather_code": "wmo code",
}


def _error(reason: str) -> tuple[int, dict[str, Any]]:
    return 400, {"error": True, "reason": reason}


def geocode(params: dict[str, str]) -> tuple[int, dict[str, Any]]:
    """GET /v1/search: (status, body) for `name` looked up case-insensitively."""
    name = params.get("name")
    if name is None:
        return _error("Parameter 'name' is missing")
    wanted = name.strip().lower()
    for city, lat, lon, country, tz in _CITIES:
        if city.lower() == wanted:
            result = {
                "name": city,
                "latitude": lat,
                "longitude": lon,
                "country": country,
                "timezone": tz,
            }
            return 200, {"results": [result], "generationtime_ms": 0.1}
    return 200, {"generationtime_ms": 0.1}


def _coordinate(params: dict[str, str], key: str, bound: float) -> float | str:
    """The parsed coordinate, or the reason it is unusable."""
    raw = params.get(key)
    if raw is None:
        return f"Parameter '{key}' is missing"
    try:
        value = float(raw)
    except ValueError:
        return f"Cannot initialize Float from invalid String value {raw} for key {key}"
    if not -bound <= value <= bound:
        return f"{key.capitalize()} must be in range of -{bound:g} to {bound:g}°. Given: {value}."
    return value


def forecast(params: dict[str, str]) -> tuple[int, dict[str, Any]]:
    """GET /v1/forecast: (status, body) with current conditions derived from the coordinates."""
    lat = _coordinate(params, "latitude", 90)
    if isinstance(lat, str):
        return _error(lat)
    lon = _coordinate(params, "longitude", 180)
    if isinstance(lon, str):
        return _error(lon)
    current = {
        "time": "2026-01-01T12:00",
        "temperature_2m": round(28.0 - abs(lat) * 0.4 + (abs(lon) % 7.0), 1),
        "relative_humidity_2m": int(40 + abs(lat * 10 + lon) % 50),
        "wind_speed_10m": round(5.0 + abs(lon) % 20.0, 1),
        "weather_code": _WEATHER_CODES[int(abs(lat + lon)) % len(_WEATHER_CODES)],
    }
    return 200, {
        "latitude": round(lat, 4),
        "longitude": round(lon, 4),
        "generationtime_ms": 0.1,
        "current_units": dict(CURRENT_UNITS),
        "current": current,
    }
