"""`table:` outputs without the kernel: the plan's checks (located errors), the join
(rows, rates, sorting, top), the reader's intervals over in-memory maps, command lines,
and every view (text, the live Rich table, JSON lines, CSV)."""

from __future__ import annotations

import ctypes as ct
import io
import json
import os
from pathlib import Path

import pytest

from planrunner.errors import PlanSemanticError
from planrunner.output import make_view
from planrunner.output.clock import Clock as TextClock
from planrunner.output.destination import open_view
from planrunner.plan import load_plan
from planrunner.records import AggRow, TableRow, TableSnapshot, join_rows
from planrunner.render.layout import KeyField, KeyLayout
from planrunner.render.model import AggregateOutput, AggTable, RenderedProgram
from planrunner.runtime.aggregates import AggregateReader
from planrunner.runtime.cmdlines import Cmdlines, read_cmdline
from tests.unit.test_aggregates_reader import Clock, Prog, Table, per_cpu

HEAD = """planrunner: 1
name: t
probes:
  a: {tracepoint: sched:sched_process_exec}
  b: {tracepoint: sched:sched_process_fork}
  c: {tracepoint: sched:sched_process_exit}
outputs:
"""


def plan_of(tmp_path: Path, outputs: str):  # type: ignore[no-untyped-def]
    path = tmp_path / "p.yaml"
    path.write_text(HEAD + outputs)
    return load_plan(path, {})


def errors_of(tmp_path: Path, outputs: str) -> list[str]:
    with pytest.raises(PlanSemanticError) as exc:
        plan_of(tmp_path, outputs)
    return [f"{d.span.line}:{d.span.column}: {d.message}" if d.span else d.message
            for d in exc.value.diagnostics]


# -- the plan ------------------------------------------------------------------------


def test_a_table_joins_named_counts_and_sums(tmp_path: Path) -> None:
    plan = plan_of(tmp_path, """\
  - {count: a, name: execs, by: [pid]}
  - {sum: b, name: forks, value: pid, by: [pid]}
  - {count: c, name: exits, by: [pid]}
  - name: stat
    table: [execs, {churn: [forks, exits]}]
    every: 1s
    sort: churn
    rate: true
    top: 5
""")
    (table,) = plan.tables
    assert [(c.name, c.outputs) for c in table.columns] == [
        ("execs", ("execs",)), ("churn", ("forks", "exits"))]
    assert (table.name, table.sort, table.rate, table.top, table.every_ns) == (
        "stat", "churn", True, 5, 1_000_000_000)
    assert table.key_fields == ("pid",)
    assert [o.name for o in plan.outputs] == ["execs", "forks", "exits"]
    assert plan.joined() == {"execs": "stat", "forks": "stat", "exits": "stat"}


def test_table_defaults(tmp_path: Path) -> None:
    plan = plan_of(tmp_path, "  - {count: a, by: [comm]}\n  - table: [a]\n")
    (table,) = plan.tables
    assert (table.name, table.sort, table.rate, table.every_ns, table.top) == (
        "table", "a", False, None, None)


def test_an_unnamed_output_is_named_after_its_probe_in_every_file_name(
        tmp_path: Path) -> None:
    """Not its index ("0"): `-o t8.csv` with several outputs writes t8.a.csv; a name
    given to another output is kept free, a second output of a probe adds its kind."""
    plan = plan_of(tmp_path, "  - print: a\n  - {count: a, by: [comm]}\n"
                             "  - {count: b, name: a_print, by: [comm]}\n  - print: a\n"
                             "  - print: c\n  - table: [a_count, a_print]\n")
    names = [o.name for o in plan.outputs] + [t.name for t in plan.tables]
    assert names == ["a", "a_count", "a_print", "a_print_3", "c", "table"]
    out = tmp_path / "out"
    out.mkdir()
    open_view("csv", str(out / "t8.csv"), io.StringIO(), [], names[:2]).close()
    assert sorted(os.listdir(out)) == ["t8.a.csv", "t8.a_count.csv"]
    open_view("csv", str(out / "one.csv"), io.StringIO(), [], names[:1]).close()
    assert "one.csv" in os.listdir(out)  # one output: exactly the file given


