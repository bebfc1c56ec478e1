"""Tool calls a model wrote in its text, as local models do when their server does not parse them:
prose and then a ```` ```json ```` fence, Hermes/Qwen `<tool_call>` tags, the `<tools>` wrapper of
the prompt template copied back, one call per line, a Llama-style list of `{"name",
"parameters"}`, Mistral's `[TOOL_CALLS]`, Llama's `<|python_tag|>` and `<function=name>{...}`,
a pythonic `name(key="value")`, and Qwen's template typo `{{"name": ...}}`. Only offered tools'
calls are taken; the words around them stay the assistant's.

Pure, and bounded: the text is the reply as the context keeps it (at most MAX_REPLY_TEXT_BYTES),
JSON is read with the standard decoder from at most MAX_STARTS places that did not parse, and
everything else is a scan (no backtracking pattern over the model's text)."""

from __future__ import annotations

import ast
import io
import json
import keyword
import tokenize
from collections.abc import Collection, Iterator
from dataclasses import dataclass, field
from typing import Any

MAX_STARTS = 64  # places a JSON value or a call may start that turn out not to be one
MAX_CALL_CHARS = 4096  # a pythonic call's length, at most
ARGUMENT_KEYS = ("arguments", "parameters", "args", "input")
# What wraps calls in the formats of the open models' chat templates: not the assistant's words.
CALL_MARKERS = ("<tool_call>", "</tool_call>", "<tools>", "</tools>", "<|python_tag|>",
                "[TOOL_CALLS]", "<function_call>", "</function_call>", "<|tool_call|>",
                "<function=", "</function>")
MARKERS = (*(m for m in CALL_MARKERS if m != "<function="), "<|eom_id|>", "<|eot_id|>")
PUNCTUATION = "[]{}(),; \t"  # a line of nothing else is what is left around calls taken out
FENCES = ("```json", "```tool_call", "```tool_code", "```python", "```")
_DECODER = json.JSONDecoder()


@dataclass(frozen=True)
class WrittenCall:
    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class TextCalls:
    """What a reply's text holds: the calls, the words around them (None: none), and the
    offered tools whose calls look written but could not be read."""

    calls: list[WrittenCall] = field(default_factory=list)
    words: str | None = None
    unread: list[str] = field(default_factory=list)


def calls_in_text(text: str, tools: Collection[str]) -> TextCalls:
    """The calls of offered `tools` written in `text`, and the words around them."""
    named = [t for t in tools if t in text]
    if not named:
        return TextCalls(words=text)
    found = _read(text, named)
    if not found.calls and "{{" in text:  # Qwen's template shows calls with doubled braces
        doubled = _read(text.replace("{{", "{").replace("}}", "}"), named)
        found = doubled if doubled.calls else found
    return found


Found = tuple[int, int, list[WrittenCall], str]  # where, the calls, and what stays words there


def _read(text: str, tools: list[str]) -> TextCalls:
    """The calls in the order they start; one that starts inside another (a call quoted in
    another's arguments) is part of it."""
    found: list[Found] = []
    reach = 0
    for start, end, calls, left in sorted(
            [*_json_calls(text, tools), *_tagged_calls(text, tools),
             *_pythonic_calls(text, tools)], key=lambda f: (f[0], -f[1])):
        if start < reach:
            continue
        found.append((start, end, calls, left))
        reach = end
    in_order = [call for _, _, calls, _ in found for call in calls]
    if not in_order:
        return TextCalls(words=text, unread=_looks_written(text, tools))
    return TextCalls(calls=in_order, words=_words(text, [(s, e, left) for s, e, _, left in found]))


def _json_calls(text: str, tools: list[str]) -> Iterator[Found]:
    """Calls in the JSON values of the text: at each `{` or `[`, a value is read; one that is
    not a call is skipped whole (its insides are not read again). The calls of tools not
    offered in a list of calls stay words."""
    i, misses = 0, 0
    while misses < MAX_STARTS:
        starts = [p for p in (text.find("{", i), text.find("[", i)) if p >= 0]
        if not starts:
            return
        at = min(starts)
        try:
            value, end = _DECODER.raw_decode(text, at)
        except (ValueError, RecursionError):
            misses += 1
            i = at + 1
            continue
        others: list[Any] = []
        found = _as_calls(value, tools, others)
        if found:
            yield at, end, found, json.dumps(others, ensure_ascii=False) if others else ""
        i = end


