"""A deterministic stand-in for a model's tokenizer, as a local server's `POST /tokenize` counts:
a word of up to 12 letters is one token with the space before it, as is a run of up to 3
digits, a run of other white space, or any other character. Prose comes to about 5 characters
a token, as with Qwen's or Llama 3's tokenizer; a text of long words to far more, which a
count of 4 characters a token overcounts; a text of symbols to far less. With it, the scripted
server answers `/tokenize`, counts a prompt, and refuses one longer than its window."""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

PIECE = re.compile(r" ?[A-Za-z]{1,12}| ?\d{1,3}|\s+|.", re.DOTALL)
MESSAGE_TEMPLATE_TOKENS = 4  # what a chat template adds around each message
TOOLS_TEMPLATE_TOKENS = 10  # ...and before the tools' schemas


def pieces(text: str) -> list[str]:
    return PIECE.findall(text)


def count(text: str) -> int:
    return len(pieces(text))


def prompt_tokens(messages: list[dict[str, Any]], tools: list[Any] | None) -> int:
    """A chat prompt's tokens, as a server counts them once its template is applied."""
    tokens = 0
    for m in messages:
        content = m.get("content")
        tokens += MESSAGE_TEMPLATE_TOKENS + (count(content) if isinstance(content, str) else 0)
        for call in m.get("tool_calls") or []:
            function = call.get("function") or {}
            tokens += count(str(function.get("name", ""))) + \
                count(str(function.get("arguments", "")))
    if tools:
        tokens += TOOLS_TEMPLATE_TOKENS + count(json.dumps(tools))
    return tokens


def tokenize_answer(raw: bytes, windows: dict[str, int]) -> tuple[int, dict[str, Any]]:
    """`POST /tokenize` as llama.cpp's server answers it (`content`, and `with_pieces`), or as
    vLLM's does (`prompt`: its count and its window too)."""
    vllm = "vllm" in windows
    try:
        body = json.loads(raw)
        text = body["prompt" if vllm else "content"]
        if not isinstance(text, str):
            raise TypeError
    except (ValueError, KeyError, TypeError):
        return 400, {"error": {"message": "body must be JSON with the text to tokenize"}}
    found = pieces(text)
    ids = [int(hashlib.sha256(p.encode()).hexdigest()[:6], 16) for p in found]
    if vllm:
        return 200, {"count": len(ids), "max_model_len": windows["vllm"], "tokens": ids,
                     "token_strs": None}
    if body.get("with_pieces"):
        return 200, {"tokens": [{"id": i, "piece": p} for i, p in zip(ids, found)]}
    return 200, {"tokens": ids}


def too_long(body: dict[str, Any], windows: dict[str, int]) -> dict[str, Any] | None:
    """The error body of a prompt longer than the window, as llama.cpp's server and vLLM's
    say it; None if it fits (or no window is said)."""
    window = windows.get("llama.cpp") or windows.get("vllm")
    prompt = prompt_tokens(body["messages"], body.get("tools"))
    if window is None or prompt <= window:
        return None
    if "llama.cpp" in windows:
        return {"error": {"code": 400, "type": "exceed_context_size_error",
                          "n_prompt_tokens": prompt, "n_ctx": window,
                          "message": "the request exceeds the available context size, try "
                                     "increasing it"}}
    return {"object": "error", "type": "BadRequestError", "param": None, "code": 400,
            "message": f"This model's maximum context length is {window} tokens. However, you "
                       f"requested {prompt} tokens ({prompt} in the messages, 0 in the "
                       "completion). Please reduce the length of the messages or completion."}
