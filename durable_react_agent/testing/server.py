"""A deterministic OpenAI-compatible HTTP server driven by a `Script`.

Tests and the offline demo point the real `openai` client at it, so the
production code path (HTTP, retries, streaming parsing) runs unchanged. It also
serves the fake Open-Meteo API so the offline demo is a single process.
"""

from __future__ import annotations

import hashlib
import json
import socket
import sys
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from . import embeddings, open_meteo, tokenizer
from .replies import RawReply, ScriptedReply, message_text
from .script import Script, Selection, select_reply, tool_call_payloads, usage

CREATED = 1767268800  # fixed so responses are byte-for-byte reproducible
MODEL_ID = "scripted"

_ERROR_KINDS = {
    400: ("invalid_request_error", "bad_request"),
    401: ("invalid_request_error", "invalid_api_key"),
    403: ("permission_error", "forbidden"),
    404: ("not_found_error", "not_found"),
    429: ("rate_limit_error", "rate_limit_exceeded"),
}


def _error_body(status: int, message: str) -> dict[str, Any]:
    kind, code = _ERROR_KINDS.get(status, ("server_error", "server_error"))
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


def _split(text: str, parts: int) -> list[str]:
    """`text` cut into `parts` roughly equal pieces, dropping empty ones (short text)."""
    n = len(text)
    pieces = [text[n * i // parts : n * (i + 1) // parts] for i in range(parts)]
    return [p for p in pieces if p]


@dataclass(frozen=True)
class RecordedRequest:
    trigger: str | None
    step: int
    body: dict[str, Any]
    kind: str = "chat"  # or "summary"
    at: float = 0.0  # time.monotonic() when it arrived


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    owner: "ScriptedModelServer"

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that closes a kept-alive connection is no error; anything else is."""
        if not isinstance(sys.exc_info()[1], (ConnectionResetError, BrokenPipeError)):
            super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _HTTPServer

    def setup(self) -> None:
        super().setup()
        # Replies are written in pieces (headers, then body or SSE chunks): without this, Nagle's
        # algorithm and the client's delayed ACK add ~40 ms to every reply.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.server.owner._count_call("connections")

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        """Silenced: the default access log would clutter test and demo output."""

    def do_GET(self) -> None:
        self._guarded(self._route_get)

    def do_POST(self) -> None:
        self._guarded(self._route_post)

    def _guarded(self, route: Any) -> None:
        # The client may be gone (timeout, cancelled activity) by the time we write.
        try:
            route()
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def _route_get(self) -> None:
        url = urlsplit(self.path)
        params = dict(parse_qsl(url.query))
        owner = self.server.owner
        windows = owner.windows
        if url.path == "/v1/models":
            model = {"id": MODEL_ID, "object": "model", "created": CREATED, "owned_by": "scripted"}
            if "vllm" in windows:
                model["max_model_len"] = windows["vllm"]
            self._send_json(200, {"object": "list", "data": [model]})
        elif url.path == "/props" and "llama.cpp" in windows:
            self._send_json(200, {"default_generation_settings": {"n_ctx": windows["llama.cpp"]},
                                  "total_slots": 1})
        elif url.path.startswith("/api/v0/models/") and "lm-studio" in windows:
            self._send_json(200, {"id": url.path.rsplit("/", 1)[-1], "state": "loaded",
                                  "max_context_length": 32768,
                                  "loaded_context_length": windows["lm-studio"]})
        elif url.path == "/v1/search":
            owner._count_call("geocoding")
            self._send_json(*open_meteo.geocode(params))
        elif url.path == "/v1/forecast":
            owner._count_call("forecast")
            self._send_json(*open_meteo.forecast(params))
        elif url.path == "/_release":  # let held replies through (benchmarks, other processes)
            owner.release()
            self._send_json(200, {"released": True})
        elif url.path == "/_stats":  # for benchmarks driving the server as a separate process
            self._send_json(200, {"chat_requests": owner.count(), "connections": owner.connections,
                                  "geocoding": owner.geocoding_calls,
                                  "forecast": owner.forecast_calls})
        else:
            self._send_json(404, _error_body(404, f"no route for GET {url.path}"))

    def _embeddings(self, raw: bytes) -> None:
        """OpenAI's `/v1/embeddings`, from `durable_react_agent.testing.embeddings`."""
        try:
            body = json.loads(raw)
            given = body["input"]
            texts = [given] if isinstance(given, str) else list(given)
            if not texts or not all(isinstance(t, str) for t in texts):
                raise TypeError
        except (ValueError, KeyError, TypeError):
            self._send_json(400, _error_body(400, "body must be JSON with an 'input' text or "
                                                  "list of texts"))
            return
        self.server.owner._count_call("embeddings")
        tokens = sum(len(t.split()) for t in texts)
        self._send_json(200, {
            "object": "list", "model": body.get("model") or MODEL_ID,
            "data": [{"object": "embedding", "index": i, "embedding": embeddings.embed(t)}
                     for i, t in enumerate(texts)],
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens}})

    def _route_post(self) -> None:
        path = urlsplit(self.path).path
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if path == "/api/show" and "ollama" in self.server.owner.windows:
            self._send_json(200, {"parameters": f"num_ctx {self.server.owner.windows['ollama']}",
                                  "model_info": {"qwen2.context_length": 32768}})
            return
        if path == "/tokenize" and self.server.owner.tokenize:
            self.server.owner._count_call("tokenize")
            self._send_json(*tokenizer.tokenize_answer(raw, self.server.owner.windows))
            return
        if path == "/v1/embeddings":
            self._embeddings(raw)
            return
        if path != "/v1/chat/completions":
            self._send_json(404, _error_body(404, f"no route for POST {path}"))
            return
        try:
            body = json.loads(raw)
            messages = body["messages"]
            if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
                raise TypeError
        except (ValueError, KeyError, TypeError):
            self._send_json(400, _error_body(400, "body must be JSON with a 'messages' list"))
            return
        owner = self.server.owner
        selection, error_status, cut_at = owner._begin_chat(body)
        refusal = tokenizer.too_long(body, owner.windows) if owner.tokenize else None
        if refusal is not None:  # as llama.cpp's and vLLM's servers refuse a prompt too long
            self._send_json(400, refusal)
            return
        if error_status is not None:
            reply = selection.reply
            body = _error_body(error_status, reply.error_message or f"scripted {error_status}")
            if reply.error_code:
                body["error"]["code"] = reply.error_code
            headers = {"Retry-After": reply.retry_after} if reply.retry_after else {}
            self._send_json(error_status, body, headers)
            return
        reply = selection.reply
        if reply.delay_s > 0:
            time.sleep(reply.delay_s)
        if reply.hold:
            owner._release_event.wait()
        if reply.raw is not None:
            self._send_raw(reply.raw)
            return
        model = body.get("model") or MODEL_ID
        counted = usage(messages, body.get("tools"), reply)
        if owner.tokenize:  # as its tokenizer counts the prompt
            counted["prompt_tokens"] = tokenizer.prompt_tokens(messages, body.get("tools"))
            counted["total_tokens"] = counted["prompt_tokens"] + counted["completion_tokens"]
        counts = None if reply.no_usage else {
            **{k: v for k, v in counted.items() if k not in reply.usage_missing},
            **reply.usage_patch}
        completion_id = f"chatcmpl-{owner._conversation_key(messages)[:24]}"
        if body.get("stream"):
            include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            self._send_stream(completion_id, model, selection, counts if include_usage else None,
                              cut_at)
        else:
            message: dict[str, Any] = {"role": "assistant", "content": reply.content}
            calls = tool_call_payloads(selection.step, reply)
            if calls:
                message["tool_calls"] = calls
            choice = {"index": 0, "message": message, "finish_reason": reply.effective_finish_reason()}
            self._send_json(200, {
                "id": completion_id,
                "object": "chat.completion",
                "created": CREATED,
                "model": model,
                "choices": [choice],
                **({"usage": counts} if counts is not None else {}),
            })

    def _send_raw(self, raw: RawReply) -> None:
        """A recorded answer, as it came: a stream's end is the connection's."""
        data = raw.body.encode()
        self.close_connection = True
        self.send_response(raw.status)
        self.send_header("Content-Type", raw.content_type)
        self.send_header("Connection", "close")
        if not raw.content_type.startswith("text/event-stream"):
            self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()

    def _send_json(self, status: int, payload: dict[str, Any],
                   headers: dict[str, str] | None = None) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _send_stream(
        self, completion_id: str, model: str, selection: Selection, counts: dict[str, int] | None,
        cut_at: int | None = None,
    ) -> None:
        # As endpoints stream: in chunks, the connection kept for the next request. A stream cut
        # at `cut_at` has no length and no chunks: its body ends where the connection closes.
        cut = cut_at is not None
        self.close_connection = cut
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close" if cut else "keep-alive")
        if not cut:
            self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

        sent = 0  # bytes of the stream written, for a stream cut at `cut_at`

        def write(data: bytes) -> None:
            nonlocal sent
            if cut_at is not None and sent + len(data) > cut_at:
                data = data[:max(cut_at - sent, 0)]
            sent += len(data)
            self.wfile.write(data if cut else b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()

        def chunk(choices: list[dict[str, Any]], **extra: Any) -> None:
            event = {
                "id": completion_id,
                "object": "chat.completion.chunk",
                "created": CREATED,
                "model": model,
                "choices": choices,
                **extra,
            }
            write(f"data: {json.dumps(event)}\n\n".encode())

        def delta(d: dict[str, Any], finish_reason: str | None = None) -> None:
            chunk([{"index": 0, "delta": d, "finish_reason": finish_reason}])

        reply: ScriptedReply = selection.reply
        delta({"role": "assistant"})
        for piece in _split(reply.content or "", 3):
            delta({"content": piece})
            time.sleep(reply.stream_pause_s)  # (a long reply; a client that leaves ends it)
        for i, call in enumerate(tool_call_payloads(selection.step, reply)):
            head = {"name": call["function"]["name"], "arguments": ""}
            delta({"tool_calls": [{"index": i, "id": call["id"], "type": "function", "function": head}]})
            for piece in _split(call["function"]["arguments"], 2):
                delta({"tool_calls": [{"index": i, "function": {"arguments": piece}}]})
        delta({}, reply.effective_finish_reason())
        if counts is not None:
            chunk([], usage=counts)
        write(b"data: [DONE]\n\n")
        if not cut:
            self.wfile.write(b"0\r\n\r\n")  # the last chunk
            self.wfile.flush()


class ScriptedModelServer:
    """Serves a `Script` over HTTP from a daemon thread; records every chat request."""

    def __init__(self, script: Script | None = None, host: str = "127.0.0.1", port: int = 0,
                 windows: dict[str, int] | None = None, tokenize: bool = False) -> None:
        self._script = script or Script()
        # The model's window, said as these local servers say it (by "llama.cpp", "vllm",
        # "lm-studio", "ollama"): none, as the hosted endpoints, which say nothing.
        self.windows = dict(windows or {})
        # Count tokens as a real server does (`durable_react_agent.testing.tokenizer`): `POST /tokenize`, the
        # usage of each reply, and a prompt longer than the llama.cpp or vLLM window refused.
        self.tokenize = tokenize
        self._host = host
        self._requested_port = port
        self._lock = threading.Lock()
        self._arrived = threading.Condition(self._lock)
        self._requests: list[RecordedRequest] = []
        self._hits: dict[str, int] = {}
        self._calls = {"geocoding": 0, "forecast": 0, "connections": 0, "embeddings": 0,
                       "tokenize": 0}
        self._release_event = threading.Event()
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> "ScriptedModelServer":
        self._httpd = _HTTPServer((self._host, self._requested_port), _Handler)
        self._httpd.owner = self
        # A short poll interval keeps stop() fast (shutdown waits for the next poll).
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, args=(0.05,), name="scripted-model", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is None:
            return
        self._release_event.set()  # let held handlers finish instead of hanging forever
        self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._httpd = None

    def __enter__(self) -> "ScriptedModelServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        if self._httpd is None:
            raise RuntimeError("server is not started")
        return self._httpd.server_address[1]

    @property
    def base_url(self) -> str:
        """What OPENAI_BASE_URL should be set to."""
        return f"http://{self._host}:{self.port}/v1"

    @property
    def geocoding_url(self) -> str:
        return f"{self.base_url}/search"

    @property
    def forecast_url(self) -> str:
        return f"{self.base_url}/forecast"

    # -- control ---------------------------------------------------------------------------

    @property
    def script(self) -> Script:
        with self._lock:
            return self._script

    def set_script(self, script: Script) -> None:
        """Swap the script; error-injection counters restart so new `errors` lists apply."""
        with self._lock:
            self._script = script
            self._hits.clear()

    def release(self) -> None:
        """Let held replies (and any later ones) through until `rearm()`."""
        self._release_event.set()

    def rearm(self) -> None:
        self._release_event.clear()

    # -- observation -----------------------------------------------------------------------

    @property
    def requests(self) -> list[RecordedRequest]:
        with self._lock:
            return list(self._requests)

    def count(self, trigger: str | None = None, step: int | None = None) -> int:
        with self._lock:
            return self._count_locked(trigger, step)

    def wait_for_request(
        self, trigger: str | None = None, step: int | None = None, timeout: float = 10.0
    ) -> bool:
        """Block until a chat request for (trigger, step) has arrived; None matches any."""
        with self._arrived:
            return self._arrived.wait_for(lambda: self._count_locked(trigger, step) > 0, timeout)

    @property
    def geocoding_calls(self) -> int:
        with self._lock:
            return self._calls["geocoding"]

    @property
    def forecast_calls(self) -> int:
        with self._lock:
            return self._calls["forecast"]

    @property
    def embedding_calls(self) -> int:
        with self._lock:
            return self._calls["embeddings"]

    @property
    def tokenize_calls(self) -> int:
        with self._lock:
            return self._calls["tokenize"]

    @property
    def connections(self) -> int:
        """The connections clients opened (a client that keeps them alive opens few)."""
        with self._lock:
            return self._calls["connections"]

    # -- used by the handler ---------------------------------------------------------------

    def _count_locked(self, trigger: str | None, step: int | None) -> int:
        return sum(
            1
            for r in self._requests
            if (trigger is None or r.trigger == trigger) and (step is None or r.step == step)
        )

    def _count_call(self, kind: str) -> None:
        with self._lock:
            self._calls[kind] += 1

    @staticmethod
    def _conversation_key(messages: list[Any]) -> str:
        return hashlib.sha256(json.dumps(messages, sort_keys=True).encode()).hexdigest()

    def _begin_chat(self, body: dict[str, Any]) -> tuple[Selection, int | None, int | None]:
        """Record the request and decide whether this hit gets a scripted error status, or a
        stream cut after some bytes."""
        messages = body["messages"]
        with self._arrived:
            selection = select_reply(self._script, messages, tools_offered=bool(body.get("tools")))
            # Per conversation (its first user message) and step: a retry of a step, or a new turn
            # that lands on the same step, moves on through the `errors` list.
            first_user = next((message_text(m) for m in messages if m.get("role") == "user"), "")
            key = (f"summary:{selection.trigger}" if selection.kind == "summary"
                   else f"{selection.step}:{selection.trigger}" if selection.reply.errors_per_step
                   else f"{selection.step}:{first_user}")
            hit = self._hits.get(key, 0)
            self._hits[key] = hit + 1
            self._requests.append(RecordedRequest(selection.trigger, selection.step, body,
                                                  selection.kind, time.monotonic()))
            self._arrived.notify_all()
        errors, cuts, reply = selection.reply.errors, selection.reply.cut_at, selection.reply
        if reply.raw is not None and reply.raw_hits is not None and \
                hit >= len(errors) + reply.raw_hits:  # then the reply its other fields make
            selection = selection.model_copy(update={"reply": reply.model_copy(
                update={"raw": None})})
        if hit < len(errors):
            return selection, errors[hit], None
        return selection, None, (cuts[hit - len(errors)] if hit - len(errors) < len(cuts) else None)
