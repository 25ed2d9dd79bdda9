"""Records and aggregation snapshots -> OTLP messages (opentelemetry-proto).

- A print whose probe is a span (and which prints its `latency`) becomes a span: name =
  the output's name (the span probe's, unless `name:`), end = the record's time (the end
  event's CLOCK_MONOTONIC ns, records.py `ts_ns`), start = end - latency, both moved to
  the Unix epoch by `WallClock`; attributes = the record's fields under their record
  keys (but the latency: it is the duration), `thread.id`, and the output's
  `otlp: {attributes}`; kind from `otlp: {kind}`. Records arrive as rows (wire.py).
  Spans are kept as Python values (flat ones as their rows, FlatSpans; nested ones as
  SpanItems) and written into their request in place (requests.py, span_writer.py):
  building a Span and copying it in cost about 4 times more.
- Nested spans (`nested: true`, printing `depth`) become trees. Records come at their
  end, inner first: a span of depth d is the child of the next span of depth d-1 of the
  same key (pid and the span's key, or the thread) whose interval encloses it. Children
  wait in `pending` until their parent arrives; a depth-0 span completes its tree, which
  gets one trace id and leaves. At most MAX_PENDING spans wait: past that, a key's
  waiting spans leave as roots of their own traces (counted as `orphaned`, not lost).
- Any other print becomes a log record (body: the output's name, attributes: fields).
- Aggregations become metrics: count as a monotonic Sum, sum as a Sum, min/max/avg as
  Gauges, hist/lhist as explicit-bucket Histograms; cumulative from the start without
  `every:`, per interval (delta) with it. OTLP bucket i holds (bounds[i-1], bounds[i]];
  our integer buckets are [low, high), the same values as (low-1, high-1]: the bounds
  are `high - 1`, so every count stays in its exact bucket (hist: 0, 1, 3, 7, ...).

Imports opentelemetry-proto: loaded by the exporter process only (exporter.py).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.proto.common.v1.common_pb2 import InstrumentationScope
from opentelemetry.proto.metrics.v1 import metrics_pb2 as m
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from planrunner.clock import wall_offset_ns
from planrunner.otlp.attributes import AttributePlan, attribute_plan, key_values
from planrunner.otlp.span_writer import SpanWriter
from planrunner.otlp.wire import PID, ROW_HEAD, TID, TS, row_keys, row_maker
from planrunner.records import AggRow, AggSnapshot, Bucket, Record
from planrunner.render.model import AggregateOutput, PrintOutput

MAX_PENDING = 65536  # nested spans waiting for their parent, all keys together
RECHECK_NS = 100_000_000  # the wall clock's offset is re-read this often (a step moves it)
_KINDS = {"": Span.SPAN_KIND_INTERNAL, "internal": Span.SPAN_KIND_INTERNAL,
          "server": Span.SPAN_KIND_SERVER, "client": Span.SPAN_KIND_CLIENT,
          "producer": Span.SPAN_KIND_PRODUCER, "consumer": Span.SPAN_KIND_CONSUMER}
SCOPE = InstrumentationScope(name="planrunner")


class WallClock:
    """CLOCK_MONOTONIC ns (the probes' clock) -> Unix epoch ns: an offset read at start
    (the tightest of a few bracketed reads) and again every RECHECK_NS, so that a step
    of the wall clock (NTP, an operator) moves the spans after it, not all of them."""

    def __init__(self, wall: Callable[[], int] = time.time_ns,
                 monotonic: Callable[[], int] = time.monotonic_ns) -> None:
        self.wall = wall
        self.monotonic = monotonic
        self.offset = self._read()
        self.read_at = self.monotonic()

    def _read(self) -> int:
        return wall_offset_ns(3, self.wall, self.monotonic)

    def epoch_ns(self, mono_ns: int) -> int:
        now = self.monotonic()
        if now - self.read_at >= RECHECK_NS:
            self.offset = self._read()
            self.read_at = now
        return mono_ns + self.offset


def _place(keys: Sequence[str], key: str) -> int:
    """The place of field `key` in a row, -1 when it is not printed."""
    return keys.index(key, len(ROW_HEAD)) if key and key in keys[len(ROW_HEAD):] else -1


def _id(bits: int) -> bytes:
    """Random bytes for ids (not secret: the random module is faster than the OS's)."""
    return random.getrandbits(bits).to_bytes(bits // 8, "little")


@dataclass(frozen=True, slots=True)
class PrintPlan:
    """How the rows of one print output are sent (places: in the row, wire.py)."""

    name: str
    kind: Span.SpanKind.ValueType
    attrs: AttributePlan
    latency: int  # -1: a log record
    depth: int  # -1: no tree
    key: int  # the span's key (TID: the thread)
    row: Callable[[Record], tuple[Any, ...]]  # record -> row (wire.row_maker)
    writer: SpanWriter | None  # a flat span's name, kind and attributes (span_writer.py)


@dataclass(slots=True, eq=False)
class SpanItem:
    """A span to send, kept as Python values: the message is written in place into its
    request (requests.py), which costs a few times less than building a Span and
    copying it in. `children`: while it waits for its tree to complete."""

    pid: int
    plan: PrintPlan
    row: tuple[Any, ...]
    start: int
    end: int
    span_id: bytes
    depth: int = 0
    trace_id: bytes = b""
    parent: bytes = b""
    children: list[SpanItem] = field(default_factory=list)


@dataclass(slots=True, eq=False)
class FlatSpans:
    """Spans of one output that do not nest, kept as their rows: requests.py writes
    each span straight from its row (a SpanItem each cost ~0.5 us more). `offset`:
    CLOCK_MONOTONIC -> epoch ns when they came; `ids`: 24 random bytes a row, its span
    id (8) then its trace id (16), drawn at once (one call a span cost ~0.3 us)."""

    plan: PrintPlan
    rows: Sequence[tuple[Any, ...]]
    offset: int
    ids: bytes

    def __len__(self) -> int:
        return len(self.rows)

    def split(self, n: int) -> tuple[FlatSpans, FlatSpans]:
        """The first n spans, and the others."""
        return (FlatSpans(self.plan, self.rows[:n], self.offset, self.ids[:24 * n]),
                FlatSpans(self.plan, self.rows[n:], self.offset, self.ids[24 * n:]))


@dataclass(slots=True, eq=False)
class LogItem:
    pid: int
    plan: PrintPlan
    row: tuple[Any, ...]
    time: int


class Converter:
    """Rows (or records) -> spans and log records, snapshots -> metrics. `spans` and
    `logs` hold the items ready to send; not thread-safe (one thread owns it)."""

    def __init__(self, prints: Sequence[PrintOutput], aggregates: Sequence[AggregateOutput],
                 clock: WallClock, started_ns: int | None = None) -> None:
        self.clock = clock
        self.plans: dict[str, PrintPlan] = {}
        for p in prints:
            keys = row_keys(p)
            shape = p.span
            latency = shape.latency if shape is not None else ""
            depth = shape.depth if shape is not None and shape.nested else ""
            key = shape.key if shape is not None else ""
            kind = _KINDS.get(p.otlp_kind, Span.SPAN_KIND_INTERNAL)
            # a span's latency is its duration: not an attribute too
            attrs = attribute_plan(keys, latency, p.otlp_attributes)
            flat = _place(keys, latency) >= 0 and _place(keys, depth) < 0
            self.plans[p.name] = PrintPlan(
                p.name, kind, attrs, _place(keys, latency), _place(keys, depth),
                _place(keys, key) if key in keys[len(ROW_HEAD):] else TID, row_maker(p),
                SpanWriter(p.name, kind, attrs, _place(keys, latency)) if flat else None)
        self.lhist = {a.name: a.lhist for a in aggregates if a.lhist is not None}
        self.every = {a.name: a.every_ns for a in aggregates}
        self.started_ns = started_ns if started_ns is not None else time.time_ns()
        self.spans: list[SpanItem | FlatSpans] = []
        self.nspans = 0  # spans in `spans`
        self.logs: list[LogItem] = []
        self.pending: dict[tuple[int, object], dict[int, list[SpanItem]]] = {}
        self.npending = 0
        self.orphaned = 0

    def add(self, rec: Record) -> None:
        """A print record (as views get it)."""
        plan = self.plans.get(rec["output"])
        if plan is not None:
            self.add_rows(plan, (plan.row(rec),))

    def add_rows(self, plan: PrintPlan, rows: Iterable[tuple[Any, ...]]) -> None:
        """Rows of the output of `plan` (wire.py)."""
        epoch_ns = self.clock.epoch_ns
        if plan.latency < 0:
            self.logs.extend(LogItem(row[PID], plan, row, epoch_ns(row[TS])) for row in rows)
            return
        if plan.depth < 0:
            rows = rows if isinstance(rows, Sequence) else list(rows)
            if rows:
                # the rows of one batch came within a few ms: one offset for them all
                self.spans.append(FlatSpans(plan, rows, epoch_ns(0),
                                            random.randbytes(24 * len(rows))))
                self.nspans += len(rows)
            return
        for row in rows:
            self._add_nested(plan, row, epoch_ns(row[TS]))

    def _add_nested(self, plan: PrintPlan, row: tuple[Any, ...], end: int) -> None:
        start = end - int(row[plan.latency] or 0)
        pid = row[PID]
        node = SpanItem(pid, plan, row, start, end, _id(64), int(row[plan.depth] or 0))
        group = (pid, row[plan.key])
        levels = self.pending.get(group)
        if levels is not None:  # its children, ended before it, within its interval
            below = levels.get(node.depth + 1)
            if below:
                mine = [n for n in below if n.start >= start and n.end <= end]
                if mine:
                    node.children = mine
                    rest = [n for n in below if not (n.start >= start and n.end <= end)]
                    if rest:
                        levels[node.depth + 1] = rest
                    else:
                        del levels[node.depth + 1]
                        if not levels:  # a key (a thread) waits for nothing now
                            del self.pending[group]
                            levels = None
                    self.npending -= len(mine)
        if node.depth <= 0:
            self._emit(node, _id(128), b"")
            return
        if levels is None:
            levels = self.pending[group] = {}
        levels.setdefault(node.depth, []).append(node)
        self.npending += 1
        if self.npending > MAX_PENDING:
            self._flush_group(group)

    def _emit(self, root: SpanItem, trace_id: bytes, parent: bytes) -> None:
        stack = [(root, parent)]
        while stack:
            node, parent_id = stack.pop()
            node.trace_id = trace_id
            node.parent = parent_id
            self.spans.append(node)
            self.nspans += 1
            stack.extend((c, node.span_id) for c in node.children)
            node.children = []

    def _flush_group(self, group: tuple[int, object]) -> None:
        """Its waiting spans leave as roots of their own traces (their parent is late)."""
        levels = self.pending.pop(group, {})
        for nodes in levels.values():
            for node in nodes:
                self.orphaned += 1
                self.npending -= 1
                self._emit(node, _id(128), b"")

    def flush_pending(self) -> None:
        """At the end: spans whose parent never came (it was open at the stop)."""
        for group in list(self.pending):
            self._flush_group(group)

    def take(self) -> tuple[list[SpanItem | FlatSpans], list[LogItem]]:
        spans, logs = self.spans, self.logs
        self.spans, self.logs, self.nspans = [], [], 0
        return spans, logs

    def metric(self, snap: AggSnapshot) -> m.Metric:
        """One aggregation snapshot as a Metric, a data point per row."""
        end = int(snap.interval_end * 1e9)
        every = self.every.get(snap.output)
        cumulative = every is None
        start = self.started_ns if cumulative or snap.interval_start is None else \
            int(snap.interval_start * 1e9)
        temporality = (m.AGGREGATION_TEMPORALITY_CUMULATIVE if cumulative
                       else m.AGGREGATION_TEMPORALITY_DELTA)
        metric = m.Metric(name=snap.output, unit=snap.unit or "",
                          description=f"{snap.kind} of {snap.value_label}")

        def common(row: AggRow) -> dict[str, Any]:
            return {"attributes": key_values(row.key), "start_time_unix_nano": start,
                    "time_unix_nano": end}

        if snap.kind in ("count", "sum"):
            metric.sum.aggregation_temporality = temporality
            metric.sum.is_monotonic = snap.kind == "count"
            for row in snap.rows:
                value = row.count if snap.kind == "count" else row.sum
                metric.sum.data_points.append(m.NumberDataPoint(as_int=value or 0,
                                                                **common(row)))
        elif snap.kind in ("min", "max", "avg"):
            for row in snap.rows:
                value = getattr(row, snap.kind)
                point = (m.NumberDataPoint(as_double=float(value or 0), **common(row))
                         if snap.kind == "avg" else
                         m.NumberDataPoint(as_int=int(value or 0), **common(row)))
                metric.gauge.data_points.append(point)
        else:
            metric.histogram.aggregation_temporality = temporality
            lhist = self.lhist.get(snap.output)
            for row in snap.rows:
                bounds, counts = histogram_buckets(row.buckets or (), lhist)
                point = m.HistogramDataPoint(count=sum(counts), bucket_counts=counts,
                                             explicit_bounds=bounds, **common(row))
                if row.sum is not None:
                    point.sum = row.sum
                metric.histogram.data_points.append(point)
        return metric


def log2_bounds() -> list[float]:
    """hist: bucket k (1..64) holds [2**(k-1), 2**k), bucket 0 holds 0: bounds 2**k - 1."""
    return [float((1 << k) - 1) for k in range(64)]


def lhist_bounds(lo: int, hi: int, step: int) -> list[float]:
    """lhist: underflow (< lo), then [lo + (i-1)*step, min(lo + i*step, hi)), overflow."""
    n = -(-(hi - lo) // step)
    return [float(lo - 1)] + [float(min(lo + i * step, hi) - 1) for i in range(1, n + 1)]


def histogram_buckets(buckets: Sequence[Bucket], lhist: tuple[int, int, int] | None
                      ) -> tuple[list[float], list[int]]:
    """(explicit_bounds, bucket_counts) of a row's dense buckets (records.py)."""
    if lhist is None:
        bounds = log2_bounds()
        counts = [0] * (len(bounds) + 1)
        for b in buckets:
            counts[(b.low or 0).bit_length()] += b.count
        return bounds, counts
    lo, hi, step = lhist
    bounds = lhist_bounds(lo, hi, step)
    counts = [0] * (len(bounds) + 1)
    for b in buckets:
        if b.low is None:
            index = 0
        elif b.high is None:
            index = len(bounds)
        else:
            index = (b.low - lo) // step + 1
        counts[index] += b.count
    return bounds, counts
