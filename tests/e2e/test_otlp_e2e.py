"""run --otlp for real: the demo's requests arrive at a real OTLP receiver (built on
opentelemetry-proto, tests/otlp_receiver.py) as spans with the durations and attributes
the JSON view prints; a recursion's nested spans arrive as trees matching the call tree;
counts and histograms arrive exact; a receiver that refuses then recovers loses nothing;
one that never answers does not hold the run's end for more than 1 s (and the run says
what was lost, exit 4); OTLP/gRPC configured by the environment alone."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

from planrunner.records import lhist_bucket_index, log2_bucket_index
from tests.e2e.conftest import ROOT, json_records, run_planrunner, write_plan
from tests.otlp_receiver import attrs, grpc_receiver, http_receiver

DEMO_PLAN = str(ROOT / "plans" / "sdt-demo.yaml")


def _epoch_ns(iso: str) -> int:
    return int(datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp() * 1e6) * 1000


def _demo(fixtures: Path, url: str, tmp_path: Path, n: int = 5,
          env: dict[str, str] | None = None, flag: list[str] | None = None
          ) -> tuple[subprocess.CompletedProcess, list[dict]]:
    out = tmp_path / "records.json"
    proc = run_planrunner(["run", DEMO_PLAN, "-f", "json", "-o", str(out),
                           *(flag if flag is not None else ["--otlp", url]),
                           "-c", f"{fixtures / 'demo'} {n}"], timeout=120,
                          env={**os.environ, **(env or {})})
    return proc, json_records(out.read_text()) if out.exists() else []


def test_demo_requests_arrive_as_spans(fixtures_built, tmp_path) -> None:
    with http_receiver() as (url, got):
        proc, recs = _demo(fixtures_built, url, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert len(recs) == 5 and len(got.spans) == 5
    spans = {attrs(s.attributes)["id"]: (res, s) for res, s in got.spans}
    for rec in recs:
        res, span = spans[rec["id"]]
        assert span.name == "request" and span.kind == span.SPAN_KIND_INTERNAL
        assert span.end_time_unix_nano - span.start_time_unix_nano == rec["latency_ns"]
        # the JSON view's wall time of the same end event (µs), by its own offset
        assert abs(span.end_time_unix_nano - _epoch_ns(rec["time"])) < 5_000_000
        assert attrs(span.attributes) == {"id": rec["id"], "path": rec["path"],
                                          "status": rec["status"], "thread.id": rec["tid"]}
        assert not span.parent_span_id
        assert res["service.name"] == "sdt-demo" and res["process.pid"] == rec["pid"]
        assert str(res["process.executable.path"]).endswith("/demo")
        assert res["process.command_line"] == f"{fixtures_built / 'demo'} 5"
        assert res["host.name"] == os.uname().nodename
    assert len({s.trace_id for _, s in got.spans}) == 5


NESTED = """
planrunner: 1
name: nested
targets:
  r: {{binary: {b}}}
probes:
  enter: {{usdt: r:rec:enter, args: [{{name: t}}, {{name: level}}]}}
  exit: {{usdt: r:rec:exit, args: [{{name: t}}, {{name: level}}]}}
  call:
    span: {{begin: enter, end: exit, nested: true}}
outputs:
  - print: call
    fields: [begin.t, begin.level, depth, latency]
"""


def test_nested_spans_arrive_as_the_call_tree(fixtures_built, tmp_path) -> None:
    threads, depth = 2, 5
    plan = write_plan(tmp_path, NESTED.format(b=fixtures_built / "recurse"))
    with http_receiver() as (url, got):
        proc = run_planrunner(["run", plan, "--otlp", url, "-f", "json",
                               "-c", f"{fixtures_built / 'recurse'} {threads} {depth}"],
                              timeout=120)
    assert proc.returncode == 0, proc.stderr
    truth = {}
    for line in proc.stdout.splitlines():
        if not line.startswith("{"):
            t, level, d, inner, outer = (int(x) for x in line.split())
            truth[(t, level)] = (d, inner, outer)
    assert len(truth) == threads * depth == len(got.spans)
    by_id = {s.span_id: s for _, s in got.spans}
    for _, span in got.spans:
        a = attrs(span.attributes)
        d, inner, outer = truth[(a["t"], a["level"])]
        assert a["depth"] == d
        assert inner <= span.end_time_unix_nano - span.start_time_unix_nano <= outer
        if d == 0:
            assert not span.parent_span_id  # the outermost call starts a trace
            continue
        parent = by_id[span.parent_span_id]  # the call that made this one
        pa = attrs(parent.attributes)
        assert (pa["t"], pa["level"], pa["depth"]) == (a["t"], a["level"] + 1, d - 1)
        assert parent.trace_id == span.trace_id
        assert parent.start_time_unix_nano <= span.start_time_unix_nano
        assert span.end_time_unix_nano <= parent.end_time_unix_nano
    assert len({s.trace_id for _, s in got.spans}) == threads


METRICS = """
planrunner: 1
name: agg-otlp
targets:
  a: {{binary: {b}}}
probes:
  value: {{usdt: a:agg:value}}
outputs:
  - {{count: value, name: n}}
  - {{hist: value, name: h, value: arg1}}
  - lhist: value
    name: l
    value: arg1
    range: {{min: 100, max: 950, step: 200}}
