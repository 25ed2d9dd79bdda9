"""A Go program traced for real (issue 22 item 6): tests/fixtures/go/growstack calls
main.compute(n) = 3n + 7 on a new goroutine each time, behind a padding recursion of
varying depth (some calls meet the stack guard in compute's own prologue, and morestack
restarts compute), and compute grows (copies) its goroutine's stack while it is live.

Before the fix the uretprobe made the runtime die at the first stack copy ("unexpected
return pc for main.compute", exit 2); the uprobe read %rdi (0 or a pointer instead of
n) and fired 264 times for 240 calls. Now: exit 0, every (n, result) pair as the
program logs it, exactly one entry per call; and with the calls interleaved on threads,
each return paired with its own entry (the span is keyed by goroutine).
"""

from __future__ import annotations

from collections import Counter

import pytest

from tests.e2e.conftest import json_records, run_planrunner, write_plan

CALLS = 240

pytest.importorskip("capstone")


def _plan(tmp_path, binary) -> str:  # type: ignore[no-untyped-def]
    return write_plan(tmp_path, f"""
planrunner: 1
name: go-compute
targets:
  g: {{binary: {binary}}}
probes:
  enter: {{uprobe: "g:main.compute", args: [{{name: n}}]}}
  leave: {{uretprobe: "g:main.compute", retval: {{type: int64}}}}
  call: {{span: {{begin: enter, end: leave}}}}
outputs:
  - print: enter
    fields: [n]
  - print: call
    fields: [begin.n, end.retval, latency]
""")


@pytest.mark.parametrize("mode", ["", "together"])
def test_go_function_entry_and_return_are_exact_and_the_program_lives(go_growstack,
                                                                       tmp_path, mode):
    """`together`: the calls interleave on 2 threads and move between them; the span's
    default key between two Go probes is the goroutine (a thread key paired one call's
    entry with another's return, and replaced open begins)."""
    log, records = tmp_path / "log.txt", tmp_path / "records.json"
    proc = run_planrunner(["run", _plan(tmp_path, go_growstack), "-f", "json", "-o",
                           str(records), "-c", f"{go_growstack} {CALLS} 300 {log} {mode}"],
                          timeout=180)
    assert proc.returncode == 0, proc.stderr  # the program's own exit status
    assert "unexpected return pc" not in proc.stderr
    lines = log.read_text().split("\n")
    assert lines[CALLS] == f"calls {CALLS}"
    logged = [(int(line.split()[0]), int(line.split()[1])) for line in lines[:CALLS]]
    assert logged == [(1000 + i, 3 * (1000 + i) + 7) for i in range(CALLS)]
    recs = json_records(records.read_text())
    entries = [r["n"] for r in recs if r["probe"] == "enter"]
    assert Counter(entries) == Counter(n for n, _r in logged)  # one entry per call
    calls = [(r["n"], r["retval"]) for r in recs if r["probe"] == "call"]
    assert sorted(calls) == logged
    assert all(r["latency_ns"] > 0 for r in recs if r["probe"] == "call")
    assert "replaced an open begin" not in proc.stderr


def test_go_entry_alone_fires_once_per_call_with_its_argument(go_growstack, tmp_path):
    """The entry probe without a return probe (the program lived before the fix too):
    before, 264 events for 240 calls (morestack restarts compute), reading %rdi."""
    plan = write_plan(tmp_path, f"""
planrunner: 1
name: go-entry
targets: {{g: {{binary: {go_growstack}}}}}
probes: {{enter: {{uprobe: "g:main.compute", args: [{{name: n}}]}}}}
outputs: [{{print: enter, fields: [n]}}]
""")
    records = tmp_path / "records.json"
    proc = run_planrunner(["run", plan, "-f", "json", "-o", str(records),
                           "-c", f"{go_growstack} {CALLS} 300 {tmp_path / 'log.txt'}"],
                          timeout=180)
    assert proc.returncode == 0, proc.stderr
    entries = sorted(r["n"] for r in json_records(records.read_text()))
    assert entries == [1000 + i for i in range(CALLS)]


def test_a_go_string_result_is_read_from_its_two_words(go_growstack, tmp_path):
    """label(n) returns "n=N": pointer in RAX (`retval`), length in RBX (`ret2`); Go
    strings have no NUL, so the length is what ends it."""
    plan = write_plan(tmp_path, f"""
planrunner: 1
name: go-label
targets: {{g: {{binary: {go_growstack}}}}}
probes: {{label: {{uretprobe: "g:main.label"}}}}
outputs: [{{print: label, fields: [ret2, {{text: "str(retval, ret2)"}}]}}]
""")
    records, log = tmp_path / "records.json", tmp_path / "log.txt"
    proc = run_planrunner(["run", plan, "-f", "json", "-o", str(records),
                           "-c", f"{go_growstack} 50 300 {log}"], timeout=180)
    assert proc.returncode == 0, proc.stderr
    labels = [line.split()[2] for line in log.read_text().split("\n")[:50]]
    got = [(r["ret2"], r["text"]) for r in json_records(records.read_text())]
    assert got == [(len(t), t) for t in labels]
