"""runtime/aggregates.py without the kernel: keys and per-CPU values built as the ctypes
objects bcc hands back for the maps render/aggregates.py declares, and the reader's
interval bookkeeping driven by an explicit clock over in-memory tables.
(The same code against real maps: tests/e2e/test_aggregations.py.)"""

from __future__ import annotations

import ctypes as ct

import pytest

from planrunner.records import AggSnapshot, Bucket, Stack
from planrunner.render.layout import KeyField, KeyLayout
from planrunner.render.model import AggregateOutput, Counter, RenderedProgram
from planrunner.runtime.aggregates import AggregateReader, build_rows, decode_key
from planrunner.runtime.backend import MapItems
from planrunner.runtime.stacks import StackResolver
from planrunner.stacks.frame import Frame

NCPU = 2


class Key(ct.Structure):
    _fields_ = [("k0", ct.c_int64), ("k1", ct.c_char * 16), ("k2", ct.c_uint64)]


class HistKey(ct.Structure):
    _fields_ = [("k0", ct.c_int64), ("slot", ct.c_uint64)]


class SlotKey(ct.Structure):  # a histogram's without `by`
    _fields_ = [("slot", ct.c_uint64)]


class NoKey(ct.Structure):
    _fields_ = [("pr_none", ct.c_uint64)]


class MinMax(ct.Structure):
    _fields_ = [("n", ct.c_uint64), ("v", ct.c_int64)]


class Avg(ct.Structure):  # also the value of a histogram's (key, slot)
    _fields_ = [("n", ct.c_uint64), ("sum", ct.c_int64)]


FIELDS = KeyLayout((KeyField("id", "int"), KeyField("name", "str", size=16),
                    KeyField("flag", "bool")))


def agg(kind: str, **kw) -> AggregateOutput:  # type: ignore[no-untyped-def]
    base = dict(name="o", probe="p", kind=kind, map_name="pr_agg_0", key=FIELDS,
                value_label="arg1", unit=None, every_ns=None, top=None, lhist=None,
                map_size=100, lost_map="pr_agg_0_lost")
    base.update(kw)
    return AggregateOutput(**base)  # type: ignore[arg-type]


def per_cpu(ctype, *values):  # type: ignore[no-untyped-def]
    return (ctype * NCPU)(*values)


def test_keys_decode_in_by_order_with_their_types() -> None:
    key = Key(-5, b"caf\xc3\xa9\xff", 1)
    assert decode_key(key, FIELDS) == (("id", -5), ("name", "café\\xff"), ("flag", True))


def test_count_sums_cpus_and_skips_empty_keys() -> None:
    items = [(Key(1, b"a", 0), per_cpu(ct.c_uint64, 3, 4)),
             (Key(2, b"b", 0), per_cpu(ct.c_uint64, 0, 0))]
    (row,) = build_rows(agg("count"), items)
    assert (row.key, row.count) == ((("id", 1), ("name", "a"), ("flag", False)), 7)


def test_sum_wraps_like_the_kernel_in_its_value_type() -> None:
    big = (1 << 63) - 1
    rows = build_rows(agg("sum"), [(Key(1, b"", 0), per_cpu(ct.c_int64, big, 1))])
    assert rows[0].sum == -(1 << 63)
    rows = build_rows(agg("sum", value_signed=False),
                      [(Key(1, b"", 0), per_cpu(ct.c_uint64, big, 1))])
    assert rows[0].sum == 1 << 63


def test_min_max_ignore_cpus_that_saw_nothing() -> None:
    """A CPU's slot is zero until that CPU sees the key: n == 0 means "no value", so a
    real minimum of 5 is not hidden by the 0 of an idle CPU."""
    items = [(Key(1, b"", 0), per_cpu(MinMax, MinMax(0, 0), MinMax(2, 5)))]
    assert build_rows(agg("min"), items)[0].min == 5
    items = [(Key(1, b"", 0), per_cpu(MinMax, MinMax(1, -9), MinMax(2, -7)))]
    assert build_rows(agg("max"), items)[0].max == -7
    assert build_rows(agg("min"), items)[0].min == -9


