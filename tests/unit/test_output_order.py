"""PlanOrderView (aggregations in plan order, with the run's start) and `validate`'s
summary of uprobe arguments, as a user sees them."""

from __future__ import annotations

import io
from pathlib import Path

from planrunner.cli import main
from planrunner.output import make_view
from planrunner.output.ordered import PlanOrderView
from planrunner.records import AggRow, AggSnapshot


class Seen:
    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def record(self, rec): self.calls.append(("record", rec))  # noqa: E704
    def records(self, batch): self.calls.append(("records", list(batch)))  # noqa: E704
    def aggregate(self, snap): self.calls.append(("aggregate", snap))  # noqa: E704
    def lost(self, count, reason): self.calls.append(("lost", count))  # noqa: E704
    def flush(self): self.calls.append(("flush",))  # noqa: E704
    def close(self): self.calls.append(("close",))  # noqa: E704


def snap(name: str, start: float | None = None, end: float = 200.0) -> AggSnapshot:
    return AggSnapshot(name, "count", "count", None, (), start, end, (AggRow((), count=1),))


def test_snapshots_in_plan_order_at_each_flush() -> None:
    inner = Seen()
    view = PlanOrderView(inner, ["0", "1", "2"], clock=lambda: 100.0)
    view.flush()
    view.aggregate(snap("2", 150.0))
    view.aggregate(snap("1"))
    view.aggregate(snap("0"))
    assert [c[0] for c in inner.calls] == ["flush"]  # held until the round ends
    view.flush()
    got = [(c[1].output, c[1].interval_start) for c in inner.calls if c[0] == "aggregate"]
    assert got == [("0", 100.0), ("1", 100.0), ("2", 150.0)]


def test_start_is_the_first_record_when_it_comes_before_a_flush() -> None:
    inner = Seen()
    view = PlanOrderView(inner, ["a"], clock=lambda: 999.0)
    view.records([{"time": "1970-01-01T00:00:10.500000Z", "output": "p"}])
    view.aggregate(snap("a", end=20.0))
    view.close()
    [agg] = [c[1] for c in inner.calls if c[0] == "aggregate"]
    assert (agg.interval_start, inner.calls[-1]) == (10.5, ("close",))


def test_text_view_prints_plan_order() -> None:
    out = io.StringIO()
    view = PlanOrderView(make_view("text", out, []), ["first", "second"])
    view.aggregate(snap("second"))
    view.aggregate(snap("first"))
    view.close()
    titles = [ln.split("] ")[1] for ln in out.getvalue().splitlines() if ln.startswith("[")]
    assert titles == ["first: count", "second: count"]


def test_validate_lists_uprobe_registers_once(tmp_path: Path) -> None:
    plan = tmp_path / "u.yaml"
    plan.write_text("planrunner: 1\ntargets:\n  c: {binary: c}\nprobes:\n"
                    "  m: {uprobe: c:malloc, args: [{name: size, type: uint64}]}\n"
                    "  f: {uprobe: c:free}\n"
                    "outputs:\n  - print: m\n    fields: [size]\n  - print: f\n")
    out, err = io.StringIO(), io.StringIO()
    assert main(["validate", str(plan)], stdout=out, stderr=err) == 0
    lines = [ln.strip() for ln in out.getvalue().splitlines() if "arguments" in ln]
    assert lines == [
        "arguments arg1/size: uint64 (read), the other 11 of arg1..arg12: int64 (registers)",
        "arguments arg1..arg12: int64 (registers; declare the ones you use)"]


def _agg(name: str, dropped: int = 0) -> AggSnapshot:
    return AggSnapshot(name, "count", "count", None, (), 1.0, 2.0, (AggRow((), count=5),),
                       dropped=dropped)


def test_csv_one_output_to_a_file_keeps_losses_apart(tmp_path: Path) -> None:
    from planrunner.output.destination import open_view

    path = tmp_path / "c.csv"
    view = open_view("csv", str(path), io.StringIO(), [], ["calls"])
    view.aggregate(_agg("calls", dropped=3))
    view.lost(7, "ringbuf full")
    view.close()
    assert path.read_text().splitlines() == [
        "output,interval_start,interval_end,count",
        "calls,1970-01-01T00:00:01.000000Z,1970-01-01T00:00:02.000000Z,5"]
    assert (tmp_path / "c.lost.csv").read_text().splitlines() == [
        "lost,reason,output", "3,map full,calls", "7,ringbuf full,"]


def test_csv_one_output_on_stdout_is_one_table() -> None:
    from planrunner.output.destination import open_view

    out = io.StringIO()
    view = open_view("csv", None, out, [], ["calls"])
    view.aggregate(_agg("calls", dropped=3))
    view.lost(7, "ringbuf full")
    view.close()
    assert out.getvalue().splitlines() == [
        "output,interval_start,interval_end,count",
        "calls,1970-01-01T00:00:01.000000Z,1970-01-01T00:00:02.000000Z,5"]
