"""`run --otlp` live, A/B: bench/workload.c fires bench:tick at HZ for SECONDS while
planrunner prints every event as JSON to a file, without and with --otlp (the records
then also go out as OTLP log records to a receiver in another process that counts what
it parses). Figures per run: records printed, records the receiver got, the run's loss
lines, and the workload's achieved rate (a tracer that holds the producer back shows
there).

    sudo .venv/bin/python bench/otlp_live.py [--hz 100000] [--seconds 3] [--rounds 2]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

from run import build  # noqa: E402  (a sibling: bench/)

PLAN = """planrunner: 1
name: otlp-live
targets:
  w: {{binary: {binary}}}
probes:
  tick: {{usdt: w:bench:tick, args: [{{name: counter}}, {{name: word, type: string}}]}}
outputs:
  - print: tick
    fields: [counter, word]
"""

RECEIVER = r"""
import sys, threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
got = [0]
class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *a): pass
    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        req = ExportLogsServiceRequest.FromString(body)
        got[0] += sum(len(sl.log_records) for rl in req.resource_logs for sl in rl.scope_logs)
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()
s = HTTPServer(("127.0.0.1", 0), H)
print(s.server_address[1], flush=True)
threading.Thread(target=s.serve_forever, daemon=True).start()
sys.stdin.read()
print(got[0], flush=True)
"""


def one(plan: Path, binary: str, hz: int, seconds: float, otlp: bool, tmp: Path) -> str:
    receiver = None
    args = [sys.executable, "-m", "planrunner", "run", str(plan), "-f", "json",
            "-o", str(tmp / "out.json"), "-c", f"{binary} -w 10 rate {hz} {seconds}"]
    if otlp:
        receiver = subprocess.Popen([sys.executable, "-c", RECEIVER], stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, text=True)
        assert receiver.stdout is not None
        args += ["--otlp", f"http://127.0.0.1:{receiver.stdout.readline().strip()}"]
    proc = subprocess.run(args, capture_output=True, text=True, cwd=ROOT, timeout=300)
    printed = sum(1 for _ in open(tmp / "out.json"))
    got = ""
    if receiver is not None:
        out, _ = receiver.communicate("", timeout=30)
        got = f" otlp={out.strip()}"
    workload = next((line for line in proc.stdout.splitlines() if "fired=" in line), "")
    losses = [line for line in proc.stderr.splitlines()
              if "lost" in line or "incomplete" in line or "not exported" in line]
    return (f"{'otlp ' if otlp else 'plain'} printed={printed}{got} exit={proc.returncode} "
            f"[{workload}] {' | '.join(losses)}")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hz", type=int, default=100_000)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        binary = build(tmp / "build")["plain"]
        plan = tmp / "plan.yaml"
        plan.write_text(PLAN.format(binary=binary))
        for _ in range(args.rounds):
            for otlp in (False, True):
                print(one(plan, binary, args.hz, args.seconds, otlp, tmp), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
