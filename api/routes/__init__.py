"""The API's routes, a module per resource: `conversations`, `inputs` (a person's input),
`grants` (approvals remembered), `streams`, `memories` and `console`; `api.links` holds the
one-time links' pages."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any


def every_route(routes: Iterable[Any]) -> Iterator[Any]:
    """Each route, those of included routers too (an app holds an included router as one route
    of its own)."""
    for route in routes:
        included = getattr(route, "original_router", None)
        yield from every_route(included.routes) if included is not None else (route,)