def test_avg_carries_count_and_the_mean() -> None:
    items = [(Key(1, b"", 0), per_cpu(Avg, Avg(3, 6), Avg(1, 10)))]
    (row,) = build_rows(agg("avg"), items)
    assert (row.count, row.avg, row.sum) == (4, 4.0, None)


def test_hist_rows_gather_slots_per_key_into_dense_buckets() -> None:
    a = agg("hist", key=KeyLayout((KeyField("id", "int"),), slot=True))
    items = [(HistKey(7, 3), per_cpu(Avg, Avg(1, 5), Avg(1, 6))),
             (HistKey(7, 1), per_cpu(Avg, Avg(0, 0), Avg(5, 5))),
             (HistKey(8, 0), per_cpu(Avg, Avg(1, 0), Avg(0, 0)))]
    rows = {r.key: r for r in build_rows(a, items)}
    assert rows[(("id", 7),)].buckets == (Bucket(0, 1, 0), Bucket(1, 2, 5), Bucket(2, 4, 0),
                                          Bucket(4, 8, 2))
    assert rows[(("id", 7),)].sum == 16
    assert rows[(("id", 8),)].buckets == (Bucket(0, 1, 1),)


def test_lhist_rows_have_every_bucket_with_open_ends() -> None:
    a = agg("lhist", key=KeyLayout(slot=True), lhist=(0, 20, 10))
    items = [(SlotKey(0), per_cpu(Avg, Avg(2, -7), Avg(0, 0))),
             (SlotKey(3), per_cpu(Avg, Avg(1, 20), Avg(1, 25)))]
    (row,) = build_rows(a, items)
    assert (row.key, row.sum) == ((), 38)
    assert row.buckets == (Bucket(None, 0, 2), Bucket(0, 10, 0), Bucket(10, 20, 0),
                           Bucket(20, None, 2))


class Table:
    """An in-memory stand-in for a bcc table, with or without batch support."""

    def __init__(self, items=(), batch=True) -> None:  # type: ignore[no-untyped-def]
        self.items_ = list(items)
        self.batch = batch
        self.calls: list[str] = []

    def items_lookup_batch(self):  # type: ignore[no-untyped-def]
        self.calls.append("lookup_batch")
        if not self.batch:
            raise Exception("BPF_MAP_LOOKUP_BATCH has failed: Invalid argument")
        yield from self.items_

    def items_lookup_and_delete_batch(self):  # type: ignore[no-untyped-def]
        self.calls.append("delete_batch")
        if not self.batch:
            raise Exception("BPF_MAP_LOOKUP_AND_DELETE_BATCH has failed")
        items, self.items_ = self.items_, []
        yield from items

    def items(self):  # type: ignore[no-untyped-def]
        self.calls.append("items")
        return list(self.items_)

    def clear(self) -> None:
        self.calls.append("clear")
        self.items_ = []


class Prog:
    """A MapSource over in-memory tables; its LOST_MAPFULL counter is the sum of the
    lost maps, as the C counts both (render/aggregates.py)."""

    def __init__(self, tables: dict[str, Table]) -> None:
        self.tables = tables

    def read_map(self, name: str, delete: bool) -> MapItems:
        table = self.tables[name]
        if delete:
            return list(table.items_lookup_and_delete_batch())
        return list(table.items_lookup_batch())

    def map_total(self, name: str) -> int:
        return sum(sum(int(v) for v in value) for _k, value in self.tables[name].items())

    def counter(self, which: Counter) -> int:
        if which is not Counter.LOST_MAPFULL:
            return 0
        return sum(self.map_total(name) for name in self.tables if name.endswith("_lost"))


class View:
    def __init__(self) -> None:
        self.snaps: list[AggSnapshot] = []

    def aggregate(self, snap: AggSnapshot) -> None:
        self.snaps.append(snap)

    def flush(self) -> None:
        pass


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def _reader(aggs, tables):  # type: ignore[no-untyped-def]
    clock = Clock()
    program = RenderedProgram("", (), (), tuple(aggs), "plan")
    reader = AggregateReader(program, Prog(tables), clock=clock, monotonic=clock)
    return reader, clock


def _lost(n: int) -> Table:
    return Table([(0, per_cpu(ct.c_uint64, n, 0))])