def test_every_mistake_of_a_table_is_located(tmp_path: Path) -> None:
    got = errors_of(tmp_path, """\
  - {count: a, name: execs, by: [pid]}
  - {count: b, name: forks, by: [comm]}
  - {hist: c, name: exits, value: pid}
  - {count: c, name: late, by: [pid], every: 1s}
  - name: stat
    table: [execs, forks, exits, exec, late, execs]
    sort: nope
    by: [pid]
  - {count: a, name: again, by: [pid], sort: execs}
  - table: [execs]
""")
    assert got == [
        "11:39: output 'late' is joined by table 'stat': its 'every' is the table's",
        "13:20: output 'forks' groups by [comm] but 'execs' by [pid]",
        "13:27: table 'stat' joins counts and sums; output 'exits' is a hist",
        "13:34: unknown output 'exec'",
        "13:46: table 'stat' has two columns named 'execs'",
        "14:11: unknown column 'nope'",
        "15:5: 'by' belongs to the outputs a table joins, not to the table",
        "16:40: 'sort' belongs to table, not to count",
        "17:13: output 'execs' is already joined by table 'stat'",
    ]


def test_a_table_name_is_an_output_name(tmp_path: Path) -> None:
    got = errors_of(tmp_path, "  - {count: a, name: x, by: [pid]}\n  - {table: [x], name: x}\n")
    assert got == ["9:24: two outputs are named 'x' (outputs 0 and 1)"]


def test_the_schema_refuses_an_empty_table(tmp_path: Path) -> None:
    with pytest.raises(Exception) as exc:
        plan_of(tmp_path, "  - {count: a, by: [pid]}\n  - table: []\n")
    assert "table" in str(exc.value)


def test_the_bundled_runtime_stat_plan_builds() -> None:
    root = Path(__file__).resolve().parents[2]
    plan = load_plan(root / "plans" / "runtime-stat.yaml", {})
    (table,) = plan.tables
    assert [c.name for c in table.columns] == ["calls", "objects", "gcs", "threads", "loads"]
    assert table.rate and table.key_fields == ("pid",) and table.every_ns == 1_000_000_000
    assert set(plan.joined()) == {o.name for o in plan.outputs}


# -- the join ------------------------------------------------------------------------


def key(pid: int) -> tuple[tuple[str, object], ...]:
    return (("pid", pid),)


def test_join_adds_each_columns_rows_and_fills_zeros() -> None:
    calls = [AggRow(key(1), count=10), AggRow(key(2), count=4), AggRow(key(1), count=5)]
    gcs = [AggRow(key(3), sum=7)]
    rows = join_rows([calls, gcs], None, 0, None)
    assert rows == (TableRow(key(1), (15, 0)), TableRow(key(2), (4, 0)),
                    TableRow(key(3), (0, 7)))


def test_join_rates_divide_by_the_interval() -> None:
    rows = join_rows([[AggRow(key(1), count=30)], [AggRow(key(1), count=3)]], 2.0, 0, None)
    assert rows == (TableRow(key(1), (15.0, 1.5)),)
    assert join_rows([[AggRow(key(1), count=3)]], 0.0, 0, None)[0].values == (0.0,)


def test_join_sorts_by_the_column_largest_first_ties_by_key_then_cuts() -> None:
    a = [AggRow(key(p), count=n) for p, n in ((5, 1), (4, 9), (3, 1), (2, 4))]
    b = [AggRow(key(p), count=n) for p, n in ((5, 8), (3, 8), (2, 1))]
    assert [r.key[0][1] for r in join_rows([a, b], None, 0, None)] == [4, 2, 3, 5]
    assert [r.key[0][1] for r in join_rows([a, b], None, 1, None)] == [3, 5, 2, 4]
    assert [r.key[0][1] for r in join_rows([a, b], None, 1, 2)] == [3, 5]


# -- the reader ----------------------------------------------------------------------


class PidKey(ct.Structure):
    _fields_ = [("k0", ct.c_int64)]


def count_agg(name: str, index: int, table: str | None = "stat") -> AggregateOutput:
    return AggregateOutput(name=name, probe="p", kind="count", map_name=f"pr_agg_{index}",
                           key=KeyLayout((KeyField("pid", "int"),)), value_label="count", unit=None,
                           every_ns=None, top=None, lhist=None, map_size=100,
                           lost_map=f"pr_agg_{index}_lost", table=table)


class Views:
    def __init__(self) -> None:
        self.got: list[object] = []

    def aggregate(self, snap: object) -> None:
        self.got.append(snap)

    def table(self, snap: object) -> None:
        self.got.append(snap)

    def flush(self) -> None:
        pass


