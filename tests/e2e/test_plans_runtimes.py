"""The language-runtime and shell plans against the real programs: python-gc,
python-flow, python-calls, python-latency, python-threads on /usr/bin/python3.11;
java-gc, java-threads, java-classes, java-calls, java-latency, java-flow, java-objnew
on OpenJDK 17's libjvm.so; c-threads, c-allocs on glibc; bash-readline on /bin/bash
fed lines through a pty."""

from __future__ import annotations

import os
import pty
import re
import shutil
import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest

from tests.e2e.conftest import json_records, run_plan_out, run_planrunner
from tests.e2e.workloads.helpers import tracing

MS = 1_000_000
PYTHON = "/usr/bin/python3.11"
WORKLOADS = Path(__file__).resolve().parent / "workloads"
PY_WORKLOAD = WORKLOADS / "py_workload.py"
JDK = Path("/usr/lib/jvm/java-17-openjdk-amd64")
LIBJVM = JDK / "lib" / "server" / "libjvm.so"


def need_python() -> None:
    if not os.path.exists(PYTHON):
        pytest.skip(f"{PYTHON} is not installed")


def run_plan(name: str, command: str, *sets: str) -> list[dict]:
    return run_plan_out(name, command, *sets)[0]


def truth_lines(stdout: str, tag: str) -> list[list[str]]:
    """The workload's own lines `TAG A B...`, split."""
    return [line.split()[1:] for line in stdout.splitlines() if line.startswith(tag + " ")]


def def_line(name: str) -> int:
    text = PY_WORKLOAD.read_text().splitlines()
    return next(i for i, line in enumerate(text, 1)
                if re.match(rf"(def|class) {name}\b", line))


def test_python_gc_generations_collected_and_a_slow_finalizer():
    need_python()
    recs, out = run_plan_out("python-gc", f"{PYTHON} {PY_WORKLOAD} gc")
    around = [int(ns) for _gen, ns in truth_lines(out, "gc")]  # ns around each collect
    got = [(r["generation"], r["collected"]) for r in recs]
    # the workload's own collections: 10 two-object cycles in gen 0, 5 in gen 1, then
    # 3 cycles and one Slow instance (its dict is never materialized) in gen 2
    start = got.index((0, 20))
    assert got[start - 1][0] == 2  # the flush before them
    assert got[start:start + 3] == [(0, 20), (1, 10), (2, 7)]
    slow = recs[start + 2]
    assert 150 * MS <= slow["latency_ns"]  # Slow.__del__ sleeps 0.15 s
    # each collection lies inside the workload's clock around its gc.collect()
    assert [r["latency_ns"] <= ns for r, ns in zip(recs[start:start + 3], around,
                                                   strict=True)] == [True] * 3, (recs, around)
    assert {r["pid"] for r in recs} == {recs[0]["pid"]}


def test_python_flow_entries_and_returns_in_order():
    """Entries fire only under a profile hook in CPython 3.11 (the workload sets one
    around top()); returns fire for every Python function, class bodies included."""
    need_python()
    recs = run_plan("python-flow", f"{PYTHON} {PY_WORKLOAD} flow", "file_match=py_workload")
    got = [(r["probe"], r["func"], r["line"]) for r in recs]
    top, middle, leaf = def_line("top"), def_line("middle"), def_line("leaf")
    leaf_calls = [("entry", "leaf", leaf), ("return", "leaf", leaf + 1)] * 2
    middle_call = [("entry", "middle", middle), *leaf_calls, ("return", "middle", middle + 1)]
    assert got[2:-2] == [("entry", "top", top), *middle_call, *middle_call,
                         ("return", "top", top + 1)]
    assert [(p, f) for p, f, _ in got[:2]] == [("return", "Node"), ("return", "Slow")]
    assert [(p, f) for p, f, _ in got[-2:]] == [("return", "run_flow"), ("return", "<module>")]
    assert all(r["file"] == str(PY_WORKLOAD) for r in recs)
    assert len({r["tid"] for r in recs}) == 1
    # depth from the nested span: top 0, middle 1, leaf 2; returns never entered at 0
    want = {"top": 0, "middle": 1, "leaf": 2}
    assert [r["depth"] for r in recs] == [want.get(r["func"], 0) for r in recs]


