"""What a model's server says of the model: its context window, and how many tokens a text is.

The window, for an entry that does not say it (`context_tokens`): llama.cpp's `/props`
(`n_ctx`), Ollama's `/api/show` (`num_ctx`, else the model's `context_length` within Ollama's own
default window), vLLM's `/v1/models` (`max_model_len`) and LM Studio's `/api/v0/models/<id>`
(`loaded_context_length`). Asked once per worker and endpoint, each with a short deadline; a
server that says nothing leaves the conversation's own budget alone (one that cannot be reached
is asked again next time). OpenAI's own endpoint (no `base_url`) is not asked.

A text's tokens, as the model's own tokenizer counts them (`ServerTokens`): llama.cpp's and
vLLM's `POST /tokenize`, one body for both. No tokenizer ships with the worker (a model's name
does not say which vocabulary and chat template its server runs), so a server that cannot count
leaves the conversation to its estimate (`rules.context`)."""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

import httpx
import openai
import structlog

from ..rules.context import text_digest
from .models import ModelEntry, Models

log = structlog.get_logger("windows")
ASK_TIMEOUT_S = 2.0
OLLAMA_DEFAULT_CTX = 4096  # what Ollama runs a model with unless num_ctx says otherwise
MIN_WINDOW, MAX_WINDOW = 256, 10_000_000
MAX_TOKENS_COUNTED = 4  # texts counted for one refused prompt: the longest
MAX_COUNTS_KEPT = 512  # texts whose counts a worker remembers


class Windows:
    """The windows the worker's endpoints said, asked for once (then remembered)."""

    def __init__(self, http: httpx.AsyncClient) -> None:
        self._http = http
        self._asked: dict[tuple[str, str], int | None] = {}
        self._lock = asyncio.Lock()

    async def of(self, models: Models) -> dict[str, int]:
        """By entry name, the windows their servers say (entries that set theirs: not asked)."""
        async with self._lock:
            found = {}
            for name, entry in models.entries.items():
                if entry.context_tokens is not None or entry.base_url is None:
                    continue
                key = (entry.base_url, entry.model)
                window = self._asked[key] if key in self._asked else await self._ask(key, entry)
                if window is not None:
                    found[name] = window
            return found

    async def _ask(self, key: tuple[str, str], entry: ModelEntry) -> int | None:
        """The first of the servers' answers, all asked at once (so within ASK_TIMEOUT_S),
        remembered once the server answered at all."""
        base = (entry.base_url or "").rstrip("/")
        root = base.removesuffix("/v1")
        asks = (self._llama_cpp, self._vllm, self._lm_studio, self._ollama)
        said = await asyncio.gather(*(ask(root, base, entry.model) for ask in asks),
                                    return_exceptions=True)
        found = next(((ask.__name__.lstrip("_"), w) for ask, w in zip(asks, said, strict=True)
                      if type(w) is int and MIN_WINDOW <= w <= MAX_WINDOW), None)
        window = found[1] if found else None
        if found:
            log.info("model window learned", model=entry.model, server=root, tokens=window,
                     source=found[0])
        if found or not all(isinstance(w, httpx.TransportError) for w in said):
            self._asked[key] = window
        return window

    async def _get(self, url: str) -> Any:
        response = await self._http.get(url, timeout=ASK_TIMEOUT_S)
        return response.json() if response.status_code == 200 else None

    async def _llama_cpp(self, root: str, base: str, model: str) -> int | None:
        props = await self._get(f"{root}/props")
        settings = props.get("default_generation_settings") if isinstance(props, dict) else None
        return _whole(settings.get("n_ctx")) if isinstance(settings, dict) else None

    async def _vllm(self, root: str, base: str, model: str) -> int | None:
        listed = await self._get(f"{base}/models")
        rows = listed.get("data") if isinstance(listed, dict) else None
        return next((_whole(row.get("max_model_len")) for row in rows or []
                     if isinstance(row, dict) and row.get("id") == model
                     and row.get("max_model_len") is not None), None)

    async def _lm_studio(self, root: str, base: str, model: str) -> int | None:
        shown = await self._get(f"{root}/api/v0/models/{model}")
        if not isinstance(shown, dict):
            return None
        return _whole(shown.get("loaded_context_length") or shown.get("max_context_length"))

    async def _ollama(self, root: str, base: str, model: str) -> int | None:
        response = await self._http.post(f"{root}/api/show", json={"model": model},
                                         timeout=ASK_TIMEOUT_S)
        shown = response.json() if response.status_code == 200 else None
        if not isinstance(shown, dict):
            return None
        for line in str(shown.get("parameters") or "").splitlines():
            key, _, value = line.strip().partition(" ")
            if key == "num_ctx":
                return _whole(value.strip())
        info = shown.get("model_info")
        trained = next((_whole(v) for k, v in info.items() if k.endswith(".context_length")),
                       None) if isinstance(info, Mapping) else None
        return min(trained, OLLAMA_DEFAULT_CTX) if trained else None


def _whole(value: Any) -> int | None:
    try:
        number = int(value)
    except (TypeError, ValueError):
        return None
    return number if number > 0 else None


class ServerTokens:
    """How many tokens texts are, as the model's server counts them (`POST /tokenize`), through
    the entry's own client (its key, its connection pool). A server that answers with an error
    cannot count, and is not asked again by this worker; one that cannot be reached is. Counts
    are remembered by text."""

    def __init__(self) -> None:
        self._cannot: set[tuple[str, str]] = set()
        self._counts: OrderedDict[tuple[str, str, str], int] = OrderedDict()

    async def count(self, client: openai.AsyncOpenAI, base_url: str | None, model: str,
                    texts: list[str]) -> dict[str, int]:
        """By `rules.context.text_digest`, the tokens of the longest few `texts` ({} where the
        server counts none)."""
        if base_url is None:
            return {}
        root = base_url.rstrip("/").removesuffix("/v1")
        counted = {}
        for text in sorted(set(texts), key=len, reverse=True)[:MAX_TOKENS_COUNTED]:
            if (root, model) in self._cannot:
                break
            key = (root, model, text_digest(text))
            if key not in self._counts:
                tokens = await self._ask(client, root, model, text)
                if tokens is None:
                    continue
                self._counts[key] = tokens
                while len(self._counts) > MAX_COUNTS_KEPT:
                    self._counts.popitem(last=False)
            self._counts.move_to_end(key)
            counted[key[2]] = self._counts[key]
        return counted

    async def _ask(self, client: openai.AsyncOpenAI, root: str, model: str, text: str
                   ) -> int | None:
        body = {"content": text, "add_special": False,  # llama.cpp's
                "model": model, "prompt": text, "add_special_tokens": False}  # vLLM's
        try:
            response = await client.post(f"{root}/tokenize", body=body, cast_to=httpx.Response,
                                         options={"timeout": ASK_TIMEOUT_S, "max_retries": 0})
            said = response.json()
        except (openai.APIConnectionError, httpx.TransportError):
            return None  # not up: asked again next time
        except (openai.APIStatusError, ValueError):
            said = None
        tokens = _tokens(said)
        if tokens is None:
            log.info("the model's server does not count tokens", model=model, server=root)
            self._cannot.add((root, model))
        return tokens


def _tokens(said: Any) -> int | None:
    """The count in a `/tokenize` answer: vLLM's `count`, else llama.cpp's `tokens` listed."""
    if not isinstance(said, dict):
        return None
    if type(said.get("count")) is int and said["count"] >= 0:
        return said["count"]
    tokens = said.get("tokens")
    return len(tokens) if isinstance(tokens, list) else None
