"""Spans exported per second by `run --otlp`, without the kernel: records shaped like
sdt-demo's (id, path, status, latency_ns) go through each stage of planrunner/otlp/:

- offer:     Sender.offer, what the session's thread pays per record (a queue append);
- convert:   Converter.add, records -> opentelemetry-proto Span messages;
- serialize: traces_request, a batch of spans grouped by process -> bytes;
- export:    all of it end to end through the sender thread to a receiver in another
             process over HTTP/protobuf on loopback (it reads each body and answers 200;
             `--parse` makes it parse them too), until the last batch is confirmed.

    .venv/bin/python bench/otlp_bench.py [--records 200000] [--parse] [--grpc]
"""

from __future__ import annotations

import argparse
import io
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this tree's planrunner

from planrunner.otlp import sender as sender_module  # noqa: E402
from planrunner.otlp.config import otlp_config  # noqa: E402
from planrunner.otlp.convert import Converter, WallClock  # noqa: E402
from planrunner.otlp.requests import ResourceCache, traces_request  # noqa: E402
from planrunner.otlp.sender import Sender  # noqa: E402
from planrunner.render.layout import LayoutField, RecordLayout  # noqa: E402
from planrunner.render.model import PrintOutput, RenderedProgram, SpanShape  # noqa: E402

PATHS = ("/index.html", "/api/users", "/static/app.js", "/api/orders/42")

RECEIVER = r"""
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer
parse = sys.argv[1] == "1"
if parse:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest)
class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *a): pass
    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        if parse:
            ExportTraceServiceRequest.FromString(body)
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()
s = HTTPServer(("127.0.0.1", 0), H)
print(s.server_address[1], flush=True)
s.serve_forever()
"""

GRPC_RECEIVER = r"""
import sys
from concurrent import futures
import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2 as ts
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc as tg
class T(tg.TraceServiceServicer):
    def Export(self, request, context):
        return ts.ExportTraceServiceResponse()
server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
tg.add_TraceServiceServicer_to_server(T(), server)
port = server.add_insecure_port("127.0.0.1:0")
server.start()
print(port, flush=True)
server.wait_for_termination()
"""


def program() -> RenderedProgram:
    keys = ("id", "path", "status", "latency_ns")
    layout = RecordLayout(0, "pr_rec_0", tuple(LayoutField(k, "int", f"f{i}")
                                               for i, k in enumerate(keys)))
    out = PrintOutput("request", "request", layout, None,
                      SpanShape("latency_ns", "", False, "id"))
    return RenderedProgram("", (), (out,), (), "sdt-demo")


def records(n: int) -> list[dict[str, object]]:
    pid = os.getpid()
    return [{"time": "2026-12-04T16:00:00.000000Z", "ts_ns": 5_000_000_000 + i * 1000,
             "pid": pid, "tid": pid, "comm": "demo", "probe": "request",
             "output": "request", "id": i, "path": PATHS[i & 3], "status": 200,
             "latency_ns": 10_000 + i} for i in range(n)]


def rate(n: int, seconds: float) -> str:
    return f"{n / seconds / 1000:7.1f}k/s  ({seconds * 1e9 / n:6.0f} ns each)"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--parse", action="store_true", help="the receiver parses each request")
    ap.add_argument("--grpc", action="store_true", help="export over OTLP/gRPC")
    args = ap.parse_args()
    recs = records(args.records)
    prog = program()
    print(f"{args.records} records shaped like sdt-demo's, one process")

    conv = Converter(prog.prints, (), WallClock())
    t0 = time.perf_counter()
    for rec in recs:
        conv.add(rec)
    t1 = time.perf_counter()
    print(f"convert    {rate(len(recs), t1 - t0)}")
    spans, _ = conv.take()
    resources = ResourceCache(otlp_config("", "sdt-demo", {}), {})
    t0 = time.perf_counter()
    size = 0
    for i in range(0, len(spans), 4096):
        size += len(traces_request(resources, spans[i:i + 4096]))
    t1 = time.perf_counter()
    print(f"serialize  {rate(len(spans), t1 - t0)}  {size / len(spans):.0f} bytes/span")

    source = GRPC_RECEIVER if args.grpc else RECEIVER
    receiver = subprocess.Popen([sys.executable, "-c", source, "1" if args.parse else "0"],
                                stdout=subprocess.PIPE, text=True)
    try:
        assert receiver.stdout is not None
        port = int(receiver.stdout.readline())
        env = {"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc" if args.grpc else "http/protobuf"}
        # all records are offered at once here, so they age while the sender works: that
        # is not a reader falling behind (live, the sender then rests: bench/otlp_live.py)
        sender_module.BEHIND_NS = 1 << 62
        sender = Sender(otlp_config(f"http://127.0.0.1:{port}", "sdt-demo", env), prog,
                        io.StringIO(), queue_max=len(recs))
        sender.start()
        time.sleep(0.5)  # the thread's imports are done before the clock starts
        t0 = time.perf_counter()
        for i in range(0, len(recs), 1024):  # the session hands batches of <= 1024
            sender.offer(recs[i:i + 1024])
        t1 = time.perf_counter()
        counts = sender.close(600.0)
        t2 = time.perf_counter()
    finally:
        receiver.kill()
        receiver.wait()
    print(f"offer      {rate(len(recs), t1 - t0)}  (the session's thread)")
    how = "gRPC" if args.grpc else "HTTP/protobuf"
    print(f"export     {rate(counts.spans_sent, t2 - t0)}  ({how}, receiver "
          f"{'parses' if args.parse else 'reads'}; {counts.lost_records} lost)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
