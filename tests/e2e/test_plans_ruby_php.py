"""The ruby-* and php-* plans against Debian's Ruby 3.1 (libruby-3.1.so) and PHP 8.2
CLI, driven by workloads that know their own ground truth (tests/e2e/workloads/
rb_workload.rb and php_workload.php): call counts and depths exact, latencies within a
stated tolerance of what the workload measured itself."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.e2e.conftest import json_records, run_plan_out, run_planrunner

MS = 1_000_000
RUBY = "/usr/bin/ruby3.1"
LIBRUBY = "/usr/lib/x86_64-linux-gnu/libruby-3.1.so.3.1"
PHP = "/usr/bin/php8.2"
WORKLOADS = Path(__file__).resolve().parent / "workloads"
RB_WORKLOAD = WORKLOADS / "rb_workload.rb"
PHP_WORKLOAD = WORKLOADS / "php_workload.php"


def need(*paths: str) -> None:
    for path in paths:
        if not os.path.exists(path):
            pytest.skip(f"{path} is not installed (scripts/setup.sh installs ruby3.1 and "
                        "php8.2-cli)")


def run_plan(name: str, command: str, *sets: str) -> tuple[list[dict], str]:
    return run_plan_out(name, command, *sets)


def ruby(mode: str) -> str:
    return f"{RUBY} {RB_WORKLOAD} {mode}"


def rb_line(text: str) -> int:
    return next(i for i, line in enumerate(RB_WORKLOAD.read_text().splitlines(), 1)
                if text in line)


def truth_lines(stdout: str, tag: str) -> list[list[int]]:
    """The workload's own lines `TAG N N...` (it prints them; records are JSON)."""
    return [[int(x) for x in line.split()[1:]] for line in stdout.splitlines()
            if line.startswith(tag + " ")]


def test_ruby_calls_counts_methods_by_class():
    need(RUBY, LIBRUBY)
    recs, _ = run_plan("ruby-calls", ruby("calls"))
    counts: dict[tuple[str, str], int] = {}
    for r in recs:
        assert r["output"] == "methods"
        counts[(r["class"], r["method"])] = counts.get((r["class"], r["method"]), 0) + r["count"]
    # fib(15) calls fib 1973 times; the rest as the workload says
    assert counts[("Object", "fib")] == 1973
    assert counts[("Greeter", "hello")] == 300
    assert counts[("Greeter", "wave")] == 200


def test_ruby_latency_recursive_calls_each_timed():
    need(RUBY, LIBRUBY)
    recs, out = run_plan("ruby-latency", ruby("latency"))
    # depth, ns inside each call, ns from before its call to after its return
    naps = truth_lines(out, "nap")
    assert sorted(d for d, _, _ in naps) == [0, 1, 2, 3, 4]
    (nap,) = [r for r in recs if r.get("method") == "nap"]
    assert nap["class"] == "Object" and nap["count"] == 5
    inner = sum(ns for _, ns, _ in naps) / len(naps)
    outer = sum(ns for _, _, ns in naps) / len(naps)
    # each span lies between the workload's clock inside the call and around it
    assert inner <= nap["avg"] <= outer, (nap, naps)
    # a plain span would have kept one begin per thread: ~10 ms (the innermost), not ~30
    assert nap["avg"] > 25 * MS
    fib = run_plan("ruby-latency", ruby("calls"), "class_match=Object")[0]
    assert [(r["class"], r["method"], r["count"]) for r in fib] == [("Object", "fib", 1973)]


def test_ruby_flow_indents_by_depth():
    need(RUBY, LIBRUBY)
    recs, _ = run_plan("ruby-flow", ruby("flow"), "file_match=rb_workload")
    got = [(r["probe"], r["method"], r["depth"]) for r in recs]
    leaf = [("entry", "leaf", 2), ("return", "leaf", 2)] * 2
    middle = [("entry", "middle", 1), *leaf, ("return", "middle", 1)]
    assert got == [("entry", "top", 0), *middle, *middle, ("return", "top", 0)]
    assert all(r["class"] == "Object" and r["file"] == str(RB_WORKLOAD) for r in recs)
    assert [r["line"] for r in recs if r["method"] == "leaf"] == [rb_line("def leaf")] * 8
    assert len({r["tid"] for r in recs}) == 1
    text = run_planrunner(["run", "ruby-flow", "--set", "file_match=rb_workload",
                           "-c", ruby("flow")], timeout=120)
    assert text.returncode == 0, text.stderr
    lines = [line for line in text.stdout.splitlines() if "Object#" in line]
    assert lines[:3] == [
        f"-> Object#top ({RB_WORKLOAD}:{rb_line('def top')})",
        f"  -> Object#middle ({RB_WORKLOAD}:{rb_line('def middle')})",
        f"    -> Object#leaf ({RB_WORKLOAD}:{rb_line('def leaf')})"]


def test_ruby_gc_one_mark_per_collection():
    need(RUBY, LIBRUBY)
    recs, out = run_plan("ruby-gc", ruby("gc"))
    (gcs,) = truth_lines(out, "gc")  # GC.count at the end: every collection of the run
    marks = [r for r in recs if r.get("probe") == "mark"]
    assert len(marks) == gcs[0] >= 3
    assert all(0 < r["latency_ns"] < 1000 * MS for r in marks)
    (sweeps,) = [r for r in recs if r.get("output") == "sweeps"]
    assert sweeps["count"] >= gcs[0] and sweeps["avg"] > 0


