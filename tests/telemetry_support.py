"""An OTLP/HTTP trace receiver for the telemetry tests: what a collector would get."""

from __future__ import annotations

import asyncio
import gzip
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from tests.api_support import free_port


class OtlpReceiver:
    """An OTLP/HTTP trace receiver: what a collector would get."""

    def __init__(self) -> None:
        self.spans: list = []
        received = self.spans

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - the http.server name
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                if self.headers.get("content-encoding") == "gzip":
                    body = gzip.decompress(body)
                request = ExportTraceServiceRequest.FromString(body)
                for resource in request.resource_spans:
                    for scope in resource.scope_spans:
                        received.extend(scope.spans)
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.port = free_port()
        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> OtlpReceiver:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()

    def named(self, prefix: str) -> list:
        return [s for s in self.spans if s.name.startswith(prefix)]

    async def until(self, prefix: str, count: int = 1, timeout_s: float = 20) -> list:
        deadline = time.monotonic() + timeout_s
        while len(self.named(prefix)) < count:
            assert time.monotonic() < deadline, f"no {prefix!r} span came: {self.spans}"
            await asyncio.sleep(0.1)
        return self.named(prefix)
