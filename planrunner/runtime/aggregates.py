"""Reading in-kernel aggregation maps into AggSnapshots (per interval or at exit).

Contract: the maps are those of render/aggregates.py (per-CPU hashes keyed by
`k0, k1, ...` and, for histograms, `slot`), read through a MapSource
(runtime/backend.py: the backend, or a test's fake). The reader

- reads a map whole (`read_map`; with delete for `every:` outputs, so that each entry
  is returned and deleted together: the bcc backend does it in one batch syscall);
- sums the per-CPU slots (count, sum, avg, buckets) or combines them (min/max over the
  CPUs whose slot saw a value), decodes keys to `((name, value), ...)` in `by` order
  (strings utf-8 with backslashreplace, up to the NUL; bools as bool);
- builds AggRows, sorts and cuts them with `top_rows`, and hands one AggSnapshot per
  output to `view.aggregate`;
- for a `table:` (render/model.py AggTable), reads the maps it joins at one moment
  (on the table's `every:`; the joined outputs never print on their own), joins their
  rows by key (records.join_rows: per second over the interval with `rate`), adds the
  command line of a `pid` key (runtime/cmdlines.py: once per pid) and hands one
  TableSnapshot to `view.table`.

Time: an `every: D` output prints and resets each D (checked on every `tick`, about
every 50 ms), with `interval_start`/`interval_end` the unix times of the interval;
`finish` prints the last, partial interval if it saw anything. Without `every` the
output prints once, at `finish`, with `interval_start = None` (cumulative since the
start). An update that lands between the batch's read of an entry and its deletion
(the kernel deletes right after copying) is lost with the interval: a narrow race of one
update per key per interval at most, accepted instead of swapping maps.

`dropped` is the number of updates refused because the map was full during the
interval (from the per-output counter; the session prints the total on stderr). The C
counts each such update in the program's LOST_MAPFULL counter too: while that is 0, no
per-output counter is read (a stop of 3000 outputs would read 3000 maps of zeros).

Keys are unpacked from their bytes by the map's KeyLayout (render/layout.py), which
render/aggregates.py made and declared the C struct from: no member is read by name.
Stacks: a stack key member is an id or a hash (render/aggregates.py key_layout), turned
into a `Stack` by runtime/stacks.py (user stacks with the process of the hidden `_pid`
member, cut to the key's frames); rows whose keys are equal after that (one stack
in two processes, two copies that unwind alike) are merged. A `usym` key member is an
address named in the process of its `_pid` member (a `UserSymbol`): one symbol in two
processes is one row.

`AggregateReader` is also the SnapshotSource (records.py) a live view pulls from.
Imports records.py, output/base.py, render/model.py, runtime/backend.py and
runtime/stacks.py only.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from typing import Any, cast

from planrunner.output.base import View
from planrunner.records import (
    AggRow,
    AggSnapshot,
    TableRow,
    TableSnapshot,
    join_rows,
    lhist_buckets,
    log2_buckets,
    top_rows,
)
from planrunner.render.layout import KeyField, KeyLayout
from planrunner.render.model import AggregateOutput, AggTable, Counter, RenderedProgram
from planrunner.runtime.backend import MapSource
from planrunner.runtime.cmdlines import Cmdlines
from planrunner.runtime.stacks import StackResolver

_MASK64 = (1 << 64) - 1
RowKey = tuple[tuple[str, object], ...]  # a row's `by` values, named, in order


def _wrap(value: int, signed: bool) -> int:
    """A Python integer reduced to the map's 64-bit value type (C's wrap-around)."""
    value &= _MASK64
    return value - (1 << 64) if signed and value >> 63 else value


def decode_key(key: Any, layout: KeyLayout, stacks: StackResolver | None = None,
               program: RenderedProgram | None = None) -> RowKey:
    """The `by` values of a key (a ctypes struct or its bytes), named and in order."""
    return _named(layout, layout.unpacker()(bytes(key))[0], stacks, program)


def _named(layout: KeyLayout, values: tuple[tuple[object, int], ...],
           stacks: StackResolver | None, program: RenderedProgram | None) -> RowKey:
    """The `by` values of a key unpacked by its layout, named and in order."""
    out: list[tuple[str, object]] = []
    for field, (raw, pid) in zip(layout.fields, values, strict=True):
        if field.stack:
            out.append((field.key, _stack(field, int(cast(int, raw)), pid, stacks, program)))
        elif field.kind == "usym":  # an address of the key's process
            resolver = stacks or StackResolver(None)
            out.append((field.key, resolver.user_symbol(pid, int(cast(int, raw)))))
        elif field.kind == "str":
            data = cast(bytes, raw)
            out.append((field.key,
                        data.split(b"\0", 1)[0].decode("utf-8", "backslashreplace")))
        elif field.kind == "bool":
            out.append((field.key, bool(raw)))
        else:
            out.append((field.key, int(cast(int, raw))))
    return tuple(out)


def _stack(field: KeyField, raw: int, pid: int, stacks: StackResolver | None,
           program: RenderedProgram | None) -> object:
    resolver = stacks or StackResolver(None)
    maps = program.stack_maps if program else None
    if field.kind == "kstack":
        return resolver.kernel(maps.kernel[0] if maps and maps.kernel else "", raw,
                               field.limit)
    if field.kind == "ustack":
        return resolver.user_ids(maps.user[0] if maps and maps.user else "", pid, raw,
                                 field.limit)
    return resolver.user_hash(raw, field.limit, field.unwind)


def _cpu_values(value: Any) -> list[Any]:
    """A per-CPU value as a list of slots (bcc gives a ctypes array)."""
    try:
        return list(value)
    except TypeError:
        return [value]


def build_rows(agg: AggregateOutput, items: Iterable[tuple[Any, Any]],
               stacks: StackResolver | None = None,
               program: RenderedProgram | None = None) -> list[AggRow]:
    """AggRows from (key, per-CPU value) pairs of one map (not yet sorted or cut); keys
    equal once decoded (stacks) are one row."""
    kind = agg.kind
    unpack = agg.key.unpacker()
    if kind in ("hist", "lhist"):
        buckets: dict[RowKey, dict[int, int]] = defaultdict(dict)
        sums: dict[RowKey, int] = defaultdict(int)
        for key, value in items:
            cpus = _cpu_values(value)
            total = sum(int(c.n) for c in cpus)
            if total:
                values, slot = unpack(bytes(key))
                k = _named(agg.key, values, stacks, program)
                slots = buckets[k]
                slots[slot] = slots.get(slot, 0) + total
                sums[k] += sum(int(c.sum) for c in cpus)
        signed = agg.value_signed
        if kind == "hist":
            return [AggRow(k, sum=_wrap(sums[k], signed), buckets=log2_buckets(c))
                    for k, c in buckets.items()]
        assert agg.lhist is not None
        return [AggRow(k, sum=_wrap(sums[k], signed), buckets=lhist_buckets(c, *agg.lhist))
                for k, c in buckets.items()]
    merged: dict[tuple[tuple[str, object], ...], list[Any]] = {}
    for key, value in items:
        merged.setdefault(_named(agg.key, unpack(bytes(key))[0], stacks, program),
                          []).extend(_cpu_values(value))
    rows = []
    for k, cpus in merged.items():
        row = _stat_row(agg, k, cpus)
        if row is not None:
            rows.append(row)
    return rows


def _stat_row(agg: AggregateOutput, key: tuple[tuple[str, object], ...],
              cpus: list[Any]) -> AggRow | None:
    signed = agg.value_signed
    if agg.kind == "count":
        # wrapped: an open output's CPUs may each hold a share below 0 (a begin added
        # on one CPU, its end taken off on another)
        n = _wrap(sum(int(v) for v in cpus), False)
        return AggRow(key, count=n) if n else None
    if agg.kind == "sum":
        total = _wrap(sum(int(v) for v in cpus), signed)
        return None if agg.gauge and not total else AggRow(key, sum=total)
    seen = [c for c in cpus if c.n]
    if not seen:
        return None
    if agg.kind == "avg":
        n = sum(int(c.n) for c in seen)
        total = _wrap(sum(int(c.sum) for c in seen), signed)
        return AggRow(key, count=n, avg=total / n)
    values = [int(c.v) for c in seen]
    if agg.kind == "min":
        return AggRow(key, min=min(values))
    return AggRow(key, max=max(values))


def _emit_order(program: RenderedProgram) -> list[AggregateOutput | AggTable]:
    """What prints, in plan order: each aggregation not joined by a table, and each
    table where its first joined output is (a table with none rendered: at the end)."""
    tables = {t.name: t for t in program.tables}
    order: list[AggregateOutput | AggTable] = []
    for agg in program.aggregates:
        if agg.table is None:
            order.append(agg)
        elif agg.table in tables:
            order.append(tables.pop(agg.table))
    return order + list(tables.values())


class AggregateReader:
    def __init__(self, program: RenderedProgram, maps: MapSource,
                 clock: Callable[[], float] = time.time,
                 monotonic: Callable[[], float] = time.monotonic,
                 reset: bool = True,
                 cmdline: Callable[[int], str | None] | None = None,
                 stacks: StackResolver | None = None,
                 since: float | None = None) -> None:
        # since: when tracing began (the first interval's start), if before now.
        # reset=False (a live view runs): maps are never cleared, `every:` outputs print
        # once at exit like the others, so what the live view serves only grows.
        self.program = program
        self.maps = maps
        self.stacks = stacks
        self.clock, self.monotonic = clock, monotonic
        self.cmdline = cmdline if cmdline is not None else Cmdlines()
        now, mono = clock(), monotonic()
        if since is not None:
            now = min(now, since)
        self._start = now
        self._by_name = {agg.name: agg for agg in program.aggregates}
        self._interval_start: dict[str, float] = {}
        self._due: dict[str, float] = {}
        self._lost_seen: dict[str, int] = {}
        self._any_lost = False  # LOST_MAPFULL seen above 0 (it only grows)
        self._expire_due = monotonic() + 1.0
        # how the copied stacks of aggregation keys are unwound
        self._copy_modes = sorted({f.unwind for agg in program.aggregates
                                   for f in agg.key.fields if f.kind == "ucopy"})
        self._order = _emit_order(program)
        for agg in program.aggregates:
            self._interval_start[agg.name] = now
            self._lost_seen[agg.name] = 0
            if agg.every_ns and reset and agg.table is None:
                self._due[agg.name] = mono + agg.every_ns / 1e9
        for table in program.tables:
            self._interval_start[table.name] = now
            if table.every_ns and reset:
                self._due[table.name] = mono + table.every_ns / 1e9

    def tick(self, view: View) -> None:
        """Print and reset the aggregations and tables whose interval has elapsed."""
        self.drain_stacks()
        mono = self.monotonic()
        checked = False
        for item in self._order:
            due = self._due.get(item.name)
            if due is None or mono < due or item.every_ns is None:
                continue
            if not checked:  # a turn that prints nothing reads no counter
                self._check_full()
                checked = True
            step = item.every_ns / 1e9
            # Late by more than an interval (a stalled loop): restart the cadence.
            self._due[item.name] = due + step if mono < due + step else mono + step
            self._emit(item, view, force=True)
        view.flush()

    def next_due(self) -> float | None:
        """When `tick` has something to do next (monotonic): an `every:` print, or the
        stale pids' expiry; None when nothing is ever due (a loop that sleeps until
        then: runtime/loop_wait.py)."""
        due = list(self._due.values())
        if self.program.stack_maps.seen and self.stacks is not None:
            due.append(self._expire_due)
        return min(due) if due else None

    def finish(self, view: View) -> None:
        """Print what the aggregations and tables hold at the end of the run."""
        self.write(self.final(), view)

    def final(self) -> list[AggSnapshot | TableSnapshot]:
        """What `finish` prints, computed first: unwinding and symbolizing the stacks of
        a long run take seconds, which the session does not count as the output's time
        to write (a write blocked past a stop is abandoned)."""
        self.drain_stacks()
        self._check_full()  # after the detach: every refused update is counted by now
        out: list[AggSnapshot | TableSnapshot] = []
        for item in self._order:
            force = item.name not in self._due
            snap = self.table_snapshot(item) if isinstance(item, AggTable) else \
                self.snapshot(item)
            if force or snap.rows or snap.dropped:
                out.append(snap)
        return out

    @staticmethod
    def write(snaps: Sequence[AggSnapshot | TableSnapshot], view: View) -> None:
        for snap in snaps:
            if isinstance(snap, TableSnapshot):
                view.table(snap)
            else:
                view.aggregate(snap)

    def drain_stacks(self) -> None:
        """Take the user stack copies BPF left since the last turn, and every second
        let the BPF side announce again the pids of processes that are gone
        (runtime/stacks.py)."""
        maps, stacks = self.program.stack_maps, self.stacks
        if stacks is None:
            return
        if maps.copies:
            stacks.drain(maps, self._copy_modes)
            if stacks.over_budget():
                stacks.compact(maps, self._copied_stack_hashes)
        if maps.seen and self.monotonic() >= self._expire_due:
            self._expire_due = self.monotonic() + 1.0
            stacks.expire(maps.seen)

    def _copied_stack_hashes(self) -> set[int]:
        """The copied user stacks' hashes the aggregation maps' keys hold now."""
        out: set[int] = set()
        for agg in self.program.aggregates:
            at = [i for i, f in enumerate(agg.key.fields) if f.kind == "ucopy"]
            if not at:
                continue
            unpack = agg.key.unpacker()
            for key, _ in self.maps.read_map(agg.map_name, delete=False):
                values = unpack(bytes(key))[0]
                out.update(int(cast(int, values[i][0])) & _MASK64 for i in at)
        return out

    def snapshot(self, agg: AggregateOutput) -> AggSnapshot:
        """Read (and for `every:` outputs reset) one map now."""
        every = agg.name in self._due
        items = self.maps.read_map(agg.map_name, delete=every and not agg.gauge)
        end = self.clock()
        start = self._interval_start[agg.name] if every else self._start
        self._interval_start[agg.name] = end
        rows = top_rows(build_rows(agg, items, self.stacks, self.program), agg.kind, agg.top)
        return AggSnapshot(
            output=agg.name, kind=agg.kind, value_label=agg.value_label, unit=agg.unit,
            key_fields=agg.key.names, interval_start=start,
            interval_end=end, rows=rows, dropped=self._dropped(agg))

    # --- SnapshotSource (records.py) ------------------------------------------------

    def cumulative(self, output: str) -> AggSnapshot:
        """Every key output `output`'s map holds now (no reset, no `top` cut) with
        `dropped` since the start. Changes no state: safe from another thread (a live
        view serving scrapes)."""
        agg = self._by_name[output]
        self._check_full()
        items = self.maps.read_map(agg.map_name, delete=False)
        if self.stacks is None:
            rows = tuple(build_rows(agg, items, None, self.program))
        else:
            with self.stacks.lock:  # the session's loop uses the same resolver
                self.drain_stacks()  # the copies of the keys just read (else: lost)
                rows = tuple(build_rows(agg, items, self.stacks, self.program))
        return AggSnapshot(
            output=agg.name, kind=agg.kind, value_label=agg.value_label, unit=agg.unit,
            key_fields=agg.key.names, interval_start=self._start,
            interval_end=self.clock(), rows=rows, dropped=self._lost_total(agg))

    def events_lost(self) -> int:
        return self.maps.counter(Counter.LOST_RINGBUF)

    # --------------------------------------------------------------------------------

    def table_snapshot(self, table: AggTable) -> TableSnapshot:
        """Read (and for `every:` tables reset) the maps a table joins, one after the
        other (a few microseconds apart), and join their rows by key."""
        every = table.name in self._due
        columns: list[list[AggRow]] = []
        dropped = 0
        for _, outputs in table.columns:
            rows: list[AggRow] = []
            for name in outputs:
                agg = self._by_name[name]
                rows += build_rows(agg, self.maps.read_map(agg.map_name,
                                                           delete=every and not agg.gauge))
                dropped += self._dropped(agg)
            columns.append(rows)
        end = self.clock()
        start = self._interval_start[table.name] if every else self._start
        self._interval_start[table.name] = end
        names = tuple(c for c, _ in table.columns)
        joined = join_rows(columns, end - start if table.rate else None,
                           names.index(table.sort), table.top)
        if "pid" in table.key_fields:
            joined = tuple(self._with_cmdline(r) for r in joined)
        return TableSnapshot(
            output=table.name, columns=names, key_fields=table.key_fields, rate=table.rate,
            sort=table.sort, interval_start=start, interval_end=end, rows=joined,
            dropped=dropped)

    def _with_cmdline(self, row: TableRow) -> TableRow:
        pid = dict(row.key)["pid"]
        return TableRow(row.key, row.values,
                        self.cmdline(pid) if isinstance(pid, int) else None)

    def _emit(self, item: AggregateOutput | AggTable, view: View, force: bool) -> None:
        if isinstance(item, AggTable):
            table = self.table_snapshot(item)
            if force or table.rows or table.dropped:
                view.table(table)
            return
        snap = self.snapshot(item)
        if force or snap.rows or snap.dropped:
            view.aggregate(snap)

    def _dropped(self, agg: AggregateOutput) -> int:
        """Updates refused since the last snapshot (the kernel counter only grows)."""
        total = self._lost_total(agg)
        new = total - self._lost_seen[agg.name]
        self._lost_seen[agg.name] = total
        return new

    def _lost_total(self, agg: AggregateOutput) -> int:
        if not agg.lost_map or not self._any_lost:
            return 0
        return self.maps.map_total(agg.lost_map)

    def _check_full(self) -> None:
        """Whether some update was refused by a full map since the start (every
        per-output counter is 0 until then): one counter read per pass over the outputs
        instead of a map per output. An update refused during a pass is counted in the
        next one's interval."""
        if not self._any_lost:
            self._any_lost = self.maps.counter(Counter.LOST_MAPFULL) > 0