def test_ruby_objnew_by_class_and_literal_sizes():
    need(RUBY, LIBRUBY)
    recs, _ = run_plan("ruby-objnew", ruby("objnew"))
    objects = {r["class"]: r["count"] for r in recs if r["output"] == "objects"}
    assert objects["Widget"] == 1000
    ours = {(r["output"], r["line"]): r["sum"] for r in recs
            if r["output"] != "objects" and r["file"] == str(RB_WORKLOAD)}
    assert ours[("arrays", rb_line("kept << [i, i, i]"))] == 300 * 3
    assert ours[("hashes", rb_line("kept << { a: i, b: i }"))] == 200 * 4  # keys + values
    assert ours[("strings", rb_line('kept << "1234567890'))] == 4000 * 100


def php(mode: str) -> str:
    return f"{PHP} {PHP_WORKLOAD} {mode}"


def run_php_plan(name: str, mode: str, *sets: str) -> tuple[list[dict], str]:
    """PHP fires its probes only with USE_ZEND_DTRACE=1; `-c` passes planrunner's
    environment on to the command."""
    need(PHP)
    args = ["run", name, "-f", "json", "-c", php(mode)]
    for s in sets:
        args += ["--set", s]
    proc = run_planrunner(args, timeout=120, env={**os.environ, "USE_ZEND_DTRACE": "1"})
    assert proc.returncode == 0, proc.stderr
    assert "USE_ZEND_DTRACE" not in proc.stderr  # no preflight warning: it is set
    records = "\n".join(line for line in proc.stdout.splitlines() if line.startswith("{"))
    return json_records(records), proc.stdout


def php_line(text: str) -> int:
    return next(i for i, line in enumerate(PHP_WORKLOAD.read_text().splitlines(), 1)
                if text in line)


def test_php_calls_counts_functions_and_methods():
    recs, _ = run_php_plan("php-calls", "calls", "file_match=php_workload")
    counts: dict[tuple[str, str], int] = {}
    for r in recs:
        counts[(r["class"], r["func"])] = counts.get((r["class"], r["func"]), 0) + r["count"]
    assert counts == {("", "fib"): 1973, ("Greeter", "hello"): 300,
                      ("Greeter", "wave"): 200, ("", "main"): 1}
    assert {r["scope"] for r in recs if r["class"] == "Greeter"} == {"::"}


def test_php_calls_says_why_nothing_fires_without_use_zend_dtrace():
    need(PHP)
    env = {k: v for k, v in os.environ.items() if k != "USE_ZEND_DTRACE"}
    proc = run_planrunner(["run", "php-calls", "-f", "json", "-c", php("calls")],
                          timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "only with USE_ZEND_DTRACE=1 in its environment: this process lacks it" in proc.stderr
    assert json_records(proc.stdout) == []


def test_php_latency_recursive_calls_each_timed():
    recs, out = run_php_plan("php-latency", "latency")
    naps = truth_lines(out, "nap")  # depth, ns inside, ns from before the call to after
    assert sorted(d for d, _, _ in naps) == [0, 1, 2, 3, 4]
    (nap,) = [r for r in recs if r["func"] == "nap"]
    assert nap["class"] == "" and nap["count"] == 5
    inner = sum(ns for _, ns, _ in naps) / len(naps)
    outer = sum(ns for _, _, ns in naps) / len(naps)
    assert inner <= nap["avg"] <= outer, (nap, naps)
    fib = run_php_plan("php-latency", "calls")[0]
    assert {(r["class"], r["func"]): r["count"] for r in fib} == {
        ("", "fib"): 1973, ("Greeter", "hello"): 300, ("Greeter", "wave"): 200, ("", "main"): 1}


def test_php_flow_indents_by_depth():
    recs, out = run_php_plan("php-flow", "flow", "file_match=php_workload")
    got = [(r["probe"], r["func"], r["depth"]) for r in recs]
    leaf = [("entry", "leaf", 3), ("return", "leaf", 3)] * 2
    middle = [("entry", "middle", 2), *leaf, ("return", "middle", 2)]
    assert got == [("entry", "main", 0), ("entry", "top", 1), *middle, *middle,
                   ("return", "top", 1), ("return", "main", 0)]
    assert [r["line"] for r in recs if r["func"] == "leaf"] == [php_line("function leaf")] * 8
    assert all(r["file"] == str(PHP_WORKLOAD) for r in recs)


def test_ruby_threads_created_and_named():
    need(RUBY, LIBRUBY)
    recs, out = run_plan("ruby-threads", ruby("threads"))
    # name, tid and the ns around its Thread.new, as the workload saw them
    lines = [line.split()[1:] for line in out.splitlines() if line.startswith("thread ")]
    want = {name: int(tid) for name, tid, _ns in lines}
    around = {int(tid): int(ns) for _name, tid, ns in lines}
    assert sorted(want) == ["rb-worker-1", "rb-worker-2", "rb-worker-3"]
    created = [r for r in recs if r["output"] == "created" and r["new_tid"] in want.values()]
    assert sorted(r["new_tid"] for r in created) == sorted(want.values())
    assert len({r["start"] for r in created}) == 1  # Ruby's thread start routine
    assert all(0 < r["latency_ns"] <= around[r["new_tid"]] for r in created), (
        created, around)
    named = [r["thread_name"] for r in recs if r["output"] == "named"]
    assert named == ["rb-worker-1", "rb-worker-2", "rb-worker-3"]
    assert len({r["handle"] for r in recs if r["output"] == "named"}) == 3
    assert {r["pid"] for r in recs} == {created[0]["pid"]}

