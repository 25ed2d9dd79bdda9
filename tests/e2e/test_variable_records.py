"""Variable records, for real (render/layout.py RecordLayout.variable): a record that ends
with a string reserves only the size class its length needs (16, 64 bytes or the whole
buffer), and every view shows the same values as with whole records. Function names of
lengths on each side of every class boundary (a name and its NUL: 16 | 17, 64 | 65) and
of the string limit (128 | 129: cut) come from python3.11's function__return probe, in
a record with one string (variable) and in one where a whole string comes first."""

from __future__ import annotations

import csv
import io
import os

import pytest

from tests.e2e.conftest import json_records, run_planrunner, write_plan

PYTHON = "/usr/bin/python3.11"
LENGTHS = (1, 15, 16, 17, 63, 64, 65, 127, 128, 129, 200)
NAMES = [("f" + "x" * 300)[:n] for n in LENGTHS]
LIMIT = 128
SHOWN = {n[:LIMIT] for n in NAMES}  # the script's own functions, as the records show them


def expected(name: str) -> tuple[str, bool]:
    return name[:LIMIT], len(name) > LIMIT


def _plan(tmp_path, name: str, fields: str, file: str) -> str:
    """function__return of PYTHON with its strings, printing `fields`."""
    return write_plan(tmp_path, f"""
planrunner: 1
name: {name}
targets: {{py: {{binary: {PYTHON}}}}}
probes:
  entry:
    usdt: py:python:function__return
    args: [{{name: file, type: string}}, {{name: func, type: string}}, {{name: line, type: int32}}]
outputs:
  - print: entry
    fields: {fields}
""", name=file)


@pytest.fixture()
def traced(tmp_path):
    if not os.path.exists(PYTHON):
        pytest.skip(f"{PYTHON} is not installed")
    script = tmp_path / "names.py"
    script.write_text("".join(f"def {n}():\n    pass\n\n\n" for n in NAMES)
                      + "".join(f"{n}()\n" for n in NAMES))
    plan = _plan(tmp_path, "variable-records", "[func, line]", "plan.yaml")
    both = _plan(tmp_path, "variable-records-two", "[file, func]", "two.yaml")
    return plan, both, script


def _run(plan: str, script, fmt: str) -> str:
    proc = run_planrunner(["run", plan, "-f", fmt, "-c", f"{PYTHON} -S {script}"],
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "lost" not in proc.stderr, proc.stderr
    return proc.stdout


def test_json_shows_every_length_whole_or_cut_at_the_limit(traced):
    plan, both, script = traced
    recs = [r for r in json_records(_run(plan, script, "json")) if r["func"] in SHOWN]
    assert [(r["func"], "func" in r.get("truncated", [])) for r in recs] == [
        expected(n) for n in NAMES]
    assert [r["line"] for r in recs] == [2 + 4 * i for i in range(len(NAMES))]  # `pass`
    two = [r for r in json_records(_run(both, script, "json")) if r["func"] in SHOWN]
    assert [(r["func"], "func" in r.get("truncated", [])) for r in two] == [
        expected(n) for n in NAMES]
    assert {r["file"] for r in two} == {str(script)}


def test_csv_shows_every_length(traced):
    plan, _both, script = traced
    rows = list(csv.DictReader(io.StringIO(_run(plan, script, "csv"))))
    rows = [r for r in rows if r["func"] in SHOWN]
    assert [(r["func"], r["truncated"] == "func") for r in rows] == [expected(n) for n in NAMES]


def test_text_shows_every_length(traced):
    plan, _both, script = traced
    lines = [ln for ln in _run(plan, script, "text").splitlines()[1:]
             if ln.split()[5].rstrip("…") in SHOWN]
    assert len(lines) == len(NAMES)
    for line, name in zip(lines, NAMES, strict=True):
        text, cut = expected(name)
        shown = line.split()[5]  # TIME PID TID COMM PROBE func line
        assert shown == text + ("…" if cut else ""), line
