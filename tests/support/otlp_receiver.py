"""A real OTLP/HTTP trace receiver on 127.0.0.1, for tests.

It answers ``POST /v1/traces`` (``application/x-protobuf``, optionally
gzip-compressed) as a collector does: the body is decoded with the
OpenTelemetry protobuf definitions (``opentelemetry-proto``) into
``ExportTraceServiceRequest``, each span is kept as a ``ReceivedSpan``
(every delivery, so a test sees a span exported twice), and the answer is
an empty ``ExportTraceServiceResponse``. ``fail_next(n)`` answers the next
``n`` exports with 503 (a receiver that is down), so that spans are not
acknowledged. Usable in-process or as a separate process
(``python -m tests.support.otlp_receiver PORT_FILE OUT_FILE``: it writes
its port to PORT_FILE and each span as a JSON line to OUT_FILE).
"""

from __future__ import annotations

import gzip
import json
import sys
import threading
from dataclasses import asdict, dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Dict, List, Optional

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest, ExportTraceServiceResponse,
)

__all__ = ["OtlpReceiver", "ReceivedSpan"]


@dataclass
class ReceivedSpan:
    """One span as delivered: ids as hex, times in Unix ns, attributes as Python values."""

    trace_id: str
    span_id: str
    parent_id: Optional[str]
    name: str
    kind: int
    start_ns: int
    end_ns: int
    attributes: Dict[str, Any]
    status_code: int  # 0 unset, 1 ok, 2 error
    status_message: str
    service_name: Optional[str]


def _value(any_value: Any) -> Any:
    field = any_value.WhichOneof("value")
    if field == "array_value":
        return [_value(v) for v in any_value.array_value.values]
    return getattr(any_value, field) if field else None


def _spans_of(request: ExportTraceServiceRequest) -> List[ReceivedSpan]:
    received = []
    for resource_spans in request.resource_spans:
        resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                received.append(ReceivedSpan(
                    span.trace_id.hex(), span.span_id.hex(), span.parent_span_id.hex() or None, span.name,
                    span.kind, span.start_time_unix_nano, span.end_time_unix_nano,
                    {a.key: _value(a.value) for a in span.attributes}, span.status.code, span.status.message,
                    resource.get("service.name"),
                ))
    return received


class OtlpReceiver:
    """``with OtlpReceiver() as receiver:`` serves on ``receiver.endpoint``
    (the base URL, as ``OTEL_EXPORTER_OTLP_ENDPOINT`` takes it)."""

    def __init__(self, out_file: Optional[str] = None) -> None:
        self.spans: List[ReceivedSpan] = []
        self.requests = 0
        self._failures_left = 0
        self._lock = threading.Lock()
        self._out_file = out_file
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                status = receiver._receive(self.path, self.headers.get("Content-Type", ""), body)
                answer = ExportTraceServiceResponse().SerializeToString() if status == 200 else b""
                self.send_response(status)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def _receive(self, path: str, content_type: str, body: bytes) -> int:
        if path != "/v1/traces" or "protobuf" not in content_type:
            return 404
        with self._lock:
            self.requests += 1
            if self._failures_left:
                self._failures_left -= 1
                return 503
            spans = _spans_of(ExportTraceServiceRequest.FromString(body))
            self.spans.extend(spans)
            if self._out_file:
                with open(self._out_file, "a", encoding="utf-8") as out:
                    for span in spans:
                        out.write(json.dumps(asdict(span)) + "\n")
        return 200

    def fail_next(self, exports: int) -> None:
        """Answer the next ``exports`` exports with 503."""
        with self._lock:
            self._failures_left = exports

    @property
    def port(self) -> int:
        return self._server.server_address[1]

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> "OtlpReceiver":
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._server.shutdown()
        self._server.server_close()


def read_spans(out_file: str) -> List[ReceivedSpan]:
    """The spans a receiver process wrote to ``out_file``."""
    try:
        with open(out_file, encoding="utf-8") as lines:
            return [ReceivedSpan(**json.loads(line)) for line in lines if line.strip()]
    except FileNotFoundError:
        return []


if __name__ == "__main__":
    port_file, out_file = sys.argv[1], sys.argv[2]
    with OtlpReceiver(out_file) as server:
        with open(port_file + ".tmp", "w") as f:
            f.write(str(server.port))
        import os

        os.replace(port_file + ".tmp", port_file)
        threading.Event().wait()
