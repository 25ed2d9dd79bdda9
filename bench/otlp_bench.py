"""Spans exported per second by `run --otlp`, without the kernel, against the rate
planrunner prints text at, measured in the same run (rounds interleaved, medians).

Records shaped like sdt-demo's (id, path, status, latency_ns), one process:

- text:      decode + the text view, as bench/consumer_bench.py measures it (raw records
             packed as the BPF program lays them out), to /dev/null;
- build:     what the exporter process does, here in one process: rows -> requests
             (convert.py, requests.py), serialized;
- export:    end to end: Sender.offer on this thread (the session's), the feeder thread
             handing rows to the exporter process, which sends over HTTP/protobuf (or
             gRPC) on loopback to a receiver in another process (it reads each body and
             answers 200; `--parse` makes it parse them too), until the last request is
             confirmed; and this process's CPU time over it (offer + feeder), a span.

    .venv/bin/python bench/otlp_bench.py [--records 200000] [--rounds 5] [--parse] [--grpc]
                                         [--exporters N]
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this tree's planrunner
sys.path.insert(0, str(Path(__file__).resolve().parent))

from consumer_bench import bench_output, raw_records  # noqa: E402

from planrunner.otlp import sender as sender_module  # noqa: E402
from planrunner.otlp.config import otlp_config  # noqa: E402
from planrunner.otlp.convert import Converter, WallClock  # noqa: E402
from planrunner.otlp.requests import ResourceCache, batches, traces_request  # noqa: E402
from planrunner.otlp.sender import Sender, default_exporters  # noqa: E402
from planrunner.otlp.wire import row_maker  # noqa: E402
from planrunner.output import make_view  # noqa: E402
from planrunner.records import PrintSchema  # noqa: E402
from planrunner.render.layout import LayoutField, RecordLayout  # noqa: E402
from planrunner.render.model import PrintOutput, RenderedProgram, SpanShape  # noqa: E402
from planrunner.runtime.decode import Decoder  # noqa: E402

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


def cpu_model() -> str:
    with open("/proc/cpuinfo") as fh:
        for line in fh:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return "?"


def text_rate(n: int) -> tuple[float, float]:
    """decode + text of n records (bench/consumer_bench.py's): (records/s, CPU us each)."""
    out = bench_output()
    raws = raw_records(out, n)
    schema = PrintSchema("0", "tick", ("counter", "word", "len"))
    with open(os.devnull, "w", encoding="utf-8") as sink:
        view = make_view("text", sink, [schema])
        dec = Decoder([out])
        t0, c0 = time.perf_counter(), time.process_time()
        for i in range(0, n, 4096):
            view.records(dec.decode_batch(raws[i:i + 4096]))
            view.flush()
        return n / (time.perf_counter() - t0), (time.process_time() - c0) * 1e6 / n


def build_rate(prog: RenderedProgram, recs: list[dict[str, object]]) -> float:
    """rows -> serialized requests in this process: the exporter's work, spans/s."""
    make = row_maker(prog.prints[0])
    rows = list(map(make, recs))
    conv = Converter(prog.prints, (), WallClock())
    plan = conv.plans["request"]
    resources = ResourceCache(otlp_config("", "sdt-demo", {}), {})
    t0 = time.perf_counter()
    for i in range(0, len(rows), 1024):
        conv.add_rows(plan, rows[i:i + 1024])
        if conv.nspans >= 4096:
            for part, _ in batches(conv.take()[0], 4096):
                traces_request(resources, part)
    for part, _ in batches(conv.take()[0], 4096):
        traces_request(resources, part)
    return len(rows) / (time.perf_counter() - t0)


def export_rate(prog: RenderedProgram, recs: list[dict[str, object]], port: int,
                grpc: bool, exporters: int) -> tuple[float, float, float, int]:
    """(spans/s end to end, this process's CPU us a span, the exporters' CPU us a
    span, spans lost)."""
    env = {"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc" if grpc else "http/protobuf"}
    sender = Sender(otlp_config(f"http://127.0.0.1:{port}", "sdt-demo", env), prog,
                    io.StringIO(), queue_max=len(recs), exporters=exporters)
    sender.start()
    if not sender.wait_ready(60):  # its imports are done before the clock starts
        raise SystemExit(f"the exporter did not start: {sender.failed}")
    t0, c0 = time.perf_counter(), time.process_time()
    for i in range(0, len(recs), 1024):  # the session hands batches of <= 1024
        sender.offer(recs[i:i + 1024])
    counts = sender.close(600.0)
    t1, c1 = time.perf_counter(), time.process_time()
    return (counts.spans_sent / (t1 - t0), (c1 - c0) * 1e6 / len(recs),
            sender.exporter_cpu_s * 1e6 / len(recs), counts.lost_records)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--parse", action="store_true", help="the receiver parses each request")
    ap.add_argument("--grpc", action="store_true", help="export over OTLP/gRPC")
    ap.add_argument("--exporters", type=int, default=default_exporters(),
                    help="exporter processes (default: as a run here would start)")
    args = ap.parse_args()
    recs = records(args.records)
    prog = program()
    how = "gRPC" if args.grpc else "HTTP/protobuf"
    print(f"{cpu_model()}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}; "
          f"{args.records} records shaped like sdt-demo's; export over {how} by "
          f"{args.exporters} exporter process(es), the receiver "
          f"{'parses' if args.parse else 'reads'}")
    # all records are offered at once here, so they age while the exporter works: that
    # is not a reader falling behind (live, the feeder then rests: bench/otlp_live.py)
    sender_module.BEHIND_NS = 1 << 62
    source = GRPC_RECEIVER if args.grpc else RECEIVER
    receiver = subprocess.Popen([sys.executable, "-c", source, "1" if args.parse else "0"],
                                stdout=subprocess.PIPE, text=True)
    got: dict[str, list[float]] = {k: [] for k in ("text", "text_cpu", "build", "export",
                                                   "cpu", "exporter_cpu")}
    try:
        assert receiver.stdout is not None
        port = int(receiver.stdout.readline())
        for r in range(args.rounds):
            text, text_cpu = text_rate(args.records)
            got["text"].append(text)
            got["text_cpu"].append(text_cpu)
            got["build"].append(build_rate(prog, recs))
            rate_, cpu, exporter_cpu, lost = export_rate(prog, recs, port, args.grpc,
                                                         args.exporters)
            got["export"].append(rate_)
            got["cpu"].append(cpu)
            got["exporter_cpu"].append(exporter_cpu)
            print(f"round {r + 1}: text {text / 1000:6.1f}k/s ({text_cpu:.2f} us CPU)  "
                  f"build {got['build'][-1] / 1000:6.1f}k/s  export {rate_ / 1000:6.1f}k/s "
                  f"({lost} lost; CPU a span: run {cpu:.2f} us, exporters "
                  f"{exporter_cpu:.2f} us)  export/text {rate_ / text:.2f}", flush=True)
    finally:
        receiver.kill()
        receiver.wait()
    med = {k: statistics.median(v) for k, v in got.items()}
    ratio = statistics.median(e / t for e, t in zip(got["export"], got["text"], strict=True))
    print(f"median: text {med['text'] / 1000:.1f}k/s ({med['text_cpu']:.2f} us CPU a "
          f"record), build {med['build'] / 1000:.1f}k/s, export {med['export'] / 1000:.1f}k/s "
          f"(CPU a span: run {med['cpu']:.2f} us, exporters {med['exporter_cpu']:.2f} us); "
          f"export/text {med['export'] / med['text']:.2f} (median of the rounds' ratios "
          f"{ratio:.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
