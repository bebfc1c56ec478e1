"""Optional embeddings for memory (`AGENT_MEMORY_EMBEDDINGS`: a model entry whose endpoint serves
OpenAI's `/v1/embeddings`). A memory is stored with its vector, and a recall ranks by the vector's
nearness beside the full-text rank. Embeddings are a help, never a need: an endpoint that fails
or answers nonsense leaves the text rank alone, and says so in the log."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import openai
import structlog

if TYPE_CHECKING:
    from ..settings import ActivitySettings

log = structlog.get_logger()
TIMEOUT_S = 10.0
MAX_DIMENSIONS = 8192


class Embedder:
    """One model entry's embeddings endpoint."""

    def __init__(self, settings: ActivitySettings, entry_name: str) -> None:
        entry = settings.model_entries().entries[entry_name]
        self.model = entry.model
        self._client = openai.AsyncOpenAI(api_key=settings.api_key(entry), base_url=entry.base_url,
                                          timeout=TIMEOUT_S, max_retries=1)

    async def vector(self, text: str) -> list[float] | None:
        """`text`'s vector, of unit length; None when the endpoint fails or answers no vector."""
        try:
            answer = await self._client.embeddings.create(model=self.model, input=[text])
            vector = unit([float(x) for x in answer.data[0].embedding])
        except (openai.OpenAIError, IndexError, TypeError, ValueError) as err:
            log.warning("embedding unavailable: the text rank alone", model=self.model,
                        error=f"{type(err).__name__}: {str(err)[:200]}")
            return None
        return vector


def unit(vector: list[float]) -> list[float]:
    """`vector` scaled to length 1; a ValueError for one that cannot be (empty, too long, zero,
    or not finite)."""
    if not 0 < len(vector) <= MAX_DIMENSIONS or not all(math.isfinite(x) for x in vector):
        raise ValueError("not a usable embedding")
    norm = math.sqrt(sum(x * x for x in vector))
    if norm == 0:
        raise ValueError("a zero embedding")
    return [x / norm for x in vector]


_EMBEDDERS: dict[tuple[str, str | None, str], Embedder] = {}


def embedder(settings: ActivitySettings) -> Embedder | None:
    """The worker's embedder (None: AGENT_MEMORY_EMBEDDINGS unset), made once per entry."""
    name = settings.memory_embeddings
    if name is None:
        return None
    entry = settings.model_entries().entries[name]
    key = (name, entry.base_url, entry.model)
    if key not in _EMBEDDERS:
        _EMBEDDERS[key] = Embedder(settings, name)
    return _EMBEDDERS[key]


async def embedding_of(settings: ActivitySettings, text: str) -> list[float] | None:
    """`text`'s vector when the worker has embeddings and its endpoint answers, else None."""
    found = embedder(settings)
    return None if found is None else await found.vector(text)
