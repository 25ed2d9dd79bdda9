"""What the runtime hands to the output views: print records, aggregation snapshots,
and the pure helpers both sides share (bucket bounds, top-N, timestamps).

Contract (the runtime decoder produces these, `planrunner/output/` consumes them):

- A *print record* is a plain ``dict[str, object]`` whose keys come in this order:
  ``time`` (ISO 8601 UTC with microseconds, ``"2026-12-03T02:41:07.123456Z"``, see
  `iso_utc_ns`), ``ts_ns`` (monotonic ns), ``pid``, ``tid``, ``comm``, ``probe`` (the
  plan probe's name), ``output`` (the output's name), then the output's field keys in
  plan order (int, str, bool, or None for a NULL/unreadable string), and, only when a
  string was cut at its size, ``truncated: [keys...]``; only when the kernel could not
  read a string and the runtime read it later from the live process,
  ``reread: [keys...]``. Strings are already decoded
  (utf-8, errors="backslashreplace").
- `PrintSchema` describes the columns of one ``print`` output (known before any record).
- `AggSnapshot` is one reading of one aggregation map: its rows are already sorted and
  cut to ``top`` (`top_rows`). Histogram rows carry *dense* buckets (`log2_buckets`,
  `lhist_buckets`): every bucket from the first to the last one present, zeros included.
- `TableSnapshot` is one reading of a `table:` output: count/sum outputs joined by
  their shared keys (`join_rows`), a value per column, rows sorted and cut.
- `SnapshotSource` is how a view that serves live state (Prometheus) pulls cumulative
  snapshots and the loss counter while the session runs, without knowing the runtime.

Bucketing (the BPF C computes the index, these functions give its bounds):

- log2 (``hist``): value v is taken as an unsigned 64-bit integer; index 0 holds v == 0,
  index k (1..64) holds 2**(k-1) <= v < 2**k, i.e. ``index = 0 if v == 0 else
  1 + floor(log2(v))`` == ``v.bit_length()``. Bounds: ``[low, high)``.
- linear (``lhist`` with min, max, step; n = ceil((max - min) / step) buckets):
  index 0 is the underflow (v < min), index i in 1..n holds
  ``min + (i-1)*step <= v < min(min + i*step, max)``, index n+1 the overflow (v >= max).
  An unbounded side is ``None`` (underflow low, overflow high).

A stack value (`ustack`, `kstack` in a record or an aggregation key) is a `Stack`: its
frames innermost first (planrunner.stacks.frame.Frame: address, symbol or None, offset,
module, line, kind); `json()` is what the JSON view writes (stacks/formats.frame_dict).
A `usym(addr)` value is a `UserSymbol`: the address named as `symbol+offset` in its
module, written like one stack frame in JSON (`{"address", "symbol", "offset",
"module"}`) and as `symbol+0xoff` in text.

Pure; imports nothing of ours but the Frame type.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from planrunner.stacks.frame import Frame

# The keys every print record starts with, in order (field keys follow).
RECORD_HEAD = ("time", "ts_ns", "pid", "tid", "comm", "probe", "output")
AGG_KINDS = ("count", "sum", "min", "max", "avg", "hist", "lhist")
# The per-row statistics, in the order views print them.
STAT_KEYS = ("count", "sum", "min", "max", "avg")
LOG2_MAX_INDEX = 64


# A print record as views receive it: record key -> value (int, str, bool, None, a list
# of truncated keys...), JSON-like, so values are read as they come.
Record = dict[str, Any]


@dataclass(frozen=True, slots=True)
class PrintSchema:
    """The columns of one `print` output; `format` is its text template, if any.
    `stacks` are the fields that hold a Stack (printed under the line). `nullable` and
    `bools`, when known (None: not), the fields that may hold None and a bool: every
    other field and the head's hold neither, so a view that respells those values
    looks at these fields alone (the text view, per record)."""

    output: str
    probe: str
    fields: tuple[str, ...]
    format: str | None = None
    stacks: tuple[str, ...] = ()
    nullable: tuple[str, ...] | None = None
    bools: tuple[str, ...] | None = None


@dataclass(frozen=True, slots=True)
class Stack:
    """A symbolized call stack; `lost`: it could not be captured or unwound."""

    kind: str  # "user" | "kernel"
    frames: tuple[Frame, ...]
    lost: bool = False

    def json(self) -> list[dict[str, object]]:
        from planrunner.stacks.formats import frames_json

        return frames_json(self.frames)

    def __str__(self) -> str:
        """One line, innermost first: `inner+0x12 [fx_stack];middle+0x8 [fx_stack]`."""
        from planrunner.stacks.formats import text_line

        return ";".join(text_line(f, 0) for f in self.frames)

    def places(self) -> str:
        """One line naming each frame by its place (formats.place_name), the same for
        one stack in every process: what a metric's label must be, since a merged row
        stands for several processes whose addresses differ."""
        from planrunner.stacks.formats import place_name

        return ";".join(place_name(f) for f in self.frames)


@dataclass(frozen=True, slots=True)
class UserSymbol:
    """`usym(addr)`: a code address of a traced process named as `symbol+offset` in
    `module` (symbol None: not found; offset and module then as in a stack `Frame`).
    Two are equal when they name the same place: the address is not compared, so one
    thread start routine in two processes is one aggregation row."""

    address: int = field(compare=False)
    symbol: str | None
    offset: int
    module: str

    def json(self) -> dict[str, object]:
        return {"address": self.address, "symbol": self.symbol, "offset": self.offset,
                "module": self.module}

    def __str__(self) -> str:
        if self.symbol is None:
            return f"{self.address:#x}"
        return f"{self.symbol}+{self.offset:#x}"

    def __format__(self, spec: str) -> str:
        """An integer spec (`{start:#x}`) formats the address, any other the name."""
        if spec and spec[-1] in "bdoxXn":
            return format(self.address, spec)
        return format(str(self), spec)


@dataclass(frozen=True, slots=True)
class Bucket:
    """One histogram bucket: `low` inclusive, `high` exclusive; None = unbounded."""

    low: int | None
    high: int | None
    count: int


@dataclass(frozen=True, slots=True)
class AggRow:
    """One key of an aggregation. `key` pairs field names with values, in `by` order.
    Only the statistics the aggregation computes are set (avg may carry count too)."""

    key: tuple[tuple[str, object], ...]
    count: int | None = None
    sum: int | None = None
    min: int | None = None
    max: int | None = None
    avg: float | None = None
    buckets: tuple[Bucket, ...] | None = None

    def total(self) -> int:
        """Events seen for this key: `count`, else the sum of the buckets' counts."""
        if self.count is not None:
            return self.count
        return sum(b.count for b in self.buckets or ())