def test_python_calls_counts_by_file_and_function():
    need_python()
    recs = run_plan("python-calls", f"{PYTHON} {PY_WORKLOAD} calls", "interval=1s")
    counts: Counter[tuple[str, str]] = Counter()
    intervals: dict[str, list[int]] = {}
    for r in recs:
        assert r["output"] == "calls"
        counts[(r["file"], r["func"])] += r["count"]
        intervals.setdefault(r["interval_start"], []).append(r["count"])
    for interval in intervals.values():  # top 20 per interval, the busiest first
        assert len(interval) <= 20 and interval == sorted(interval, reverse=True)
    ours = {func: n for (file, func), n in counts.items() if file == str(PY_WORKLOAD)}
    # functions called once (run_calls, <module>) are far below the top 20
    assert ours == {"alpha": 500, "beta": 300, "gamma": 200}
    # start-up code ran too (importlib, site...), counted under its own files
    assert any(file.startswith("<frozen importlib") for file, _ in counts)


def test_python_latency_recursive_calls_each_timed():
    need_python()
    recs, out = run_plan_out("python-latency", f"{PYTHON} {PY_WORKLOAD} latency",
                             "file_match=py_workload")
    # depth, ns inside each call, ns from before its call to after its return
    naps = [[int(x) for x in line] for line in truth_lines(out, "nap")]
    assert sorted(d for d, _, _ in naps) == [0, 1, 2, 3, 4]
    by_func = {r["func"]: r for r in recs}
    assert by_func["fib"]["count"] == 1973  # fib(15), every recursive call paired
    nap = by_func["nap"]
    assert nap["count"] == 5
    inner = sum(ns for _, ns, _ in naps) / len(naps)
    outer = sum(ns for _, _, ns in naps) / len(naps)
    # each span lies between the workload's clock inside the call and around it
    assert inner <= nap["avg"] <= outer, (nap, naps)
    assert set(by_func) == {"fib", "nap"}  # entered before the hook: no entry, not timed


def _threads_checked(recs: list[dict], out: str, prefix: str) -> list[dict]:
    """The plan's records of the workload's threads, checked against its own list."""
    # name, tid and the ns around the call that started it, as the workload saw them
    want = {int(tid): int(ns) for name, tid, ns in truth_lines(out, "thread")
            if name.startswith(prefix)}
    assert len(want) == 3
    ours = [r for r in recs if r["new_tid"] in want]
    assert sorted(r["new_tid"] for r in ours) == sorted(want)
    assert len({r["pid"] for r in ours}) == 1
    assert len({r["start"] for r in ours}) == 1  # one start routine for the three
    assert all(0 < r["latency_ns"] <= want[r["new_tid"]] for r in ours), (ours, want)
    return ours


def test_python_threads_created_with_their_native_ids():
    need_python()
    recs, out = run_plan_out("python-threads", f"{PYTHON} {PY_WORKLOAD} threads")
    ours = _threads_checked(recs, out, "planrunner-py-")
    assert all(r["comm"] == "python3.11" and r["tid"] == r["pid"] for r in ours)
    # python3.11 is not position-independent: thread_run lies in its first LOAD segment
    start = ours[0]["start"]
    assert 0x400000 <= start < 0x400000 + os.path.getsize(PYTHON)


ROUTINES = ("reader_main", "writer_main", "pthread_exit")
# The threads fixture lives this long after its threads: its first event wakes the
# reader, which reads its maps (where libc is) while it runs (plan-format.md, usym).
LINGER_MS = 300


def created_threads(stdout: str) -> list[tuple[str, int, int]]:
    """The threads fixture's own lines: (start routine, its address, the argument)."""
    return [(name, int(addr, 16), int(arg)) for name, addr, arg in
            (line.split() for line in stdout.splitlines()
             if line.split()[:1] and line.split()[0] in ROUTINES)]


