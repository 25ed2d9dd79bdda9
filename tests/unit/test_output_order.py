"""Aggregations in plan order, and `validate`'s summary of uprobe arguments, as a user
sees them."""

from __future__ import annotations

import io
from pathlib import Path

from planrunner.cli import main
from planrunner.records import AggRow, AggSnapshot


def test_aggregations_come_in_plan_order(tmp_path: Path, monkeypatch) -> None:
    """Render lists aggregations in the plan's order, whatever probe they read, so the
    session emits their snapshots in it (output 1 used to come before output 0)."""
    from planrunner.pipeline import compile_plan

    monkeypatch.chdir(Path(__file__).resolve().parents[2])
    plan = tmp_path / "p.yaml"
    plan.write_text("planrunner: 1\nname: t\ntargets:\n  a: {binary: tests/fixtures/elf/bin/agg}\n"
                    "probes:\n  v: {usdt: a:agg:value}\n  s: {usdt: a:agg:work__start}\n"
                    "outputs:\n  - {count: s, name: first}\n  - {count: v, name: second}\n"
                    "  - {count: s, name: third}\n")
    program = compile_plan(str(plan), {})[2]
    assert [a.name for a in program.aggregates] == ["first", "second", "third"]


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