@dataclass(frozen=True, slots=True)
class AggSnapshot:
    """One reading of one aggregation output (per interval, or once at exit)."""

    output: str
    kind: str  # one of AGG_KINDS
    value_label: str  # e.g. "latency_ns", "arg2"; "count" for count
    unit: str | None  # "ns" for durations, else None
    key_fields: tuple[str, ...]
    interval_start: float | None  # unix seconds; None when cumulative from the start
    interval_end: float
    rows: tuple[AggRow, ...]
    dropped: int = 0  # updates that found the map full (their keys are missing)


@dataclass(frozen=True, slots=True)
class TableRow:
    """One key of a table: a value per column (the interval's count or sum, or that per
    second when the table has `rate: true`), and the process's command line when a
    key is `pid` (None when it could not be read)."""

    key: tuple[tuple[str, object], ...]
    values: tuple[int | float, ...]
    cmdline: str | None = None


@dataclass(frozen=True, slots=True)
class TableSnapshot:
    """One reading of a `table:` output: its joined outputs read at one moment."""

    output: str
    columns: tuple[str, ...]
    key_fields: tuple[str, ...]
    rate: bool  # values are per second over [interval_start, interval_end]
    sort: str  # the column the rows are sorted by, largest first
    interval_start: float
    interval_end: float
    rows: tuple[TableRow, ...]
    dropped: int = 0  # updates the joined outputs' full maps refused

    @property
    def has_cmdline(self) -> bool:
        return "pid" in self.key_fields


class SnapshotSource(Protocol):
    """Aggregations as they stand now, for a view that pulls them (from any thread)."""

    def cumulative(self, output: str) -> AggSnapshot:
        """Every key output `output`'s map holds now (no reset, no `top` cut), with
        `dropped` counted since the start."""
        ...

    def events_lost(self) -> int:
        """Print records the full ring buffer refused since the start."""
        ...


# -- top-N ---------------------------------------------------------------------------


def _rank(row: AggRow, kind: str) -> float:
    if kind in ("hist", "lhist"):
        return row.total()
    value = getattr(row, kind)
    return float("-inf") if value is None else value


def _key_order(row: AggRow) -> tuple[tuple[int, str, object], ...]:
    # Mixed types (str, int, None) must still sort: group by type, then by value.
    return tuple(
        (0, "", v) if isinstance(v, int) else (1, "" if v is None else str(v), 0)
        for _, v in row.key
    )


def top_rows(rows: Iterable[AggRow], kind: str, n: int | None) -> tuple[AggRow, ...]:
    """Rows sorted by the aggregation's value, largest first (for every kind, `min`
    included; histograms by their total count), ties by key; the first `n` (all if None)."""
    if kind not in AGG_KINDS:
        raise ValueError(f"unknown aggregation kind {kind!r}")
    ordered = sorted(rows, key=_key_order)
    ordered.sort(key=lambda r: _rank(r, kind), reverse=True)  # stable: ties keep key order
    return tuple(ordered if n is None else ordered[: max(n, 0)])


