"""A worker's search of an owner's memories: by the text rank, and by nearness too where the
worker has embeddings. The `recall` tool and a turn's recall both search this way."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from ...contract.memory import Memory
from . import open_store
from .embeddings import embedding_of

if TYPE_CHECKING:
    from ..settings import ActivitySettings


async def search(settings: ActivitySettings, owner: str, query: str, limit: int) -> list[Memory]:
    """The owner's memories most relevant to `query`, best first, at most `limit`."""
    store = open_store(settings.memory_store_url)
    embedding = await embedding_of(settings, query)
    return await asyncio.to_thread(store.search, owner, query, limit, embedding)