def _tagged_calls(text: str, tools: list[str]) -> Iterator[Found]:
    """`<function=name>{...}</function>` (Llama 3.1's custom format)."""
    i = 0
    for _ in range(MAX_STARTS):
        at = text.find("<function=", i)
        if at < 0:
            return
        close = text.find(">", at)
        name = text[at + len("<function="):close].strip() if close > 0 else ""
        i = at + 1
        if name not in tools:
            continue
        body = close + 1 + (len(text[close + 1:]) - len(text[close + 1:].lstrip()))
        try:
            value, end = _DECODER.raw_decode(text, body)
        except (ValueError, RecursionError):
            continue
        if isinstance(value, dict):
            yield at, end, [WrittenCall(name, value)], ""
            i = end


def _pythonic_calls(text: str, tools: list[str]) -> Iterator[Found]:
    """`name(key="value", ...)` (the pythonic format of Llama 3.2 and others), keywords only;
    at most MAX_STARTS places in all, each read over at most MAX_CALL_CHARS."""
    tries = 0
    for name in tools:
        i = 0
        while tries < MAX_STARTS and (at := text.find(f"{name}(", i)) >= 0:
            tries += 1
            i = at + 1
            if at and (text[at - 1].isalnum() or text[at - 1] == "_"):
                continue  # part of another name
            end = _closing(text, at + len(name), at + MAX_CALL_CHARS)
            if end is None:
                continue
            args = _keywords(text[at:end], name)
            if args is not None:
                yield at, end, [WrittenCall(name, args)], ""
                i = end


def _closing(text: str, opening: int, limit: int) -> int | None:
    """The index after the `)` that closes the `(` at `opening` (before `limit`): a scan that
    knows quotes."""
    depth, quote, escaped = 0, "", False
    for j in range(opening, min(len(text), limit)):
        ch = text[j]
        if quote:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == quote:
                quote = ""
        elif ch in "\"'":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
            if depth == 0:
                return j + 1
    return None


def _keywords(source: str, name: str) -> dict[str, Any] | None:
    """The keyword arguments of a call written as Python, if that is what it is and each value
    is a literal JSON can hold (no `**{...}`, sets, bytes, complex numbers or tuple keys). An
    argument named as a Python keyword (`send_email(from="a")`, as a schema may name it) is
    read too."""
    source, renamed = _keywords_renamed(source)
    try:
        tree = ast.parse(source, mode="eval")
        call = tree.body
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name)
                and call.func.id == name and not call.args
                and all(k.arg is not None for k in call.keywords)):
            return None
        args = {renamed.get(k.arg, k.arg): _as_json(ast.literal_eval(k.value))
                for k in call.keywords}
    except (SyntaxError, ValueError, TypeError, RecursionError, MemoryError):
        return None
    return args


def _keywords_renamed(source: str) -> tuple[str, dict[str, str]]:
    """The call with each argument named by a Python keyword renamed (`from=` to `_kw_from=`),
    so that it parses, and the names to give back. Tokens, not text: a string's insides stay."""
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    except (tokenize.TokenError, SyntaxError):
        return source, {}
    renamed: dict[str, str] = {}
    for i, token in enumerate(tokens[1:-1], start=1):
        if (token.type == tokenize.NAME and keyword.iskeyword(token.string)
                and tokens[i - 1].string in ("(", ",") and tokens[i + 1].string == "="):
            renamed[f"_kw_{token.string}"] = token.string
            tokens[i] = token._replace(string=f"_kw_{token.string}")
    if not renamed:
        return source, {}
    return tokenize.untokenize((t.type, t.string) for t in tokens), renamed


def _as_json(value: Any, depth: int = 0) -> Any:
    """A literal as JSON holds it (tuples as lists), else ValueError."""
    if depth > 32:
        raise ValueError("too deep")
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    if isinstance(value, (list, tuple)):
        return [_as_json(v, depth + 1) for v in value]
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return {k: _as_json(v, depth + 1) for k, v in value.items()}
    raise ValueError(f"not JSON: {type(value).__name__}")