def join_rows(columns: Sequence[Sequence[AggRow]], seconds: float | None,
              sort: int, n: int | None) -> tuple[TableRow, ...]:
    """Rows of count/sum outputs joined by key: a value per column (its rows' counts or
    sums added, 0 where a key has none), divided by `seconds` when given (rates); sorted
    by column `sort`, largest first, ties by key; the first `n` (all if None)."""
    totals: dict[tuple[tuple[str, object], ...], list[int]] = {}
    for i, rows in enumerate(columns):
        for row in rows:
            value = row.count if row.count is not None else row.sum
            if value is None:
                continue
            totals.setdefault(row.key, [0] * len(columns))[i] += value
    if seconds is not None:
        per = 1 / seconds if seconds > 0 else 0.0
        joined = [TableRow(k, tuple(v * per for v in vals)) for k, vals in totals.items()]
    else:
        joined = [TableRow(k, tuple(vals)) for k, vals in totals.items()]
    joined.sort(key=lambda r: _key_order(AggRow(r.key)))
    joined.sort(key=lambda r: r.values[sort], reverse=True)  # stable: ties keep key order
    return tuple(joined if n is None else joined[: max(n, 0)])


# -- log2 buckets ----------------------------------------------------------------------


def log2_bucket_index(value: int) -> int:
    """The bucket of `value` (as u64): 0 for 0, else 1 + floor(log2(value))."""
    return (value & 0xFFFF_FFFF_FFFF_FFFF).bit_length()


def log2_bucket_bounds(index: int) -> tuple[int, int]:
    """`[low, high)` of log2 bucket `index`: 0 -> [0, 1); k >= 1 -> [2**(k-1), 2**k)."""
    if not 0 <= index <= LOG2_MAX_INDEX:
        raise ValueError(f"log2 bucket index {index} outside 0..{LOG2_MAX_INDEX}")
    if index == 0:
        return 0, 1
    return 1 << (index - 1), 1 << index


def log2_buckets(counts: Mapping[int, int]) -> tuple[Bucket, ...]:
    """Dense buckets from index 0 to the last index with a non-zero count
    (`counts` maps bucket index -> count; missing indexes count 0)."""
    present = [i for i, c in counts.items() if c]
    if not present:
        return ()
    if min(present) < 0:
        raise ValueError(f"log2 bucket index {min(present)} outside 0..{LOG2_MAX_INDEX}")
    return tuple(
        Bucket(*log2_bucket_bounds(i), counts.get(i, 0)) for i in range(max(present) + 1)
    )


# -- linear buckets --------------------------------------------------------------------


def lhist_bucket_count(lo: int, hi: int, step: int) -> int:
    """n, the number of in-range buckets: ceil((hi - lo) / step)."""
    if step <= 0 or hi <= lo:
        raise ValueError(f"lhist needs min < max and step > 0 (got {lo}, {hi}, {step})")
    return -((lo - hi) // step)


def lhist_bucket_index(value: int, lo: int, hi: int, step: int) -> int:
    """0 below `lo`, n+1 at or above `hi`, else 1 + (value - lo) // step."""
    if value < lo:
        return 0
    if value >= hi:
        return lhist_bucket_count(lo, hi, step) + 1
    return 1 + (value - lo) // step


def lhist_bucket_bounds(index: int, lo: int, hi: int, step: int) -> tuple[int | None, int | None]:
    """`[low, high)` of linear bucket `index` (see the module docstring); None = unbounded."""
    n = lhist_bucket_count(lo, hi, step)
    if index == 0:
        return None, lo
    if index == n + 1:
        return hi, None
    if not 1 <= index <= n:
        raise ValueError(f"lhist bucket index {index} outside 0..{n + 1}")
    return lo + (index - 1) * step, min(lo + index * step, hi)


def lhist_buckets(counts: Mapping[int, int] | Sequence[int], lo: int, hi: int,
                  step: int) -> tuple[Bucket, ...]:
    """All n+2 buckets (underflow, in-range, overflow) from index -> count."""
    if not isinstance(counts, Mapping):
        counts = dict(enumerate(counts))
    n = lhist_bucket_count(lo, hi, step)
    stray = [i for i, c in counts.items() if c and not 0 <= i <= n + 1]
    if stray:  # a count the bounds cannot place: the BPF side disagrees with min/max/step
        raise ValueError(f"lhist bucket index {stray[0]} outside 0..{n + 1}")
    return tuple(
        Bucket(*lhist_bucket_bounds(i, lo, hi, step), counts.get(i, 0)) for i in range(n + 2)
    )


# -- time ------------------------------------------------------------------------------


def iso_utc_ns(unix_ns: int) -> str:
    """`"2026-12-03T02:41:07.123456Z"` from nanoseconds since the epoch (truncated to µs)."""
    secs, ns = divmod(unix_ns, 1_000_000_000)
    from datetime import UTC, datetime  # noqa: PLC0415 - at the first timestamp shown

    base = datetime.fromtimestamp(secs, UTC).strftime("%Y-%m-%dT%H:%M:%S")
    return f"{base}.{ns // 1000:06d}Z"


def iso_utc(unix_seconds: float) -> str:
    """The same format from float seconds (interval bounds)."""
    return iso_utc_ns(round(unix_seconds * 1_000_000) * 1000)