def test_intervals_print_and_reset_with_their_bounds() -> None:
    a = agg("count", key=KeyLayout(), every_ns=1_000_000_000)
    counts = Table()
    reader, clock = _reader([a], {"pr_agg_0": counts, "pr_agg_0_lost": _lost(0)})
    view = View()
    counts.items_ = [(NoKey(0), per_cpu(ct.c_uint64, 2, 1))]
    clock.t += 0.5
    reader.tick(view)
    assert view.snaps == []  # not due yet
    clock.t += 0.6
    reader.tick(view)
    clock.t += 1.0
    reader.tick(view)  # an interval without events still prints (text: "(no events)")
    counts.items_ = [(NoKey(0), per_cpu(ct.c_uint64, 0, 4))]
    clock.t += 0.3
    reader.finish(view)  # the partial last interval
    assert [(s.interval_start, s.interval_end, [r.count for r in s.rows]) for s in view.snaps] \
        == [(1000.0, 1001.1, [3]), (1001.1, 1002.1, []), (1002.1, 1002.4, [4])]
    assert counts.calls == ["delete_batch"] * 3


def test_without_every_one_cumulative_snapshot_at_finish_with_top_and_dropped() -> None:
    a = agg("count", key=KeyLayout((KeyField("id", "int"),)), top=2)
    rows = [(HistKey(k, 0), per_cpu(ct.c_uint64, k, 0)) for k in (1, 5, 3)]

    class K(ct.Structure):
        _fields_ = [("k0", ct.c_int64)]

    table = Table([(K(k.k0), v) for k, v in rows])
    reader, clock = _reader([a], {"pr_agg_0": table, "pr_agg_0_lost": _lost(7)})
    view = View()
    reader.tick(view)
    assert view.snaps == []
    clock.t += 3
    reader.finish(view)
    (snap,) = view.snaps
    # no `every`: the interval is the run, from its start to the end
    assert (snap.interval_start, snap.interval_end, snap.dropped) == (1000.0, 1003.0, 7)
    assert [(r.key, r.count) for r in snap.rows] == [((("id", 5),), 5), ((("id", 3),), 3)]
    assert table.calls == ["lookup_batch"]


def test_dropped_is_per_interval() -> None:
    a = agg("count", key=KeyLayout(), every_ns=1_000_000_000)
    lost = _lost(4)
    reader, clock = _reader([a], {"pr_agg_0": Table(), "pr_agg_0_lost": lost})
    view = View()
    clock.t += 1.0
    reader.tick(view)
    lost.items_ = [(0, per_cpu(ct.c_uint64, 4, 2))]
    clock.t += 1.0
    reader.tick(view)
    reader.finish(view)  # nothing new: the empty partial interval is not printed
    assert [s.dropped for s in view.snaps] == [4, 2]


def test_a_turn_that_prints_nothing_reads_no_counter() -> None:
    """The loop ticks ~20 times a second: only a turn with an interval due (and the
    end) asks the kernel whether some update was refused (issue 28 item 5)."""
    a = agg("count", key=KeyLayout(), every_ns=1_000_000_000)
    lost = _lost(3)
    reader, clock = _reader([a], {"pr_agg_0": Table(), "pr_agg_0_lost": lost})
    prog = reader.maps
    asked: list[Counter] = []
    real = prog.counter
    prog.counter = lambda which: asked.append(which) or real(which)  # type: ignore[method-assign]
    view = View()
    for _ in range(5):
        clock.t += 0.1
        reader.tick(view)
    assert asked == [] and view.snaps == []
    clock.t += 0.6
    reader.tick(view)
    assert asked == [Counter.LOST_MAPFULL] and [s.dropped for s in view.snaps] == [3]
    reader.finish(view)  # (the loss is known by now: no counter read again)
    assert asked == [Counter.LOST_MAPFULL] and [s.dropped for s in view.snaps] == [3]