def _as_calls(value: Any, tools: list[str], others: list[Any]) -> list[WrittenCall]:
    """The calls a JSON value stands for, in the shapes open models write them; the calls of
    tools not offered go to `others`."""
    if isinstance(value, list):
        return [call for item in value for call in _as_calls(item, tools, others)]
    if not isinstance(value, dict):
        return []
    for key in ("tool_calls", "calls"):
        if isinstance(value.get(key), list):
            return _as_calls(value[key], tools, others)
    for key in ("function", "function_call"):
        if isinstance(value.get(key), dict):
            return _as_calls(value[key], tools, others)
    name = value.get("name")
    if not isinstance(name, str) or name not in tools:
        if isinstance(name, str):
            others.append(value)
        return []
    given = next((value[k] for k in ARGUMENT_KEYS if k in value), None)
    if given is None:
        return [WrittenCall(name, {})] if set(value) <= {"name", "id", "type"} else []
    if isinstance(given, str):
        try:
            given = json.loads(given)
        except (ValueError, RecursionError):
            return []
    return [WrittenCall(name, given)] if isinstance(given, dict) else []


def _words(text: str, spans: list[tuple[int, int, str]]) -> str | None:
    """The text with the calls (each span's `left` in its place), the markers that wrap them,
    the fences left empty, and what is left of a list or of doubled braces taken out."""
    kept, at = [], 0
    for start, end, left in spans:
        kept.append(text[at:start] + left)
        at = end
    kept.append(text[at:])
    words = "".join(kept)
    for marker in MARKERS:
        words = words.replace(marker, "")
    for fence in FENCES:  # a fence whose call was taken out: nothing but whitespace inside
        words = _without_empty(words, fence)
    lines = [line.rstrip() for line in words.strip().split("\n")]
    words = "\n".join(line for line in lines if not line or line.strip(PUNCTUATION))
    while "\n\n\n" in words:
        words = words.replace("\n\n\n", "\n\n")
    words = words.strip()
    return words if any(ch.isalnum() for ch in words) else None


def _without_empty(text: str, fence: str) -> str:
    out, i = [], 0
    while (at := text.find(fence, i)) >= 0:
        close = text.find("```", at + len(fence))
        if close < 0 or text[at + len(fence):close].strip():
            out.append(text[i:at + len(fence)])
            i = at + len(fence)
            continue
        out.append(text[i:at])
        i = close + 3
    out.append(text[i:])
    return "".join(out)


def _looks_written(text: str, tools: list[str]) -> list[str]:
    """Offered tools whose calls the text seems to hold in a shape that could not be read: a
    call's marker, the name quoted (as JSON has it) or followed by `(`."""
    marked = any(marker in text for marker in CALL_MARKERS)
    return [t for t in tools if marked or f'"{t}"' in text or f"'{t}'" in text
            or f"{t}(" in text]


# Words a model uses for a call it means to make, before the tool's name in the same sentence
# ("I would call `get_weather` with Tokyo", "you can use get_weather"): the verbs' base forms
# only, as a recap says "I called", "using get_weather, I found".
INTENT_WORDS = frozenset({"call", "use", "invoke", "run", "execute", "query"})
INTENT_REACH = 80  # characters before the name that still make one sentence with it


def announced(text: str, tools: Collection[str]) -> list[str]:
    """Offered tools the text says it calls, or would, in prose rather than as a call: the name
    (in backticks or not) after an intent word in its sentence. A scan, at most MAX_STARTS
    places."""
    found, tries = [], 0
    for name in tools:
        i = 0
        while tries < MAX_STARTS and (at := text.find(name, i)) >= 0:
            tries += 1
            i = at + len(name)
            before, after = text[at - 1:at] if at else "", text[i:i + 1]
            if _in_word(before) or _in_word(after):
                continue  # part of another name
            sentence = text[max(0, at - INTENT_REACH):at]
            for stop in ".!?\n":
                sentence = sentence.rpartition(stop)[2]
            words = "".join(ch if ch.isalpha() else " " for ch in sentence.casefold()).split()
            if INTENT_WORDS.intersection(words):
                found.append(name)
                break
    return found


def _in_word(ch: str) -> bool:
    return ch.isalnum() or ch == "_"