def counts(*pairs: tuple[int, int]) -> list[tuple[object, object]]:
    return [(PidKey(pid), per_cpu(ct.c_uint64, n, 0)) for pid, n in pairs]


def test_the_reader_joins_each_interval_and_resets_the_maps() -> None:
    aggs = (count_agg("other", 0, None), count_agg("py", 1), count_agg("rb", 2),
            count_agg("gc", 3))
    table = AggTable("stat", (("calls", ("py", "rb")), ("gcs", ("gc",))), ("pid",),
                     "calls", True, 2_000_000_000, 2)
    maps = {f"pr_agg_{i}": Table() for i in range(4)}
    maps |= {f"pr_agg_{i}_lost": Table([(0, per_cpu(ct.c_uint64, 0, 0))]) for i in range(4)}
    program = RenderedProgram("", (), (), aggs, "plan", tables=(table,))
    clock = Clock()
    seen: list[int] = []

    def cmdline(pid: int) -> str:
        seen.append(pid)
        return f"prog {pid}"

    reader = AggregateReader(program, Prog(maps), clock=clock, monotonic=clock,
                             cmdline=cmdline)
    view = Views()
    maps["pr_agg_1"].items_ = counts((10, 400), (11, 2))
    maps["pr_agg_2"].items_ = counts((12, 100))
    maps["pr_agg_3"].items_ = counts((10, 6), (13, 50))
    clock.t += 1.0
    reader.tick(view)  # not due yet
    assert view.got == []
    clock.t += 1.0
    reader.tick(view)
    (snap,) = view.got
    assert isinstance(snap, TableSnapshot)
    assert (snap.output, snap.columns, snap.rate, snap.sort) == (
        "stat", ("calls", "gcs"), True, "calls")
    assert (snap.interval_start, snap.interval_end) == (1000.0, 1002.0)
    assert snap.rows == (TableRow(key(10), (200.0, 3.0), "prog 10"),
                         TableRow(key(12), (50.0, 0.0), "prog 12"))
    assert all(not maps[f"pr_agg_{i}"].items_ for i in (1, 2, 3))  # read and reset
    assert maps["pr_agg_0"].calls == []  # not joined: prints once at exit, on its own
    maps["pr_agg_1"].items_ = counts((10, 1))
    clock.t += 0.5
    reader.finish(view)
    other, last = view.got[1:]
    assert getattr(other, "output", None) == "other"
    assert isinstance(last, TableSnapshot) and last.rows == (
        TableRow(key(10), (2.0, 0.0), "prog 10"),)
    assert seen == [10, 12, 10]  # the reader asks each time; Cmdlines caches (below)


def test_a_table_without_every_prints_once_at_exit_over_the_run() -> None:
    aggs = (count_agg("py", 0),)
    table = AggTable("stat", (("calls", ("py",)),), ("pid",), "calls", False, None, None)
    maps = {"pr_agg_0": Table(counts((7, 3))),
            "pr_agg_0_lost": Table([(0, per_cpu(ct.c_uint64, 1, 0))])}
    clock = Clock()
    reader = AggregateReader(RenderedProgram("", (), (), aggs, "plan", tables=(table,)),
                             Prog(maps), clock=clock, monotonic=clock,
                             cmdline=lambda pid: None)
    view = Views()
    clock.t += 3
    reader.tick(view)
    reader.finish(view)
    (snap,) = view.got
    assert isinstance(snap, TableSnapshot)
    assert snap.rows == (TableRow(key(7), (3,), None),) and snap.dropped == 1
    assert (snap.interval_start, snap.interval_end) == (1000.0, 1003.0)


def test_cmdlines_are_read_once_and_kept(tmp_path: Path) -> None:
    (tmp_path / "42").mkdir()
    (tmp_path / "42" / "cmdline").write_bytes(b"ruby3.1\0work.rb\0")
    (tmp_path / "43").mkdir()
    (tmp_path / "43" / "cmdline").write_bytes(b"")
    (tmp_path / "43" / "comm").write_bytes(b"kworker\n")
    assert read_cmdline(42, str(tmp_path)) == "ruby3.1 work.rb"
    assert read_cmdline(43, str(tmp_path)) == "[kworker]"
    assert read_cmdline(44, str(tmp_path)) is None
    reads: list[int] = []
    cache = Cmdlines(lambda pid: reads.append(pid) or read_cmdline(pid, str(tmp_path)))
    assert cache(42) == "ruby3.1 work.rb"
    (tmp_path / "42" / "cmdline").unlink()  # the process exits: its line is kept
    assert cache(42) == "ruby3.1 work.rb" and cache(44) is None and cache(44) is None
    assert reads == [42, 44]


