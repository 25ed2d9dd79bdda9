"""A real OTLP receiver for the tests, built on the official opentelemetry-proto messages
(no Collector binary can be installed here): HTTP/protobuf (POST /v1/traces, /v1/logs,
/v1/metrics) and gRPC (the generated *_pb2_grpc servicers), on loopback.

`refuse` answers that many requests with 503 (HTTP) / UNAVAILABLE (gRPC) before taking
any; `delay` (HTTP) takes that many seconds over each request (a slow receiver); `hang`
never answers (the request is read, then the handler waits for the test's
end). What it took is kept, parsed, in `spans`, `logs`, `metrics` (with the resource
attributes of each) and `requests` counts every request, refused ones included.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.logs.v1 import logs_service_pb2 as ls
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2 as ms
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2 as ts
from opentelemetry.proto.common.v1.common_pb2 import AnyValue


def plain(value: AnyValue) -> object:
    kind = value.WhichOneof("value")
    return getattr(value, kind) if kind else None


def attrs(kvs: Any) -> dict[str, object]:
    return {kv.key: plain(kv.value) for kv in kvs}


@dataclass
class Received:
    spans: list[tuple[dict[str, object], Any]] = field(default_factory=list)
    logs: list[tuple[dict[str, object], Any]] = field(default_factory=list)
    metrics: list[tuple[dict[str, object], Any]] = field(default_factory=list)
    requests: int = 0
    refuse: int = 0
    hang: bool = False
    delay: float = 0.0
    headers: list[dict[str, str]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    released: threading.Event = field(default_factory=threading.Event)

    def take(self, path: str, body: bytes) -> None:
        if path.endswith("/v1/traces"):
            req = ts.ExportTraceServiceRequest.FromString(body)
            with self.lock:
                for rs in req.resource_spans:
                    res = attrs(rs.resource.attributes)
                    self.spans.extend((res, s) for ss in rs.scope_spans for s in ss.spans)
        elif path.endswith("/v1/logs"):
            req = ls.ExportLogsServiceRequest.FromString(body)
            with self.lock:
                for rl in req.resource_logs:
                    res = attrs(rl.resource.attributes)
                    self.logs.extend((res, r) for sl in rl.scope_logs
                                     for r in sl.log_records)
        elif path.endswith("/v1/metrics"):
            req = ms.ExportMetricsServiceRequest.FromString(body)
            with self.lock:
                for rm in req.resource_metrics:
                    res = attrs(rm.resource.attributes)
                    self.metrics.extend((res, x) for sm in rm.scope_metrics
                                        for x in sm.metrics)
        else:
            raise ValueError(path)

    def gate(self) -> str:
        """'ok', 'refuse' or 'hang' for the next request."""
        with self.lock:
            self.requests += 1
            if self.hang:
                return "hang"
            if self.refuse > 0:
                self.refuse -= 1
                return "refuse"
        return "ok"


def _handler(received: Received) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            with received.lock:
                received.headers.append(dict(self.headers.items()))
            what = received.gate()
            if what == "hang":
                received.released.wait(30)
                return
            if what == "refuse":
                self._answer(503, b"")
                return
            if received.delay:
                time.sleep(received.delay)
            try:
                received.take(self.path, body)
            except Exception:  # a bad body: the test sees the 400
                self._answer(400, b"bad request")
                return
            self._answer(200, b"")

        def _answer(self, code: int, body: bytes) -> None:
            self.send_response(code)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    return Handler


@contextmanager
def http_receiver(refuse: int = 0, hang: bool = False, delay: float = 0.0
                  ) -> Iterator[tuple[str, Received]]:
    received = Received(refuse=refuse, hang=hang, delay=delay)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(received))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", received
    finally:
        received.released.set()
        server.shutdown()
        server.server_close()


@contextmanager
def grpc_receiver(refuse: int = 0) -> Iterator[tuple[str, Received]]:
    from concurrent import futures

    import grpc
    from opentelemetry.proto.collector.logs.v1 import logs_service_pb2_grpc as lg
    from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2_grpc as mg
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc as tg

    received = Received(refuse=refuse)

    def serve(path: str, response: Any) -> Any:
        def export(request: Any, context: Any) -> Any:
            if received.gate() == "refuse":
                context.abort(grpc.StatusCode.UNAVAILABLE, "not now")
            with received.lock:
                received.headers.append(dict(context.invocation_metadata()))
            received.take(path, request.SerializeToString())
            return response()
        return export

    class Traces(tg.TraceServiceServicer):
        Export = staticmethod(serve("/v1/traces", ts.ExportTraceServiceResponse))

    class Logs(lg.LogsServiceServicer):
        Export = staticmethod(serve("/v1/logs", ls.ExportLogsServiceResponse))

    class Metrics(mg.MetricsServiceServicer):
        Export = staticmethod(serve("/v1/metrics", ms.ExportMetricsServiceResponse))

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    tg.add_TraceServiceServicer_to_server(Traces(), server)
    lg.add_LogsServiceServicer_to_server(Logs(), server)
    mg.add_MetricsServiceServicer_to_server(Metrics(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield f"http://127.0.0.1:{port}", received
    finally:
        server.stop(0)
