"""run --otlp without root: configuration from the OTEL_* environment, the container id
of a cgroup, records -> spans / trees / log records, snapshots -> metrics, and the
sender against a real receiver built on opentelemetry-proto (tests/otlp_receiver.py):
a receiver that refuses then recovers, one that never answers, one that is down."""

from __future__ import annotations

import io
import time

import pytest

from planrunner.errors import UsageError
from planrunner.otlp.config import otlp_config
from planrunner.otlp.convert import Converter, WallClock, histogram_buckets
from planrunner.otlp.requests import ResourceCache, logs_request, traces_request
from planrunner.otlp.resource import container_id
from planrunner.otlp.sender import Sender
from planrunner.otlp.view import OtlpTap
from planrunner.records import AggRow, AggSnapshot, lhist_buckets, log2_buckets
from planrunner.render.layout import LayoutField, RecordLayout
from planrunner.render.model import AggregateOutput, PrintOutput, RenderedProgram, SpanShape
from tests.otlp_receiver import attrs, grpc_receiver, http_receiver

HEAD = ("time", "ts_ns", "pid", "tid", "comm", "probe", "output")


def _print(name: str, keys: tuple[str, ...], span: SpanShape | None = None,
           kind: str = "", attributes: tuple[tuple[str, str], ...] = ()) -> PrintOutput:
    layout = RecordLayout(0, "pr_rec_0", tuple(LayoutField(k, "int", f"f{i}")
                                               for i, k in enumerate(keys)))
    return PrintOutput(name, name, layout, None, span, kind, attributes)


def _rec(output: str, ts: int, pid: int = 10, tid: int = 11, **fields: object) -> dict:
    return {"time": "", "ts_ns": ts, "pid": pid, "tid": tid, "comm": "x", "probe": output,
            "output": output, **fields}


class _Clock(WallClock):
    def __init__(self, offset: int) -> None:
        self.t = 1_000
        super().__init__(lambda: self.t + offset, lambda: self.t)


def _sent(conv: Converter) -> tuple[list, list]:
    """What the converter has ready, as the receiver parses it: (pid, Span) and
    (pid, LogRecord) pairs."""
    from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
        ExportLogsServiceRequest,
    )
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    resources = ResourceCache(otlp_config("", "p", {}), {})
    spans, logs = conv.take()
    traces = ExportTraceServiceRequest.FromString(traces_request(resources, spans))
    got_logs = ExportLogsServiceRequest.FromString(logs_request(resources, logs))
    return ([(attrs(rs.resource.attributes)["process.pid"], s)
             for rs in traces.resource_spans for ss in rs.scope_spans for s in ss.spans],
            [(attrs(rl.resource.attributes)["process.pid"], r)
             for rl in got_logs.resource_logs for sl in rl.scope_logs for r in sl.log_records])


def _program(*prints: PrintOutput, aggregates: tuple[AggregateOutput, ...] = ()
             ) -> RenderedProgram:
    return RenderedProgram("", (), prints, aggregates, "plan")


# -- configuration --------------------------------------------------------------------