@pytest.mark.parametrize("late", [0.0, 2.5])
def test_a_stalled_loop_does_not_print_a_burst_of_empty_intervals(late: float) -> None:
    a = agg("count", key=KeyLayout(), every_ns=1_000_000_000)
    reader, clock = _reader([a], {"pr_agg_0": Table(), "pr_agg_0_lost": _lost(0)})
    view = View()
    clock.t += 1.0 + late
    reader.tick(view)
    reader.tick(view)
    assert len(view.snaps) == 1


def test_the_run_interval_starts_when_tracing_began_not_when_the_reader_was_built() -> None:
    # the reader is built once tracing runs (its modules load after "Tracing"): events of
    # that gap belong to the first interval, which starts when tracing began
    a = agg("count", key=KeyLayout())
    clock = Clock()
    program = RenderedProgram("", (), (), (a,), "plan")
    table = Table([(NoKey(0), per_cpu(ct.c_uint64, 1, 0))])
    reader = AggregateReader(program, Prog({"pr_agg_0": table, "pr_agg_0_lost": _lost(0)}),
                             clock=clock, monotonic=clock, since=999.75)
    view = View()
    clock.t += 1
    reader.finish(view)
    (snap,) = view.snaps
    assert (snap.interval_start, snap.interval_end) == (999.75, 1001.0)


class StackKey(ct.Structure):
    _fields_ = [("k0", ct.c_int64), ("k0_pid", ct.c_uint32)]


class StackHistKey(ct.Structure):
    _fields_ = [("k0", ct.c_int64), ("k0_pid", ct.c_uint32), ("slot", ct.c_uint64)]


class AslrStacks(StackResolver):
    """One stack (inner <- main of /bin/fx) in every process, loaded at a base of its
    own: the addresses differ by process, the places do not."""

    def __init__(self) -> None:
        super().__init__(None)

    def user_ids(self, map_name: str, pid: int, stack_id: int, limit: int,
                 time_ns: int = 0) -> Stack:
        base = 0x5500_0000_0000 + pid * 0x1000_0000
        return Stack("user", (Frame(base + 0x1130, "inner", 0, "/bin/fx"),
                              Frame(base + 0x1190, "main", 0x20, "/bin/fx")))


STACK_FIELDS = KeyLayout((KeyField("ustack", "ustack", limit=64),))


@pytest.mark.parametrize("kind", ["count", "sum", "min", "max", "avg"])
def test_one_stack_in_three_processes_is_one_row(kind: str) -> None:
    """ASLR: the same frames at other addresses in each process merge into one row,
    whose statistics combine all three (sum of counts and sums, min of mins, max of
    maxes, avg recomputed from the summed count and sum)."""
    value = {"count": lambda i: per_cpu(ct.c_uint64, i, 1),
             "sum": lambda i: per_cpu(ct.c_int64, 10 * i, 1),
             "min": lambda i: per_cpu(MinMax, MinMax(1, 5 - i), MinMax(0, 0)),
             "max": lambda i: per_cpu(MinMax, MinMax(1, 5 + i), MinMax(0, 0)),
             "avg": lambda i: per_cpu(Avg, Avg(i, 10 * i), Avg(0, 0))}[kind]
    items = [(StackKey(100 + i, 4000 + i), value(i)) for i in (1, 2, 3)]
    (row,) = build_rows(agg(kind, key=STACK_FIELDS), items, AslrStacks())
    assert [f.symbol for f in row.key[0][1].frames] == ["inner", "main"]  # type: ignore[attr-defined]
    expected = {"count": ("count", 9), "sum": ("sum", 63), "min": ("min", 2),
                "max": ("max", 8), "avg": ("avg", 10.0)}[kind]
    assert getattr(row, expected[0]) == expected[1]
    if kind == "avg":
        assert row.count == 6


def test_one_stack_in_two_processes_is_one_histogram_bucket_wise() -> None:
    a = agg("hist", key=KeyLayout(STACK_FIELDS.fields, slot=True))
    items = [(StackHistKey(1, 10, 1), per_cpu(Avg, Avg(2, 2), Avg(0, 0))),
             (StackHistKey(2, 20, 1), per_cpu(Avg, Avg(1, 1), Avg(0, 0))),
             (StackHistKey(2, 20, 3), per_cpu(Avg, Avg(1, 5), Avg(0, 0)))]
    (row,) = build_rows(a, items, AslrStacks())
    assert row.buckets == (Bucket(0, 1, 0), Bucket(1, 2, 3), Bucket(2, 4, 0),
                           Bucket(4, 8, 1))
    assert row.sum == 8