"""


def test_count_and_histograms_arrive_exact(fixtures_built, tmp_path) -> None:
    plan = write_plan(tmp_path, METRICS.format(b=fixtures_built / "agg"))
    with http_receiver() as (url, got):
        proc = run_planrunner(["run", plan, "--otlp", url, "-f", "json",
                               "-c", f"{fixtures_built / 'agg'} 1 0 values"], timeout=120)
    assert proc.returncode == 0, proc.stderr
    metrics = {m.name: (res, m) for res, m in got.metrics}
    assert sorted(metrics) == ["h", "l", "n"]
    res, n = metrics["n"]
    assert res["service.name"] == "agg-otlp"
    point, = n.sum.data_points
    assert point.as_int == 1000 and n.sum.is_monotonic
    assert n.sum.aggregation_temporality == 2  # cumulative: the run, from its start
    assert point.start_time_unix_nano < point.time_unix_nano
    values = range(1, 1001)
    _, h = metrics["h"]
    hp, = h.histogram.data_points
    assert list(hp.explicit_bounds) == [float(2 ** k - 1) for k in range(64)]
    want = [0] * 65
    for v in values:
        want[log2_bucket_index(v)] += 1
    assert list(hp.bucket_counts) == want and hp.count == 1000 and hp.sum == 500500
    _, lh = metrics["l"]
    lp, = lh.histogram.data_points
    assert list(lp.explicit_bounds) == [99.0, 299.0, 499.0, 699.0, 899.0, 949.0]
    want = [0] * 7
    for v in values:
        want[lhist_bucket_index(v, 100, 950, 200)] += 1
    assert list(lp.bucket_counts) == want


def test_refusing_receiver_then_recovering_loses_nothing(fixtures_built, tmp_path) -> None:
    with http_receiver(refuse=2) as (url, got):
        proc, recs = _demo(fixtures_built, url, tmp_path, n=8)
    assert proc.returncode == 0, proc.stderr
    assert got.requests >= 3
    assert "retrying" in proc.stderr and "answers again" in proc.stderr
    assert sorted(attrs(s.attributes)["id"] for _, s in got.spans) == \
        sorted(r["id"] for r in recs) and len(recs) == 8


def test_receiver_that_never_answers_does_not_hold_the_end(fixtures_built, tmp_path) -> None:
    with http_receiver(hang=True) as (url, got):
        proc = subprocess.Popen(
            [sys.executable, "-m", "planrunner", "run", DEMO_PLAN, "--otlp", url,
             "-f", "json", "-o", str(tmp_path / "r.json"), "-d", "3s",
             "--set", f"demo={fixtures_built / 'demo'}"],
            cwd=ROOT, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
        assert proc.stderr is not None
        lines = []
        for line in proc.stderr:  # "Tracing ..." starts the 3 s
            lines.append(line)
            if line.startswith("Tracing"):
                break
        traced = time.monotonic()
        demo = subprocess.run([str(fixtures_built / "demo"), "3"], capture_output=True)
        assert demo.returncode == 0
        rest = proc.stderr.read()
        status = proc.wait(30)
        took = time.monotonic() - traced
    err = "".join(lines) + rest
    assert status == 4, err  # incomplete trace
    assert "incomplete trace: 3 of 3 records not exported" in err
    # 3 s of tracing, then at most 1 s for the receiver; the rest is detaching (loaded
    # machine: a second of slack)
    assert took < 3 + 1 + 1.0, (took, err)
    assert got.requests >= 1


def test_grpc_from_the_environment_alone(fixtures_built, tmp_path) -> None:
    with grpc_receiver() as (url, got):
        proc, recs = _demo(fixtures_built, url, tmp_path, n=3, flag=["--otlp"], env={
            "OTEL_EXPORTER_OTLP_ENDPOINT": url, "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
            "OTEL_SERVICE_NAME": "shop", "OTEL_EXPORTER_OTLP_HEADERS": "api-key=k1",
            "OTEL_RESOURCE_ATTRIBUTES": "deployment.environment=test"})
    assert proc.returncode == 0, proc.stderr
    assert sorted(attrs(s.attributes)["id"] for _, s in got.spans) == [1, 2, 3]
    res = got.spans[0][0]
    assert res["service.name"] == "shop" and res["deployment.environment"] == "test"
    assert all(h.get("api-key") == "k1" for h in got.headers)


def test_postgres_statements_follow_the_database_conventions() -> None:
    from tests.e2e.workloads.helpers import postgres_server, tracing

    with http_receiver() as (url, got), postgres_server() as pg:
        pg.psql("SELECT 1")  # a first connection warms the catalog caches
        with tracing("postgres-slow", "--set", "threshold=50ms", "--otlp", url) as tracer:
            out = pg.psql("SELECT pg_backend_pid()", "select pg_sleep(0.1)").stdout
            recs = tracer.stop()
    backend = int(out.split()[0])
    rec, = (r for r in recs if r["pid"] == backend)
    spans = [s for res, s in got.spans if res["process.pid"] == backend]
    assert len(spans) == 1, got.spans
    span = spans[0]
    assert span.name == "query" and span.kind == span.SPAN_KIND_SERVER
    assert span.end_time_unix_nano - span.start_time_unix_nano == rec["latency_ns"]
    assert attrs(span.attributes) == {
        "db.query.text": "select pg_sleep(0.1)",
        "thread.id": backend, "db.operation.name": "SELECT",
        "db.system.name": "postgresql"}