def test_config_defaults_and_environment() -> None:
    c = otlp_config("", "demo", {})
    assert (c.endpoint, c.protocol, c.service_name) == ("http://localhost:4318",
                                                        "http/protobuf", "demo")
    assert c.url_path("traces") == "/v1/traces"
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:9999/base/",
           "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
           "OTEL_EXPORTER_OTLP_HEADERS": "api-key=a%20b, x=1",
           "OTEL_SERVICE_NAME": "svc",
           "OTEL_RESOURCE_ATTRIBUTES": "deployment.environment=prod,service.name=ignored"}
    c = otlp_config(None, "demo", env)
    assert c.host_port == ("collector", 9999, False)
    assert c.url_path("logs") == "/base/v1/logs"
    assert c.headers == (("api-key", "a b"), ("x", "1"))
    assert c.service_name == "svc"
    assert c.resource == (("deployment.environment", "prod"),)
    # the flag's URL wins; a bare host:port is http; the service from the resource
    c = otlp_config("127.0.0.1:4318", "demo", {**env, "OTEL_SERVICE_NAME": ""})
    assert c.endpoint == "http://127.0.0.1:4318" and c.service_name == "ignored"
    assert otlp_config("", "demo", {"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}).endpoint == \
        "http://localhost:4317"


@pytest.mark.parametrize("env, url, says", [
    ({"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}, "", "not supported"),
    ({}, "ftp://x", r"not an http\(s\) URL"),
    ({}, "http://x:99999", "bad port"),
    ({"OTEL_EXPORTER_OTLP_HEADERS": "novalue"}, "", "is not KEY=VALUE"),
])
def test_config_errors_say_what(env: dict[str, str], url: str, says: str) -> None:
    with pytest.raises(UsageError, match=says):
        otlp_config(url, "p", env)


# -- resources ---------------------------------------------------------------------------

CID = "0123456789abcdef" * 4


@pytest.mark.parametrize("cgroup", [
    f"0::/system.slice/docker-{CID}.scope\n",
    f"12:memory:/docker/{CID}\n0::/\n",
    f"0::/kubepods.slice/kubepods-pod1.slice/cri-containerd-{CID}.scope\n",
    f"0::/kubepods/besteffort/pod1/crio-{CID}.scope\n",
    f"0::/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-{CID}.scope\n",
    f"0::/containerd/{CID}\n",
])
def test_container_id_from_each_runtime_path_form(cgroup: str) -> None:
    assert container_id(cgroup) == CID


def test_no_container_id_outside_containers() -> None:
    assert container_id("0::/user.slice/user-1000.slice/session-2.scope\n") is None
    assert container_id("0::/\n") is None


# -- spans and log records ---------------------------------------------------------------

def test_span_times_attributes_and_kind() -> None:
    shape = SpanShape("latency_ns", "", False, "id")
    conv = Converter([_print("query", ("id", "query", "latency_ns"), shape, "server",
                             (("db.system.name", "postgresql"), ("db.query.text", "query"),
                              ("db.operation.name", "first_word(query)")))],
                     [], _Clock(offset=5_000_000_000))
    conv.add(_rec("query", 9_000_000, id=7, query="  select * from t", latency_ns=2_500))
    (pid, span), = _sent(conv)[0]
    assert pid == 10 and span.name == "query" and span.kind == span.SPAN_KIND_SERVER
    assert span.end_time_unix_nano == 5_009_000_000
    assert span.start_time_unix_nano == 5_009_000_000 - 2_500
    assert len(span.trace_id) == 16 and len(span.span_id) == 8 and not span.parent_span_id
    assert attrs(span.attributes) == {
        "id": 7, "db.query.text": "  select * from t", "thread.id": 11,
        "db.operation.name": "SELECT", "db.system.name": "postgresql"}


def test_flat_span_attributes_stay_right_past_the_value_caches() -> None:
    """span_writer.py merges serialized values it has seen; a field whose values do not
    repeat goes in place once its cache is full: every span keeps its own values."""
    from planrunner.otlp.span_writer import CACHE_MAX

    shape = SpanShape("latency_ns", "", False)
    conv = Converter([_print("q", ("id", "ok", "big", "query", "note", "latency_ns"), shape,
                             "", (("db.operation.name", "first_word(query)"),
                                  ("db.system.name", "postgresql")))],
                     [], _Clock(offset=0))
    n = 2 * CACHE_MAX + 10
    words = ("select 1", "update t", None)
    for i in range(n):
        conv.add(_rec("q", 1_000 + i, tid=i % 3, id=i, ok=i % 2 == 0, big=(1 << 63) + i,
                      query=words[i % 3] if i < CACHE_MAX else f"insert {i}",
                      note=None if i % 5 == 0 else f"n{i % 4}", latency_ns=1))
    spans = _sent(conv)[0]
    assert len(spans) == n
    for i, (_pid, span) in enumerate(spans):
        query = words[i % 3] if i < CACHE_MAX else f"insert {i}"
        want: dict[str, object] = {"id": i, "ok": i % 2 == 0, "big": str((1 << 63) + i),
                                   "thread.id": i % 3, "db.system.name": "postgresql"}
        if query is not None:
            want["query"] = query
            want["db.operation.name"] = query.split()[0].upper()
        if i % 5:
            want["note"] = f"n{i % 4}"
        assert attrs(span.attributes) == want, i
        assert len(span.attributes) == len(want)  # nothing twice
        assert span.name == "q" and span.end_time_unix_nano == 1_000 + i


def test_flat_spans_of_many_combinations_and_processes_keep_their_own_values(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """span_writer.py keeps a template per combination of repeating values: past
    TEMPLATES_MAX the field with the most values goes in place; a NULL among the in-place
    values leaves that attribute out; a batch of several processes splits by process."""
    monkeypatch.setattr("planrunner.otlp.span_writer.TEMPLATES_MAX", 5)
    monkeypatch.setattr("planrunner.otlp.span_writer.CACHE_MAX", 8)
    shape = SpanShape("latency_ns", "", False)
    conv = Converter([_print("q", ("a", "b", "uniq", "latency_ns"), shape)], [],
                     _Clock(offset=0))
    n = 300
    recs = [_rec("q", 1_000 + i, pid=20 + i % 3, tid=i % 2, a=i % 4, b=f"b{i % 3}",
                 uniq=None if i % 7 == 0 else (f"u{i}" if i % 2 else i), latency_ns=i)
            for i in range(n)]
    plan = conv.plans["q"]
    conv.add_rows(plan, [plan.row(r) for r in recs])  # one batch, three processes
    spans = _sent(conv)[0]
    assert len(spans) == n
    writer = plan.writer
    assert writer is not None and writer.in_place  # the caches did not hold them all
    seen = set()
    for pid, span in spans:
        i = span.end_time_unix_nano - 1_000
        assert pid == 20 + i % 3 and span.start_time_unix_nano == 1_000
        want: dict[str, object] = {"a": i % 4, "b": f"b{i % 3}", "thread.id": i % 2}
        if i % 7:
            want["uniq"] = f"u{i}" if i % 2 else i
        assert attrs(span.attributes) == want, i
        assert len(span.attributes) == len(want) and span.name == "q"
        seen.add(i)
    assert seen == set(range(n))
    assert len({s.span_id for _, s in spans}) == n


def test_rows_of_a_batch_as_record_by_record() -> None:
    """wire.rows_maker maps one itemgetter over a batch; a record without some field
    (None there) and object values (their text) go through row_maker, as before."""
    from planrunner.otlp.wire import row_maker, rows_maker

    out = _print("q", ("id", "path"))
    recs = [_rec("q", 5, id=1, path="/a"), _rec("q", 6, id=2, path="/b")]
    assert rows_maker(out)(recs) == [(5, 10, 11, 1, "/a"), (6, 10, 11, 2, "/b")]
    recs.append(_rec("q", 7, id=3))  # no path
    assert rows_maker(out)(recs) == [row_maker(out)(r) for r in recs]
    assert rows_maker(out)(recs)[2] == (7, 10, 11, 3, None)
    stacks = PrintOutput("s", "s", RecordLayout(0, "pr_rec_0", (
        LayoutField("id", "int", "f0"), LayoutField("frames", "stack", "f1"))), None)
    got = rows_maker(stacks)([_rec("s", 8, id=4, frames=["main", "f"])])
    assert got == [(8, 10, 11, 4, "main,f")]


def test_print_of_a_plain_probe_is_a_log_record() -> None:
    conv = Converter([_print("flow", ("level", "name"))], [], _Clock(offset=100))
    conv.add(_rec("flow", 50, level=3, name=None))
    spans, logs = _sent(conv)
    assert not spans
    (pid, log), = logs
    assert log.time_unix_nano == 150 and log.event_name == "flow"
    assert attrs(log.attributes) == {"level": 3, "thread.id": 11}  # a NULL string: left out


def test_wall_clock_step_moves_later_spans_only() -> None:
    clock = _Clock(offset=1_000)
    assert clock.epoch_ns(500) == 1_500
    wall = clock.wall
    clock.wall = lambda: wall() + 7_000_000_000  # the wall clock steps 7 s forward
    assert clock.epoch_ns(600) == 1_600  # not re-read yet
    clock.t += 200_000_000
    assert clock.epoch_ns(700) == 7_000_001_700


def _recursion(threads: int, depth: int, step: int = 10) -> list[dict]:
    """Records of `threads` recursions `depth` deep as the kernel sends them: at each
    call's end, innermost first; threads interleaved, times from one clock."""
    recs = []
    for t in range(threads):
        for level in range(depth):  # level 0 is the innermost (depth - 1)
            d = depth - 1 - level
            begin = 1_000 + t + d * step
            end = 100_000 + t + level * step
            recs.append(_rec("call", end, tid=100 + t, t=t, level=level, depth=d,
                             latency_ns=end - begin))
    recs.sort(key=lambda r: r["ts_ns"])
    return recs


def test_nested_spans_become_one_tree_per_outermost_call() -> None:
    shape = SpanShape("latency_ns", "depth", True)
    conv = Converter([_print("call", ("t", "level", "depth", "latency_ns"), shape)], [],
                     _Clock(0))
    for rec in _recursion(threads=2, depth=5):
        conv.add(rec)
    assert not conv.pending and conv.npending == 0
    sent, _ = _sent(conv)
    assert len(sent) == 10
    by_id = {s.span_id: attrs(s.attributes) for _, s in sent}
    for t in range(2):
        spans = sorted((s for _, s in sent if attrs(s.attributes)["t"] == t),
                       key=lambda s: attrs(s.attributes)["depth"])
        assert len({s.trace_id for s in spans}) == 1  # one trace per thread's recursion
        assert not spans[0].parent_span_id
        for outer, inner in zip(spans, spans[1:], strict=False):
            assert inner.parent_span_id == outer.span_id
            assert by_id[inner.parent_span_id]["level"] == attrs(inner.attributes)["level"] + 1
    traces = {s.trace_id for _, s in sent}
    assert len(traces) == 2


def test_siblings_share_their_parent_and_late_parents_orphan() -> None:
    shape = SpanShape("latency_ns", "depth", True)
    conv = Converter([_print("call", ("depth", "latency_ns"), shape)], [], _Clock(0))
    # two children [10, 20] and [30, 40] of a parent [0, 50], then a child whose parent
    # is still open at the end
    conv.add(_rec("call", 20, depth=1, latency_ns=10))
    conv.add(_rec("call", 40, depth=1, latency_ns=10))
    conv.add(_rec("call", 50, depth=0, latency_ns=50))
    conv.add(_rec("call", 70, depth=1, latency_ns=5))
    sent, _ = _sent(conv)
    parent = next(s for _, s in sent if s.start_time_unix_nano == 0)
    kids = [s for _, s in sent if s.parent_span_id == parent.span_id]
    assert sorted(s.start_time_unix_nano for s in kids) == [10, 30]
    assert {s.trace_id for s in kids} == {parent.trace_id}
    assert len(sent) == 3 and conv.npending == 1
    conv.flush_pending()
    (_, late), = _sent(conv)[0]
    assert conv.orphaned == 1 and not late.parent_span_id and late.start_time_unix_nano == 65


def test_waiting_spans_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("planrunner.otlp.convert.MAX_PENDING", 3)
    shape = SpanShape("latency_ns", "depth", True)
    conv = Converter([_print("call", ("depth", "latency_ns"), shape)], [], _Clock(0))
    for i in range(4):
        conv.add(_rec("call", 10 + i, depth=1, latency_ns=1))
    assert conv.npending == 0 and conv.orphaned == 4 and len(_sent(conv)[0]) == 4


# -- metrics -------------------------------------------------------------------------------

def _snap(kind: str, rows: tuple[AggRow, ...], output: str = "o") -> AggSnapshot:
    return AggSnapshot(output, kind, "latency_ns", "ns", ("comm",), None, 2.0, rows)


def test_counts_are_cumulative_sums() -> None:
    conv = Converter([], [], _Clock(0), started_ns=1_000_000_000)
    metric = conv.metric(_snap("count", (AggRow((("comm", "a"),), count=5),
                                         AggRow((("comm", "b"),), count=2))))
    assert metric.sum.is_monotonic and metric.sum.aggregation_temporality == \
        metric.sum.aggregation_temporality.__class__(2)  # CUMULATIVE
    points = {attrs(p.attributes)["comm"]: p for p in metric.sum.data_points}
    assert points["a"].as_int == 5 and points["b"].as_int == 2
    assert points["a"].start_time_unix_nano == 1_000_000_000
    assert points["a"].time_unix_nano == 2_000_000_000


def test_log2_histogram_keeps_each_count_in_its_exact_bucket() -> None:
    values = [0, 1, 2, 3, 4, 1000, 1023, 1024, 5_000_000]
    counts: dict[int, int] = {}
    for v in values:
        counts[v.bit_length()] = counts.get(v.bit_length(), 0) + 1
    row = AggRow((), buckets=log2_buckets(counts))
    bounds, got = histogram_buckets(row.buckets or (), None)
    assert bounds[:5] == [0.0, 1.0, 3.0, 7.0, 15.0] and len(got) == len(bounds) + 1
    # OTLP bucket i is (bounds[i-1], bounds[i]]: every value lands where it was counted
    for v in values:
        i = next((i for i, b in enumerate(bounds) if v <= b), len(bounds))
        assert got[i] > 0, v
    assert sum(got) == len(values)
    assert got[0] == 1 and got[1] == 1 and got[2] == 2 and got[11] == 1 and got[10] == 2


def test_lhist_bounds_are_the_range() -> None:
    lo, hi, step = 0, 100, 30  # buckets <0, [0,30), [30,60), [60,90), [90,100), >=100
    counts = {0: 1, 1: 2, 3: 4, 4: 1, 5: 3}
    buckets = lhist_buckets(counts, lo, hi, step)
    bounds, got = histogram_buckets(buckets, (lo, hi, step))
    assert bounds == [-1.0, 29.0, 59.0, 89.0, 99.0]
    assert got == [1, 2, 0, 4, 1, 3]
    agg = AggregateOutput("h", "p", "lhist", "m", (), "v", None, None, None, (lo, hi, step),
                          10)
    conv = Converter([], [agg], _Clock(0))
    metric = conv.metric(_snap("lhist", (AggRow((), buckets=buckets),), output="h"))
    point, = metric.histogram.data_points
    assert list(point.explicit_bounds) == bounds and list(point.bucket_counts) == got
    assert point.count == 11


# -- the sender, against a real receiver --------------------------------------------

def _records(n: int) -> list[dict]:
    return [_rec("request", 1_000_000 + i, id=i, latency_ns=10) for i in range(n)]


def _sender(url: str, err: io.StringIO, protocol: str = "http/protobuf", **kw: object
            ) -> Sender:
    config = otlp_config(url, "plan", {"OTEL_EXPORTER_OTLP_PROTOCOL": protocol})
    program = _program(_print("request", ("id", "latency_ns"),
                              SpanShape("latency_ns", "", False)))
    return Sender(config, program, err, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
def test_refused_then_recovered_loses_nothing(protocol: str) -> None:
    receiver = http_receiver if protocol == "http/protobuf" else grpc_receiver
    with receiver(refuse=3) as (url, got):
        err = io.StringIO()
        sender = _sender(url, err, protocol, batch=100)
        sender.start()
        sender.offer(_records(250))
        counts = sender.close(30.0)
    assert counts.records == counts.records_sent == 250 and counts.lost_records == 0
    assert sorted(attrs(s.attributes)["id"] for _, s in got.spans) == list(range(250))
    assert got.requests >= 3 + 3  # 3 refused, then 3 batches
    assert "retrying" in err.getvalue() and "answers again" in err.getvalue()


def test_queue_bound_drops_and_counts() -> None:
    with http_receiver() as (url, got):
        sender = _sender(url, io.StringIO(), queue_max=100)
        sender.offer(_records(150))  # before the thread runs: the queue is full at 100
        sender.start()
        counts = sender.close(30.0)
    assert counts.records == 150 and counts.records_sent == 100 == len(got.spans)
    assert counts.lost_records == 50


def test_receiver_that_never_answers_delays_the_end_by_the_grace_only() -> None:
    with http_receiver(hang=True) as (url, got):
        err = io.StringIO()
        sender = _sender(url, err)
        sender.start()
        sender.offer(_records(10))
        time.sleep(0.5)  # a request is under way, unanswered
        t0 = time.monotonic()
        counts = sender.close(1.0)
        took = time.monotonic() - t0
    # the grace (1 s) and the exporter process's exit, far below the request's own
    # timeout (exporter.REQUEST_TIMEOUT_S, 10 s), with room for a loaded machine
    assert took < 3.0, took
    assert counts.lost_records == 10 and got.requests >= 1


def test_receiver_down_is_a_warning_and_the_run_says_what_was_lost() -> None:
    with http_receiver() as (url, _got):
        pass  # closed: nothing listens on its port now
    err = io.StringIO()
    config = otlp_config(url, "plan", {})
    program = _program(_print("request", ("id", "latency_ns"),
                              SpanShape("latency_ns", "", False)))
    inner = _ListView()
    tap = OtlpTap(inner, config, program, err)
    recs = _records(5)
    tap.records(recs)
    assert inner.got == recs  # the other view still prints everything
    assert tap.finish(0, has_command=False) == 4
    assert tap.finish(0, has_command=True) == 0  # with -c, the command's status stays
    text = err.getvalue()
    assert f"warning: OTLP receiver at {url}: " in text
    assert f"incomplete trace: 5 of 5 records not exported to {url}" in text


def test_nested_print_without_depth_is_said_at_start() -> None:
    err = io.StringIO()
    with http_receiver() as (url, _got):
        program = _program(_print("call", ("latency_ns",), SpanShape("latency_ns", "", True)),
                           _print("req", ("id",), SpanShape("", "", False)))
        tap = OtlpTap(_ListView(), otlp_config(url, "p", {}), program, err)
        assert tap.finish(0, False) == 0
    assert "without `depth`: its spans are sent flat" in err.getvalue()
    assert "without `latency`: sent as log records" in err.getvalue()


class _ListView:
    def __init__(self) -> None:
        self.got: list[dict] = []

    def record(self, rec: dict) -> None:
        self.got.append(rec)

    def records(self, batch: list[dict]) -> None:
        self.got.extend(batch)

    def aggregate(self, snap: object) -> None:
        pass

    def table(self, snap: object) -> None:
        pass

    def lost(self, count: int, reason: str) -> None:
        pass

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass


# -- the plan's `otlp:` and what render hands the exporter ---------------------------------

PLAN = """planrunner: 1
name: p
targets:
  demo: {{binary: {demo}}}
probes:
  start:
    usdt: demo:demo:request__start
    args: [{{name: id, type: uint64}}, {{name: path, type: string}}]
  done:
    usdt: demo:demo:request__done
    args: [{{name: id, type: uint64}}, {{name: status, type: int32}}]
  request:
    span: {{begin: start, end: done, key: id, nested: true}}
outputs:
{outputs}"""
DEMO = __import__("pathlib").Path(__file__).resolve().parents[1] / "fixtures/elf/build/demo"


def _plan(tmp_path, outputs: str) -> str:  # type: ignore[no-untyped-def]
    path = tmp_path / "p.yaml"
    path.write_text(PLAN.format(demo=DEMO, outputs=outputs))
    return str(path)


def test_render_hands_the_span_shape_and_otlp_option(tmp_path) -> None:  # type: ignore[no-untyped-def]
    if not DEMO.exists():
        pytest.skip("tests/fixtures/elf/build/demo not built (make -C tests/fixtures/elf)")
    from planrunner.pipeline import compile_plan

    path = _plan(tmp_path, """\
  - print: request
    name: req
    fields: [begin.id, {lat: latency}, depth, end.status]
    otlp: {kind: server, attributes: {db.system.name: postgresql, code: status}}
  - print: start
    fields: [id]
""")
    _plan_, _resolved, program = compile_plan(path, {}, None, None)
    req, start = program.prints
    assert req.span == SpanShape("lat", "depth", True, "id")
    assert req.otlp_kind == "server"
    assert req.otlp_attributes == (("db.system.name", "postgresql"), ("code", "status"))
    assert start.span is None and start.otlp_kind == "" and start.otlp_attributes == ()


def test_otlp_option_mistakes_are_located(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from planrunner.errors import PlanError
    from planrunner.plan import load_plan

    path = _plan(tmp_path, """\
  - print: request
    fields: [begin.path, latency]
    otlp: {attributes: {db.operation.name: first_word(query)}}
  - count: start
    otlp: {kind: server}
""")
    with pytest.raises(PlanError) as exc:
        load_plan(path, {})
    got = [f"{d.span.line}:{d.span.column}: {d.message}" for d in exc.value.diagnostics]
    assert got == ["17:44: unknown field 'query'",
                   "19:5: 'otlp' belongs to print, not to count"], got
    path = _plan(tmp_path, "  - {print: request, fields: [latency], otlp: {kind: sever}}\n")
    with pytest.raises(PlanError) as exc:
        load_plan(path, {})
    assert "sever" in str(exc.value.diagnostics[0].message)


@pytest.mark.parametrize("argv, env, says", [
    (["--otlp", "ftp://x"], {}, "--otlp: 'ftp://x' is not an http(s) URL"),
    (["--otlp"], {"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"},
     "OTEL_EXPORTER_OTLP_PROTOCOL='http/json' is not supported"),
])
def test_run_says_a_bad_otlp_setting_before_anything(argv: list[str], env: dict[str, str],
                                                     says: str,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from planrunner.cli import main

    for key, value in env.items():
        monkeypatch.setenv(key, value)
    out, err = io.StringIO(), io.StringIO()
    # the plan does not even exist: the setting is checked first
    assert main(["run", "no-such-plan.yaml", *argv], out, err) == 2
    assert says in err.getvalue() and "Traceback" not in err.getvalue()
    assert "Tracing" not in err.getvalue()


def test_the_run_says_where_it_sends_and_what_it_sent() -> None:
    err = io.StringIO()
    with http_receiver() as (url, got):
        program = _program(_print("request", ("id", "latency_ns"),
                                  SpanShape("latency_ns", "", False)),
                           _print("flow", ("id",)))
        tap = OtlpTap(_ListView(), otlp_config(url, "p", {}), program, err)
        tap.records(_records(3) + [_rec("flow", 5, id=1)])
        tap.aggregate(_snap("count", (AggRow((("comm", "a"),), count=5),)))
        assert tap.finish(0, False) == 0
    assert len(got.spans) == 3 and len(got.logs) == 1 and len(got.metrics) == 1
    assert err.getvalue() == (
        f"Sending spans, log records and metrics over OTLP (http/protobuf) to {url}\n"
        f"OTLP: sent 3 spans, 1 log records and 1 metric points to {url}\n")