def test_open_outputs_wrap_per_cpu_shares_and_hide_keys_back_to_zero() -> None:
    """An `open:` output (a gauge) adds a begin on one CPU and takes it off on another:
    a CPU's share may be below 0 (a u64 count wraps); a key whose begins all ended is
    back to 0 and is no row."""
    minus_one = (1 << 64) - 1
    items = [(Key(1, b"a", 0), per_cpu(ct.c_uint64, 3, minus_one)),
             (Key(2, b"b", 0), per_cpu(ct.c_uint64, 1, minus_one))]
    (row,) = build_rows(agg("count", gauge=True), items)
    assert (row.key[0], row.count) == (("id", 1), 2)
    sums = [(Key(1, b"a", 0), per_cpu(ct.c_int64, 640, -64)),
            (Key(2, b"b", 0), per_cpu(ct.c_int64, 64, -64))]
    (row,) = build_rows(agg("sum", gauge=True), sums)
    assert (row.key[0], row.sum) == (("id", 1), 576)


def test_open_outputs_print_every_interval_without_reset() -> None:
    a = agg("count", key=KeyLayout(), every_ns=1_000_000_000, gauge=True)
    counts = Table()
    reader, clock = _reader([a], {"pr_agg_0": counts, "pr_agg_0_lost": _lost(0)})
    view = View()
    counts.items_ = [(NoKey(0), per_cpu(ct.c_uint64, 2, 1))]
    clock.t += 1.1
    reader.tick(view)
    clock.t += 1.0
    reader.tick(view)
    assert [[r.count for r in s.rows] for s in view.snaps] == [[3], [3]]
    assert "delete_batch" not in counts.calls


class UcopyKey(ct.Structure):
    _fields_ = [("k0", ct.c_int64), ("k0_pid", ct.c_uint64)]


def test_copied_stacks_no_key_holds_are_forgotten_past_the_budget() -> None:
    """A long profile names a hash per new stack: past the budget the reader keeps only
    those the aggregation keys hold, after emptying BPF's known hashes (a sample of a
    forgotten hash sends its copy again); the keys held still name their stacks, a
    hash (signed in the key, -5) included, and the budget is not met again at once."""
    from planrunner.render.model import StackMaps
    from planrunner.runtime import stacks as stacks_mod

    calls: list[str] = []

    class Source:
        def drain_copies(self, name: str) -> list[tuple[int, bytes]]:
            calls.append(name)
            return []

    maps = StackMaps(copies=("pr_ucopies", 16384), light="pr_ulight", known="pr_uknown")
    layout = KeyLayout((KeyField("ustack", "ucopy", limit=64, unwind="auto"),))
    out = agg("count", key=layout)
    held = [7, 9, -5]
    table = Table([(UcopyKey(h, 42), per_cpu(ct.c_uint64, 1, 0)) for h in held])
    stacks = StackResolver(Source())  # type: ignore[arg-type]
    frames = (Frame(0x401000, "main", 0, "/bin/fx"),)
    budget = 40
    for h in range(1, budget + 2):
        stacks._keep(h, "auto", frames, False)
    stacks._keep(-5 & (1 << 64) - 1, "auto", frames, False)
    stacks._unwound_cap = budget
    program = RenderedProgram("", (), (), (out,), "plan", stack_maps=maps)
    reader = AggregateReader(program, Prog({"pr_agg_0": table}), stacks=stacks)
    reader.drain_stacks()
    assert calls[-1] == "pr_uknown"  # emptied, after the copies were drained
    assert {k for k, _ in stacks._unwound} == {7, 9, -5 & (1 << 64) - 1}
    assert stacks.user_hash(-5, 64, "auto") == Stack("user", frames)
    assert stacks.user_hash(3, 64, "auto").lost  # held by no key: forgotten
    assert stacks._unwound_cap == stacks_mod.UNWOUND_KEPT
    calls.clear()
    reader.drain_stacks()
    assert "pr_uknown" not in calls