def test_c_threads_start_routine_and_argument(fixtures_built):
    """The fixture prints each start routine's name and address as it passes them: the
    plan names every one (two in the PIE, libc's pthread_exit in a shared library)."""
    threads = fixtures_built / "threads"
    recs, out = run_plan_out("c-threads", f"{threads} 2 50 {LINGER_MS}")
    truth = created_threads(out)
    assert len(truth) == 8
    assert [(r["start"]["symbol"], r["start"]["address"], r["arg"]) for r in recs] == truth, out
    assert all(r["start"]["offset"] == 0 for r in recs)
    for r in recs:
        module = r["start"]["module"]
        assert (module == str(threads) if r["start"]["symbol"] != "pthread_exit"
                else os.path.basename(module) == "libc.so.6")
    assert len({r["new_tid"] for r in recs} | {recs[0]["pid"]}) == 9
    assert all(r["comm"] == "threads" and r["tid"] == r["pid"] for r in recs)


def test_c_threads_text_names_the_start_routine(fixtures_built):
    proc = run_planrunner(["run", "c-threads", "-c",
                           f"{fixtures_built / 'threads'} 1 50 {LINGER_MS}"],
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    starts = re.findall(r"created tid \d+: start (\S+) arg (0x\d)", proc.stdout)
    assert starts == [("reader_main+0x0", "0x0"), ("writer_main+0x0", "0x1"),
                      ("writer_main+0x0", "0x2"), ("pthread_exit+0x0", "0x3")], (
        proc.stdout + proc.stderr)


def test_c_allocs_bytes_by_function_and_malloc_sizes(tmp_path):
    if shutil.which("gcc") is None:
        pytest.skip("needs gcc to build tests/e2e/workloads/allocs.c")
    prog = tmp_path / "allocs"
    subprocess.run(["gcc", "-O0", "-o", str(prog), str(WORKLOADS / "allocs.c")], check=True,
                   timeout=60)
    recs = run_plan("c-allocs", str(prog))
    assert {r["comm"] for r in recs} == {"allocs"}  # the program alone, no stdio buffers
    by_output = {r["output"]: r for r in recs}
    assert by_output["malloc"]["sum"] == 100 * 1000 + 20 * 16
    assert by_output["calloc"]["sum"] == 50 * 10 * 24
    assert by_output["realloc"]["sum"] == 20 * 4096
    buckets = {(b["low"], b["high"]): b["count"]
               for b in by_output["malloc_sizes"]["buckets"] if b["count"]}
    assert buckets == {(16, 32): 20, (512, 1024): 100}


@pytest.fixture(scope="module")
def jvm_workload(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not LIBJVM.exists() or not (JDK / "bin" / "javac").exists():
        pytest.skip(f"needs OpenJDK 17 at {JDK} (apt-get install openjdk-17-jdk-headless)")
    out = tmp_path_factory.mktemp("jvm")
    subprocess.run([str(JDK / "bin" / "javac"), "-d", str(out),
                    str(WORKLOADS / "JvmWorkload.java"), str(WORKLOADS / "JvmCalls.java")],
                   check=True, timeout=120)
    return out


def java(classes: Path, *args: str) -> str:
    return f"{JDK / 'bin' / 'java'} -Xshare:auto -cp {classes} JvmWorkload {' '.join(args)}"


def test_java_gc_one_full_collection_per_system_gc(jvm_workload):
    recs = run_plan("java-gc", java(jvm_workload, "4", "0"), f"libjvm={LIBJVM}")
    # with G1 (the default) System.gc() is a full collection; the small heap of this
    # program needs no other collection
    assert [r["full"] for r in recs] == [1, 1, 1, 1]
    assert all(0 < r["latency_ns"] < 2000 * MS for r in recs)
    assert {r["comm"] for r in recs} == {"VM Thread"}


def test_java_threads_start_and_stop_with_names_and_ids(jvm_workload):
    recs = run_plan("java-threads", java(jvm_workload, "0", "3"), f"libjvm={LIBJVM}")
    ours = [r for r in recs if r["name"].startswith("planrunner-worker-")]
    starts = sorted((r["name"], r["java_tid"], r["native_tid"], r["daemon"])
                    for r in ours if r["probe"] == "start")
    stops = sorted((r["name"], r["java_tid"], r["native_tid"], r["daemon"])
                   for r in ours if r["probe"] == "stop")
    assert [s[0] for s in starts] == [f"planrunner-worker-{i}" for i in (1, 2, 3)]
    assert stops == starts  # every worker stopped, with the same ids
    for name, _jtid, native, daemon in starts:
        assert daemon == 0
        start = next(r for r in ours if r["probe"] == "start" and r["name"] == name)
        assert native == start["tid"]  # the native id is the Linux thread id
    assert len({s[1] for s in starts}) == 3
    # the JVM's own daemon threads are reported too
    assert any(r["name"] == "Reference Handler" and r["daemon"] == 1 for r in recs)


def test_java_classes_loaded_with_a_prefix(jvm_workload):
    recs = run_plan("java-classes", java(jvm_workload, "0", "1"), f"libjvm={LIBJVM}",
                    "prefix=JvmWorkload")
    names = [r["class"] for r in recs]
    assert names[0] == "JvmWorkload"
    assert "JvmWorkload$PlanrunnerMarker" in names
    assert all(n.startswith("JvmWorkload") for n in names)
    assert all(r["shared"] == 0 for r in recs)  # application classes: not from CDS
    marker = next(r for r in recs if r["class"] == "JvmWorkload$PlanrunnerMarker")
    assert marker["comm"] == "planrunner-work"  # loaded by the worker thread that used it
    every = run_plan("java-classes", java(jvm_workload, "0", "0"), f"libjvm={LIBJVM}")
    assert any(r["class"] == "java/lang/Object" for r in every)
    assert len(every) > 300


EXTENDED = "-XX:+ExtendedDTraceProbes"


def java_calls(classes: Path, mode: str, *flags: str) -> str:
    return f"{JDK / 'bin' / 'java'} {' '.join(flags)} -cp {classes} JvmCalls {mode}"


def test_java_latency_recursive_calls_each_timed(jvm_workload):
    recs, out = run_plan_out("java-latency", java_calls(jvm_workload, "latency", EXTENDED),
                             f"libjvm={LIBJVM}", "class_prefix=JvmCalls")
    # depth, ns inside each call, ns from before its call to after its return
    naps = [[int(x) for x in line] for line in truth_lines(out, "nap")]
    assert sorted(d for d, _, _ in naps) == [0, 1, 2, 3, 4]
    by_method = {r["method"]: r for r in recs}
    assert by_method["nap"]["count"] == 5 and by_method["nap"]["class"] == "JvmCalls"
    inner = sum(ns for _, ns, _ in naps) / len(naps)
    outer = sum(ns for _, _, ns in naps) / len(naps)
    assert inner <= by_method["nap"]["avg"] <= outer, (by_method["nap"], naps)
    assert by_method["main"]["count"] == 1
    calls = run_plan("java-latency", java_calls(jvm_workload, "calls", EXTENDED),
                     f"libjvm={LIBJVM}", "class_prefix=JvmCalls")
    assert {r["method"]: r["count"] for r in calls} == {"fib": 1973, "main": 1, "<clinit>": 1}


def test_java_calls_counts_methods(jvm_workload):
    recs = run_plan("java-calls", java_calls(jvm_workload, "calls", EXTENDED),
                    f"libjvm={LIBJVM}", "interval=1s")
    counts: Counter[tuple[str, str]] = Counter()
    for r in recs:
        counts[(r["class"], r["method"])] += r["count"]
    assert counts[("JvmCalls", "fib")] == 1973
    assert counts[("java/lang/Object", "<init>")] > 0  # the JDK's own calls too
    ours = run_plan("java-calls", java_calls(jvm_workload, "calls", EXTENDED),
                    f"libjvm={LIBJVM}", "class_prefix=JvmCalls")
    assert sorted((r["method"], r["count"]) for r in ours) == [
        ("<clinit>", 1), ("fib", 1973), ("main", 1)]


def test_java_flow_indented_by_depth(jvm_workload):
    recs = run_plan("java-flow", java_calls(jvm_workload, "flow", EXTENDED),
                    f"libjvm={LIBJVM}", "class_prefix=JvmCalls")
    got = [(r["probe"], r["method"], r["depth"]) for r in recs]
    leaf = [("entry", "leaf", 3), ("return", "leaf", 3)] * 2
    middle = [("entry", "middle", 2), *leaf, ("return", "middle", 2)]
    assert got == [("entry", "<clinit>", 0), ("return", "<clinit>", 0), ("entry", "main", 0),
                   ("entry", "top", 1), *middle, *middle, ("return", "top", 1),
                   ("return", "main", 0)]
    assert {r["signature"] for r in recs if r["method"] == "leaf"} == {"(I)I"}


def test_java_method_probes_need_the_flag_and_say_so(jvm_workload):
    proc = run_planrunner(["run", "java-flow", "-f", "json", "--set", f"libjvm={LIBJVM}",
                           "--set", "class_prefix=JvmCalls", "-c",
                           java_calls(jvm_workload, "flow")], timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "this JVM was started without it" in proc.stderr
    assert json_records(proc.stdout) == []


def test_java_objnew_counts_by_class(jvm_workload):
    recs = run_plan("java-objnew", java_calls(jvm_workload, "objnew", EXTENDED),
                    f"libjvm={LIBJVM}")
    counts = {r["class"]: r["count"] for r in recs if "count" in r}
    assert counts["JvmCalls$Widget"] == 1000
    assert counts["[I"] >= 300  # the workload's int[10] x300, and the JDK's own
    ours = run_plan("java-objnew", java_calls(jvm_workload, "objnew", EXTENDED),
                    f"libjvm={LIBJVM}", "class_prefix=JvmCalls")
    assert [(r["class"], r["count"]) for r in ours] == [("JvmCalls$Widget", 1000)]


def drive_bash(lines: list[str]) -> None:
    """An interactive bash on a pty, fed `lines` one by one, then `exit`."""
    pid, fd = pty.fork()
    if pid == 0:
        os.execve("/bin/bash", ["bash", "--norc", "--noprofile", "-i"],
                  {"PS1": "$ ", "TERM": "dumb", "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8",
                   "HISTFILE": "/dev/null"})
    try:
        _read_until(fd, b"$ ")
        for line in [*lines, "exit"]:
            os.write(fd, line.encode() + b"\n")
            if line != "exit":
                _read_until(fd, b"$ ")
        _read_until(fd, None)
    finally:
        _, status = os.waitpid(pid, 0)
        os.close(fd)
    assert os.waitstatus_to_exitcode(status) == 0


def _read_until(fd: int, marker: bytes | None, timeout: float = 10) -> bytes:
    buf, deadline = b"", time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            chunk = os.read(fd, 4096)
        except OSError:  # the pty closes when bash exits
            return buf
        if not chunk:
            return buf
        buf += chunk
        if marker is not None and buf.endswith(marker):
            return buf
    raise AssertionError(f"bash did not answer: {buf!r}")


def test_bash_readline_lines_of_an_interactive_bash():
    if shutil.which("bash") is None or not os.path.exists("/bin/bash"):
        pytest.skip("needs /bin/bash")
    lines = ["echo planrunner-one", "true  two   spaces", "x=$((6 * 7)); echo $x",
             "echo ünïcode 'quoted' \"words\""]
    with tracing("bash-readline") as tracer:
        drive_bash(lines)
        recs = tracer.stop()
    pids = {r["pid"] for r in recs if r["line"] == "echo planrunner-one"}
    assert len(pids) == 1
    ours = [r["line"] for r in recs if r["pid"] in pids]
    assert ours == [*lines, "exit"]
    assert all(r["comm"] == "bash" for r in recs if r["pid"] in pids)