# -- the views -----------------------------------------------------------------------


def snapshot(rate: bool = True, rows: tuple[TableRow, ...] | None = None,
             dropped: int = 0) -> TableSnapshot:
    if rows is None:
        rows = (TableRow(key(4242), (1520.25, 830.0), "ruby3.1 work.rb"),
                TableRow(key(7), (3.0, 0.0), None)) if rate else (
                TableRow(key(4242), (1520, 830), "ruby3.1 work.rb"),)
    return TableSnapshot(output="stat", columns=("calls", "objects"), key_fields=("pid",),
                         rate=rate, sort="calls", interval_start=1_780_000_000.0,
                         interval_end=1_780_000_001.0, rows=rows, dropped=dropped)


def test_text_prints_a_plain_table_per_interval() -> None:
    from datetime import UTC

    out = io.StringIO()
    view = make_view("text", out, [], tz=UTC)
    view.table(snapshot())
    view.table(snapshot(rate=False, rows=(), dropped=2))
    assert out.getvalue().splitlines() == [
        "[20:26:41] stat: calls/s, objects/s by pid (sorted by calls/s, 1.00 s)",
        "pid  cmdline         calls/s objects/s",
        "4242 ruby3.1 work.rb  1520.2     830.0",
        "7    ?                   3.0       0.0",
        "",
        "[20:26:41] stat: calls, objects by pid (sorted by calls, 1.00 s)",
        "(no events)",
        "2 keys dropped (map full; raise settings.map_size)",
        "",
    ]


def test_text_cuts_long_command_lines_and_escapes_control_characters() -> None:
    out = io.StringIO()
    long = "java " + "-Dx=y " * 20 + "\x1b[2J"
    make_view("text", out, []).table(snapshot(rows=(TableRow(key(1), (1.0, 2.0), long),)))
    line = out.getvalue().splitlines()[2]
    assert "…" in line and "\x1b" not in line and len(line.split("  ")[0]) < 60


def test_the_live_table_redraws_one_table_and_leaves_the_last_one() -> None:
    out = io.StringIO()
    view = make_view("text", out, [], live=True)
    assert view.live is not None  # type: ignore[attr-defined]
    from rich.console import Console

    view.live.console = Console(file=out, width=100, force_terminal=True,  # type: ignore
                                color_system=None, highlight=False)
    view.aggregate(_agg_snapshot())  # before the table: written as it comes
    view.table(snapshot())
    view.aggregate(_agg_snapshot())  # while it is shown: held until the end
    view.table(snapshot(rows=(TableRow(key(9), (5.0, 1.0), "[bold]php8.2 x.php"),)))
    view.close()
    text = out.getvalue()
    assert text.count("other: count") == 2
    assert "\x1b[?1049h" in text and "\x1b[?1049l" in text  # the alternate screen
    final = text.rsplit("\x1b[?1049l", 1)[1]
    assert "[bold]php8.2 x.php" in final and "ruby3.1" not in final
    assert "pid" in final and "calls/s" in final and "Ctrl-C" not in final
    assert final.index("php8.2") < final.index("other: count")


def _agg_snapshot():  # type: ignore[no-untyped-def]
    from planrunner.records import AggSnapshot

    return AggSnapshot(output="other", kind="count", value_label="count", unit=None,
                       key_fields=(), interval_start=0.0, interval_end=1.0,
                       rows=(AggRow((), count=1),))


def test_json_has_one_object_per_row_with_the_command_line() -> None:
    out = io.StringIO()
    view = make_view("json", out, [])
    view.table(snapshot(dropped=3))
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert lines == [
        {"output": "stat", "interval_start": "2026-05-28T20:26:40.000000Z",
         "interval_end": "2026-05-28T20:26:41.000000Z", "pid": 4242,
         "cmdline": "ruby3.1 work.rb", "calls": 1520.25, "objects": 830.0},
        {"output": "stat", "interval_start": "2026-05-28T20:26:40.000000Z",
         "interval_end": "2026-05-28T20:26:41.000000Z", "pid": 7, "cmdline": None,
         "calls": 3.0, "objects": 0.0},
        {"lost": 3, "reason": "map full", "output": "stat"},
    ]


