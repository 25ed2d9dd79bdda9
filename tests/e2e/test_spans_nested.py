"""Nested spans for real: recursion on two threads at once (tests/fixtures/elf/recurse.c),
every call paired with its own begin, `depth` exact, latency as the fixture measured it;
a plain span on the same probes counts the begins it replaced instead of being silently
wrong; calls deeper than settings.span_depth are counted, not timed."""

from __future__ import annotations

from pathlib import Path

from tests.e2e.conftest import json_records, run_planrunner, write_plan

PLAN = """
planrunner: 1
name: nested
targets:
  r: {{binary: {b}}}
probes:
  enter: {{usdt: r:rec:enter, args: [{{name: t}}, {{name: level}}]}}
  exit: {{usdt: r:rec:exit, args: [{{name: t}}, {{name: level}}]}}
  call:
    span: {{begin: enter, end: exit, nested: {nested}}}
{settings}outputs:
  - print: call
    fields: [begin.t, begin.level, {{elevel: end.level}}, {depth}latency]
  - print: enter
    name: flow
    fields: [t, level{flow_depth}]
"""


def _run(tmp_path: Path, b: Path, nested: bool, threads: int, depth: int,
         settings: str = "") -> tuple[list[dict], dict[tuple[int, int], tuple[int, int]], str]:
    plan = write_plan(tmp_path, PLAN.format(
        b=b, nested="true" if nested else "false", settings=settings,
        depth="depth, " if nested else "", flow_depth=", depth" if nested else ""))
    out = tmp_path / "records.json"
    proc = run_planrunner(["run", plan, "-f", "json", "-o", str(out),
                           "-c", f"{b} {threads} {depth}"])
    assert proc.returncode == 0, proc.stderr
    truth = {}
    # the fixture's own: thread level depth inner outer (its clock read on both sides
    # of each probe: the span's latency lies in [inner, outer])
    for line in proc.stdout.splitlines():
        t, level, d, inner, outer = (int(x) for x in line.split())
        truth[(t, level)] = (d, (inner, outer))
    return json_records(out.read_text()), truth, proc.stderr


def test_recursion_on_two_threads_pairs_every_call(fixtures_built, tmp_path):
    threads, depth = 2, 6
    recs, truth, _err = _run(tmp_path, fixtures_built / "recurse", True, threads, depth)
    calls = [r for r in recs if r["probe"] == "call"]
    assert len(truth) == threads * depth
    assert sorted((r["t"], r["level"]) for r in calls) == sorted(truth)
    for r in calls:
        want_depth, (inner, outer) = truth[(r["t"], r["level"])]
        assert r["depth"] == want_depth == depth - 1 - r["level"], r
        assert r["elevel"] == r["level"], r  # paired with the end of the same call
        # the fixture's clock brackets each probe (one clock: CLOCK_MONOTONIC)
        assert inner <= r["latency_ns"] <= outer, (r, inner, outer)
    flow = [r for r in recs if r["probe"] == "enter"]
    assert sorted((r["t"], r["level"], r["depth"]) for r in flow) == sorted(
        (t, level, d) for (t, level), (d, _ns) in truth.items())


def test_plain_span_on_recursion_says_so(fixtures_built, tmp_path):
    threads, depth = 2, 4
    recs, truth, err = _run(tmp_path, fixtures_built / "recurse", False, threads, depth)
    calls = [r for r in recs if r["probe"] == "call"]
    assert len(calls) == threads  # the innermost begin of each thread, once
    replaced = threads * (depth - 1)
    assert (f"{replaced} span begins replaced an open begin of their key: nested calls? "
            "use nested: true") in err


def test_deeper_than_span_depth_is_counted(fixtures_built, tmp_path):
    threads, depth, keep = 1, 8, 5
    recs, truth, err = _run(tmp_path, fixtures_built / "recurse", True, threads, depth,
                            settings=f"settings: {{span_depth: {keep}}}\n")
    calls = sorted((r["depth"], r["latency_ns"]) for r in recs if r["probe"] == "call")
    assert [d for d, _ in calls] == list(range(keep))
    assert f"{depth - keep} nested span begins deeper than settings.span_depth ({keep})" in err
