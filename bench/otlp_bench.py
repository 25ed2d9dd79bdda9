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
             confirmed; and this process's CPU time over it (offer + feeder), the
             exporters' and the receiver's (it shares the CPUs), a span.

    .venv/bin/python bench/otlp_bench.py [--records 200000] [--rounds 5] [--parse] [--grpc]
                                         [--exporters N] [--stages]

`--stages`: where the CPU of an exported span goes, each stage alone in this process on
the same records (CPU time a span, the median of the rounds): the run's side (offer's
filter, rows, pickle) and the exporter's (unpickle, convert, span_writer, the merge
into the request, its serialization, the POST on loopback) and the receiver's read.
"""

from __future__ import annotations

import argparse
import http.client
import io
import os
import pickle
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
from planrunner.otlp.wire import PID, row_maker, rows_maker  # noqa: E402
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


def cpu_ns(pid: int) -> int:
    """CPU time process `pid` has used, ns (/proc/PID/schedstat: all its threads')."""
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/schedstat") as fh:
            total += int(fh.read().split()[0])
    return total


def export_rate(prog: RenderedProgram, recs: list[dict[str, object]], port: int,
                grpc: bool, exporters: int, receiver: int
                ) -> tuple[float, float, float, float, int]:
    """(spans/s end to end, this process's CPU us a span, the exporters' CPU us a
    span, the receiver's CPU us a span, spans lost)."""
    env = {"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc" if grpc else "http/protobuf"}
    sender = Sender(otlp_config(f"http://127.0.0.1:{port}", "sdt-demo", env), prog,
                    io.StringIO(), queue_max=len(recs), exporters=exporters)
    sender.start()
    if not sender.wait_ready(60):  # its imports are done before the clock starts
        raise SystemExit(f"the exporter did not start: {sender.failed}")
    t0, c0, r0 = time.perf_counter(), time.process_time(), cpu_ns(receiver)
    for i in range(0, len(recs), 1024):  # the session hands batches of <= 1024
        sender.offer(recs[i:i + 1024])
    counts = sender.close(600.0)
    t1, c1, r1 = time.perf_counter(), time.process_time(), cpu_ns(receiver)
    return (counts.spans_sent / (t1 - t0), (c1 - c0) * 1e6 / len(recs),
            sender.exporter_cpu_s * 1e6 / len(recs), (r1 - r0) / 1e3 / len(recs),
            counts.lost_records)


def _cpu_us(fn: object, n: int) -> float:
    """CPU us a span of fn() over n spans."""
    c0 = time.process_time()
    fn()  # type: ignore[operator]
    return (time.process_time() - c0) * 1e6 / n


def stages(prog: RenderedProgram, recs: list[dict[str, object]], port: int
           ) -> dict[str, float]:
    """CPU us a span of each stage of an export, alone, in this process (HTTP)."""
    from opentelemetry.proto.trace.v1.trace_pb2 import ScopeSpans

    out = prog.prints[0]
    make = rows_maker(out)
    names = frozenset((out.name,))
    n = len(recs)
    chunks = [recs[i:i + 1024] for i in range(0, n, 1024)]  # as the session hands them
    got: dict[str, float] = {}
    got["run: offer's filter"] = _cpu_us(
        lambda: [[r for r in c if r.get("output") in names] for c in chunks], n)
    rows: list[list[tuple[object, ...]]] = []
    got["run: rows"] = _cpu_us(lambda: rows.extend(make(c) for c in chunks), n)
    frames: list[bytes] = []
    got["run: pickle"] = _cpu_us(lambda: frames.extend(
        pickle.dumps(("rows", out.name, r), pickle.HIGHEST_PROTOCOL) for r in rows), n)
    # (each dropped at once: kept, the collector's passes over the bench's 200,000
    # records would be counted)
    got["exporter: unpickle"] = _cpu_us(lambda: [pickle.loads(f) and None for f in frames],
                                        n)
    conv = Converter(prog.prints, (), WallClock())
    plan = conv.plans["request"]
    got["exporter: convert (ids, epoch)"] = _cpu_us(
        lambda: [conv.add_rows(plan, r) for r in rows], n)
    flats = conv.take()[0]
    writer = plan.writer
    assert writer is not None
    blobs: list[bytes] = []
    got["exporter: span_writer"] = _cpu_us(lambda: blobs.extend(
        writer.write(f.rows, f.offset, f.ids) for f in flats  # type: ignore[union-attr]
    ), n)
    scopes: list[ScopeSpans] = []

    def merge() -> None:
        for i in range(0, len(blobs), 4):  # requests of 4096 spans
            ss = ScopeSpans()
            for b in blobs[i:i + 4]:
                ss.MergeFromString(b)
            scopes.append(ss)

    got["exporter: merge into the request"] = _cpu_us(merge, n)
    bodies: list[bytes] = []
    got["exporter: serialize the request"] = _cpu_us(
        lambda: bodies.extend(ss.SerializeToString() for ss in scopes), n)
    resources = ResourceCache(otlp_config("", "sdt-demo", {}), {})
    assert all(r[PID] == rows[0][0][PID] for c in rows for r in c)
    bodies = [traces_request(resources, part) for part, _ in batches(flats, 4096)]
    conn = http.client.HTTPConnection("127.0.0.1", port)
    headers = {"Content-Type": "application/x-protobuf"}

    def post() -> None:
        for body in bodies:
            conn.request("POST", "/v1/traces", body, headers)
            conn.getresponse().read()

    post()  # connected
    got["exporter: POST on loopback"] = _cpu_us(post, n)
    conn.close()
    return got


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--parse", action="store_true", help="the receiver parses each request")
    ap.add_argument("--grpc", action="store_true", help="export over OTLP/gRPC")
    ap.add_argument("--stages", action="store_true",
                    help="also the CPU a span of each stage, alone (HTTP only)")
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
                                                   "cpu", "exporter_cpu", "receiver_cpu")}
    staged: dict[str, list[float]] = {}
    try:
        assert receiver.stdout is not None
        port = int(receiver.stdout.readline())
        for r in range(args.rounds):
            text, text_cpu = text_rate(args.records)
            got["text"].append(text)
            got["text_cpu"].append(text_cpu)
            got["build"].append(build_rate(prog, recs))
            rate_, cpu, exporter_cpu, receiver_cpu, lost = export_rate(
                prog, recs, port, args.grpc, args.exporters, receiver.pid)
            got["export"].append(rate_)
            got["cpu"].append(cpu)
            got["exporter_cpu"].append(exporter_cpu)
            got["receiver_cpu"].append(receiver_cpu)
            print(f"round {r + 1}: text {text / 1000:6.1f}k/s ({text_cpu:.2f} us CPU)  "
                  f"build {got['build'][-1] / 1000:6.1f}k/s  export {rate_ / 1000:6.1f}k/s "
                  f"({lost} lost; CPU a span: run {cpu:.2f} us, exporters "
                  f"{exporter_cpu:.2f} us, receiver {receiver_cpu:.2f} us)  "
                  f"export/text {rate_ / text:.2f}", flush=True)
            if args.stages and not args.grpc:
                for k, v in stages(prog, recs, port).items():
                    staged.setdefault(k, []).append(v)
    finally:
        receiver.kill()
        receiver.wait()
    med = {k: statistics.median(v) for k, v in got.items()}
    ratio = statistics.median(e / t for e, t in zip(got["export"], got["text"], strict=True))
    print(f"median: text {med['text'] / 1000:.1f}k/s ({med['text_cpu']:.2f} us CPU a "
          f"record), build {med['build'] / 1000:.1f}k/s, export {med['export'] / 1000:.1f}k/s "
          f"(CPU a span: run {med['cpu']:.2f} us, exporters {med['exporter_cpu']:.2f} us, "
          f"receiver {med['receiver_cpu']:.2f} us); "
          f"export/text {med['export'] / med['text']:.2f} (median of the rounds' ratios "
          f"{ratio:.2f})")
    if staged:
        print("CPU a span of each stage, alone (median of the rounds; the receiver's read "
              "is not counted):")
        for k, v in staged.items():
            print(f"  {k:36s} {statistics.median(v):5.2f} us")
        print(f"  {'sum':36s} {sum(statistics.median(v) for v in staged.values()):5.2f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