def test_csv_is_one_table_with_a_header_once(tmp_path: Path) -> None:
    out = io.StringIO()
    view = open_view("csv", None, out, [], ["stat"])
    view.table(snapshot(rate=False))
    view.table(snapshot(rate=False))
    assert out.getvalue().splitlines() == [
        "output,interval_start,interval_end,pid,cmdline,calls,objects",
        "stat,2026-05-28T20:26:40.000000Z,2026-05-28T20:26:41.000000Z,4242,ruby3.1 work.rb,"
        "1520,830",
        "stat,2026-05-28T20:26:40.000000Z,2026-05-28T20:26:41.000000Z,4242,ruby3.1 work.rb,"
        "1520,830",
    ]
    view = open_view("csv", str(tmp_path) + "/", out, [], ["stat", "other"])
    view.table(snapshot(rate=False, dropped=1))
    view.close()
    assert (tmp_path / "stat.csv").read_text().startswith("output,interval_start")
    assert (tmp_path / "lost.csv").read_text().splitlines()[1] == "1,map full,stat"


def test_the_title_uses_the_text_views_clock() -> None:
    from datetime import UTC

    from planrunner.output.table_text import table_title

    assert table_title(snapshot(), TextClock(UTC)).startswith("[20:26:41] stat: ")


def test_an_optional_target_not_found_leaves_its_probes_and_columns_out(
        tmp_path: Path) -> None:
    from planrunner.pipeline import compile_plan

    path = tmp_path / "p.yaml"
    path.write_text("""planrunner: 1
name: t
targets:
  gone: {binary: /nonexistent/ruby, optional: true}
probes:
  call: {usdt: gone:ruby:method__entry}
  exec: {tracepoint: sched:sched_process_exec}
  span: {span: {begin: call, end: call}}
outputs:
  - {count: call, name: rb_calls, by: [pid]}
  - {count: exec, name: execs, by: [pid]}
  - {count: span, name: spans, by: [pid]}
  - {table: [{calls: [rb_calls, execs]}, spans], name: stat}
""")
    plan, resolved, program = compile_plan(str(path), {}, None, None)
    (warning,) = [w for w in resolved.warnings if "optional" in w.message]
    assert warning.severity == "warning" and warning.span is not None
    assert warning.span.line == 4
    assert "optional target 'gone' left out" in warning.message
    assert "probes call will not fire" in warning.message
    assert [a.name for a in program.aggregates] == ["execs"]
    assert program.tables[0].columns == (("calls", ("execs",)), ("spans", ()))


def test_prometheus_serves_the_joined_outputs_as_counters(tmp_path: Path) -> None:
    """Rates are Prometheus's to compute: each joined output is its own counter, labelled
    by the shared keys; the table adds no family of its own."""
    pytest.importorskip("prometheus_client")
    from planrunner.pipeline import compile_plan
    from planrunner.prometheus.config import exporter_config

    path = tmp_path / "p.yaml"
    path.write_text(HEAD + """\
  - {count: a, name: execs, by: [pid]}
  - {count: b, name: forks, by: [pid]}
  - {table: [execs, forks], name: stat, rate: true, every: 1s}
""")
    plan, _resolved, program = compile_plan(str(path), {}, None, None)
    config = exporter_config(("127.0.0.1", 9435), plan.name, plan.description, program)
    assert [(f.name, f.mtype, f.labels) for f in config.families] == [
        ("planrunner_t_execs", "counter", ("pid",)),
        ("planrunner_t_forks", "counter", ("pid",))]


def test_stderr_written_while_the_live_table_is_up_comes_after_it() -> None:
    from rich.console import Console

    from planrunner.output.live_table import HeldStream

    out, err = io.StringIO(), io.StringIO()
    held = HeldStream(err)
    view = make_view("text", out, [], live=True, held_stderr=held)
    view.live.console = Console(file=out, width=100, force_terminal=True,  # type: ignore
                                color_system=None)
    held.write("before\n")
    view.table(snapshot())
    held.write("3 aggregation updates dropped\n")
    assert err.getvalue() == "before\n"
    view.close()
    assert err.getvalue() == "before\n3 aggregation updates dropped\n"
    held.write("after\n")
    assert err.getvalue().endswith("after\n")
