"""Output plumbing as a user meets it, through the real CLI on the demo program:
aggregations in plan order with their interval, CSV with several outputs in one file
per output (or refused on stdout), never a header row in the middle of a stream."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from tests.e2e.conftest import BUILD, run_planrunner

# Outputs 0 and 2 are on `done`, output 1 on `start`: the program lists its
# aggregations by probe (start first), the plan's order is 0, 1, 2.
PLAN = f"""\
planrunner: 1
targets:
  demo: {{binary: {BUILD}/demo}}
probes:
  start:
    usdt: demo:demo:request__start
    args: [{{name: id, type: uint64}}, {{name: path, type: string}}]
  done:
    usdt: demo:demo:request__done
    args: [{{name: id, type: uint64}}, {{name: status, type: int32}}]
outputs:
  - count: done
    name: by_status
    by: [status]
  - count: start
    name: starts
  - print: done
    name: dones
    fields: [id, status]
"""


@pytest.fixture()
def plan(tmp_path: Path, fixtures_built: Path) -> Path:
    path = tmp_path / "three.yaml"
    path.write_text(PLAN)
    return path


def _run(plan: Path, *extra: str):  # type: ignore[no-untyped-def]
    return run_planrunner(["run", str(plan), *extra, "-c", f"{BUILD}/demo 4"])


def test_text_aggregations_in_plan_order(plan: Path) -> None:
    proc = _run(plan)
    assert proc.returncode == 0, proc.stderr
    titles = [ln.split("] ", 1)[1] for ln in proc.stdout.splitlines() if ln.startswith("[")]
    assert titles == ["by_status: count by status", "starts: count"]


def test_json_interval_is_the_run_without_every(plan: Path) -> None:
    proc = _run(plan, "-f", "json")
    assert proc.returncode == 0, proc.stderr
    objs = [json.loads(ln) for ln in proc.stdout.splitlines()]
    aggs = [o for o in objs if "interval_end" in o]
    assert [o["output"] for o in aggs][-1] == "starts"
    assert [o["output"] for o in aggs].index("starts") > 0  # by_status rows come first
    for obj in aggs:
        assert obj["interval_start"] is not None
        assert obj["interval_start"] <= obj["interval_end"]
    records = [o for o in objs if o.get("output") == "dones"]
    assert records and all(obj["interval_start"] <= r["time"] for r in records
                           for obj in aggs)


def test_csv_to_stdout_with_several_outputs_is_refused(plan: Path) -> None:
    proc = _run(plan, "-f", "csv")
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr.splitlines() == [
        "error: --format csv with 3 outputs needs one file per output, not stdout "
        "(one CSV stream holds one table)",
        "  hint: -o DIR/ writes DIR/OUTPUT.csv; -o BASE.csv writes BASE.OUTPUT.csv "
        "(outputs: by_status, starts, dones)",
        "  hint: or --format json: one stream, each line names its output"]


@pytest.mark.parametrize("target", ["base.csv", "dir/"])
def test_csv_one_file_per_output_one_header_each(plan: Path, tmp_path: Path,
                                                 target: str) -> None:
    out = tmp_path / target
    proc = _run(plan, "-f", "csv", "-o", str(out) + ("/" if target.endswith("/") else ""))
    assert (proc.returncode, proc.stdout) == (0, ""), proc.stderr
    name = "{}.csv" if target.endswith("/") else "base.{}.csv"
    files = {o: (out if target.endswith("/") else tmp_path) / name.format(o)
             for o in ("by_status", "starts", "dones")}
    assert f"planrunner: CSV, one file per output: {files['by_status']}" in proc.stderr
    tables = {o: list(csv.reader(p.open(newline=""))) for o, p in files.items()}
    assert tables["dones"][0] == ["output", "time", "ts_ns", "pid", "tid", "comm", "probe",
                                  "id", "status", "truncated"]
    assert [r[7] for r in tables["dones"][1:]] == ["1", "2", "3", "4"]
    assert tables["starts"][0] == ["output", "interval_start", "interval_end", "count"]
    assert tables["starts"][1][0] == "starts" and tables["starts"][1][3] == "4"
    assert tables["starts"][1][1] != ""  # the run's start, not empty
    assert tables["by_status"][0] == ["output", "interval_start", "interval_end", "status",
                                      "count"]
    for rows in tables.values():  # one header per file, at the top only
        assert sum(r[:1] == ["output"] for r in rows) == 1
