"""A text's tokens as the model's own server counts them (`activities.windows.ServerTokens`):
llama.cpp's and vLLM's `POST /tokenize`, asked once per text through the entry's client; a
server that cannot count is not asked again, one that is down is; what no server says is no
count."""

from __future__ import annotations

from collections.abc import Callable

import httpx
import openai
import pytest

from durable_react_agent.activities.windows import ServerTokens
from durable_react_agent.rules.context import text_digest
from durable_react_agent.testing import ScriptedModelServer, tokenizer

PROSE = "The model counts this sentence with its own tokenizer, word by word. " * 20


def client_of(url: str, transport: httpx.AsyncBaseTransport | None = None
              ) -> openai.AsyncOpenAI:
    http = httpx.AsyncClient(transport=transport) if transport else None
    return openai.AsyncOpenAI(api_key="k", base_url=url, max_retries=0, http_client=http)


@pytest.mark.parametrize("kind", ["llama.cpp", "vllm"])
async def test_each_server_kind_counts_a_text_once(kind: str):
    server = ScriptedModelServer(windows={kind: 8192}, tokenize=True).start()
    try:
        tokens, client = ServerTokens(), client_of(server.base_url)
        texts = [PROSE, "short", PROSE]
        counted = await tokens.count(client, server.base_url, "scripted", texts)
        assert counted == {text_digest(PROSE): tokenizer.count(PROSE),
                           text_digest("short"): 1}
        assert server.tokenize_calls == 2
        assert await tokens.count(client, server.base_url, "scripted", [PROSE]) == {
            text_digest(PROSE): tokenizer.count(PROSE)}
        assert server.tokenize_calls == 2  # remembered
    finally:
        server.stop()


async def test_a_server_that_cannot_count_is_asked_once():
    url, asked = "http://ollama.local:11434/v1", []

    def answer(request: httpx.Request) -> httpx.Response:
        asked.append(request.url.path)
        return httpx.Response(404, text="404 page not found")  # as Ollama answers

    tokens, client = ServerTokens(), client_of(url, httpx.MockTransport(answer))
    assert await tokens.count(client, url, "qwen2.5:7b", [PROSE, "x"]) == {}
    assert await tokens.count(client, url, "qwen2.5:7b", ["y"]) == {}
    assert asked == ["/tokenize"]
    assert await tokens.count(client, None, "gpt-4o", [PROSE]) == {}  # OpenAI's own: not asked
    assert asked == ["/tokenize"]


def answering(body: Callable[[], httpx.Response]) -> httpx.MockTransport:
    return httpx.MockTransport(lambda request: body())


@pytest.mark.parametrize("answer", [
    lambda: httpx.Response(200, json={"tokens": "many"}),
    lambda: httpx.Response(200, json={"count": -3}),
    lambda: httpx.Response(200, json=["a", "list"]),
    lambda: httpx.Response(200, text="<html>a proxy's page</html>"),
    lambda: httpx.Response(500, json={"error": "no tokenizer loaded"}),
])
async def test_an_odd_answer_is_no_count(answer: Callable[[], httpx.Response]):
    url = "http://llama.local:8080/v1"
    tokens = ServerTokens()
    assert await tokens.count(client_of(url, answering(answer)), url, "m", [PROSE]) == {}


async def test_a_server_not_up_yet_is_asked_again():
    url, up = "http://llama.local:8080/v1", False

    def answer(request: httpx.Request) -> httpx.Response:
        if not up:
            raise httpx.ConnectError("refused", request=request)
        assert request.url.path == "/tokenize" and request.headers["authorization"] == "Bearer k"
        return httpx.Response(200, json={"tokens": [1, 2, 3]})

    tokens, client = ServerTokens(), client_of(url, httpx.MockTransport(answer))
    assert await tokens.count(client, url, "m", [PROSE]) == {}
    up = True
    assert await tokens.count(client, url, "m", [PROSE]) == {text_digest(PROSE): 3}


def test_the_stand_in_tokenizer_counts_as_real_ones_roughly_do():
    """Prose at 4 to 5 characters a token, long words at far more, symbols at one each."""
    assert 4 <= len(PROSE) / tokenizer.count(PROSE) <= 5
    assert tokenizer.count("extraordinar " * 10) == 11  # the last space is a token of its own
    assert tokenizer.count('{"a": [1, 2]}') == 12
