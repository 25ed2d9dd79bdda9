"""Nested spans that pair by identity (`match:`), on a real CPython 3.11 under a profile
hook written in Python (whose own returns fire python:function__return without an
entry: they must neither pair nor pop the caller's open entry), under cProfile (a hook
in C), and with an exception unwinding frames. The bundled python-latency and
python-flow are checked against the workload's own clock and call counts
(tests/e2e/workloads/py_hooked.py)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from tests.e2e.conftest import json_records, run_planrunner, write_plan

PYTHON = "/usr/bin/python3.11"
WORKLOAD = Path(__file__).resolve().parent / "workloads" / "py_hooked.py"
UNMATCHED = re.compile(r"note: (\d+) span ends matched no open begin")
DROPPED = re.compile(r"note: (\d+) open span begins were dropped")


def _run(plan: str, hook: str, scenario: str, *sets: str) -> tuple[list[dict], str, str]:
    """Records, the workload's own lines and planrunner's stderr."""
    if not os.path.exists(PYTHON):
        pytest.skip(f"{PYTHON} is not installed")
    args = ["run", plan, "-f", "json", "-c", f"{PYTHON} {WORKLOAD} {hook} {scenario}"]
    for s in sets:
        args += ["--set", s]
    proc = run_planrunner(args, timeout=180)
    assert proc.returncode == 0, proc.stderr  # an end without a begin is no loss
    records = "\n".join(ln for ln in proc.stdout.splitlines() if ln.startswith("{"))
    own = "\n".join(ln for ln in proc.stdout.splitlines() if not ln.startswith("{"))
    return json_records(records), own, proc.stderr


def _truth(own: str) -> dict[str, int]:
    return {k: int(v) for k, v in (line.split() for line in own.splitlines())}


@pytest.mark.parametrize("hook", ["lambda", "cprofile"])
@pytest.mark.parametrize(("scenario", "func", "calls"), [("fib", "fib", 21891),
                                                         ("raise", "dive", 900)])
def test_python_latency_exact_under_a_profile_hook(hook: str, scenario: str, func: str,
                                                   calls: int) -> None:
    recs, own, err = _run("python-latency", hook, scenario, "file_match=py_hooked")
    truth = _truth(own)
    assert truth["calls"] == calls
    ours = {r["func"]: r for r in recs if r["file"] == str(WORKLOAD)}
    assert ours[func]["count"] == calls  # every call paired with its own entry
    # each span lies between the workload's clock inside the call and around it
    inner, outer = truth["inner"] / calls, truth["outer"] / calls
    assert inner <= ours[func]["avg"] <= outer, (ours[func], inner, outer)
    assert not DROPPED.search(err), err  # every entry had its return
    if hook == "lambda":  # the hook ran (and returned) at each call and return at least
        got = UNMATCHED.search(err)
        assert got and int(got.group(1)) >= 2 * calls, err
        assert "<lambda>" not in ours  # never entered, never timed


def _expected_flow() -> list[tuple[str, str, int]]:
    """py_hooked.py flow: run_flow -> outer -> inner x2, then outer again, unwound.
    The returns of frames entered before the hook was set have no entry: depth 0."""
    calls = [("entry", "outer", 1), ("entry", "inner", 2), ("return", "inner", 2),
             ("entry", "inner", 2), ("return", "inner", 2), ("return", "outer", 1)]
    return [("return", "Bottom", 0),  # its class body, run at import
            ("entry", "run_flow", 0), *calls, *calls, ("return", "run_flow", 0),
            ("return", "main", 0), ("return", "<module>", 0)]


@pytest.mark.parametrize("hook", ["lambda", "cprofile"])
def test_python_flow_depths_under_a_profile_hook(hook: str) -> None:
    recs, _own, err = _run("python-flow", hook, "flow", "file_match=py_hooked")
    named = [(r["probe"], r["func"], r["depth"]) for r in recs if r["func"] != "<lambda>"]
    assert named == _expected_flow()
    # the hook's own returns: at the depth of a call made where they ran
    open_calls = 0
    hook_returns = 0
    for r in recs:
        if r["func"] == "<lambda>":
            assert (r["probe"], r["depth"]) == ("return", open_calls), r
            hook_returns += 1
        elif r["probe"] == "entry":
            open_calls += 1
        elif r["depth"] < open_calls:
            open_calls -= 1
    # cProfile's hook is C; the lambda runs at least at each call and return (7 calls)
    assert hook_returns == 0 if hook == "cprofile" else hook_returns >= 2 * 7
    got = UNMATCHED.search(err)
    assert got and int(got.group(1)) == 3 + hook_returns, err  # + Bottom, main, <module>


PLAN = f"""
planrunner: 1
name: begin-without-end
targets:
  py: {{binary: {PYTHON}}}
x-args: &args
  - {{name: file, type: string}}
  - {{name: func, type: string}}
probes:
  entry:
    usdt: py:python:function__entry
    args: *args
    where: contains(file, "py_hooked")
  return:  # the returns of inner() are left out: its entries stay open
    usdt: py:python:function__return
    args: *args
    where: contains(file, "py_hooked") && func != "inner"
  call:
    span: {{begin: entry, end: return, nested: true, match: [file, func]}}
outputs:
  - print: call
    fields: [begin.func, depth, latency]
"""


def test_an_end_drops_the_begins_above_its_own(tmp_path: Path) -> None:
    recs, _own, err = _run(write_plan(tmp_path, PLAN), "cprofile", "flow")
    assert [(r["func"], r["depth"]) for r in recs] == [
        ("outer", 1), ("outer", 1), ("run_flow", 0)]
    assert all(r["latency_ns"] > 0 for r in recs)
    got = DROPPED.search(err)
    assert got and int(got.group(1)) == 4, err  # two inner() entries in each outer()
