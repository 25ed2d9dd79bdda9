"""CPython frames in stacks, end to end (issue 26): Debian's python3.11 (no debug
symbols) runs tests/e2e/workloads/py_frames.py; BPF reads its frames where each event
happens and planrunner puts them in place of the interpreter loop's frames.

- profile: hot() and cold() share the CPU 3:1, as the workload measures itself
  (time.thread_time_ns): the samples whose stack holds each are in that ratio;
- a uprobe on libc's getppid, called by inner <- middle <- outer in two threads at
  once: each thread's stack names exactly its chain, with the lines of the calls;
- the same when the process is gone (os._exit) right after the calls;
- recursion, a generator and a coroutine (asyncio) in the chain where they run;
- the cpu-profile plan's flame graph, opened in headless chromium, names hot and cold;
- a profile's samples are counted by line (BPF hashes a frame by the line the reader
  wrote for its instruction): every frame is on a line of its function, the calls on
  their call sites, and most samples send no copy to be named again.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.e2e.conftest import ROOT, json_records, run_planrunner, write_plan

PYTHON = "/usr/bin/python3.11"
WORKLOAD = ROOT / "tests" / "e2e" / "workloads" / "py_frames.py"
FILE = "py_frames.py"
# The share of hot among hot+cold samples: ~500 samples (5 CPU seconds at 99 Hz) give
# it a standard deviation of about 0.02; the issue asks for the ratio within 30%
# (3:1 -> 2.1..3.9, a share of 0.68..0.80: more than 2 sigma either way).
RATIO_TOLERANCE = 0.30
CPU_SECONDS = 5


@pytest.fixture(autouse=True)
def python311() -> None:
    if not os.path.exists(PYTHON):
        pytest.skip(f"{PYTHON} is not installed (Debian: apt-get install python3.11)")


def _lines(stdout: str, word: str) -> list[list[str]]:
    return [line.split() for line in stdout.splitlines() if line.startswith(word + " ")]


def test_profile_samples_give_the_cpu_ratio_of_two_python_functions() -> None:
    res = run_planrunner(["run", "cpu-profile", "-f", "folded", "-c",
                          f"{PYTHON} {WORKLOAD} spin {CPU_SECONDS}"], timeout=300)
    assert res.returncode == 0, res.stderr
    ((_, hot_ns, _, cold_ns),) = _lines(res.stdout, "hot_ns")
    samples = {"hot": 0, "cold": 0}
    for line in res.stdout.splitlines():
        if ";" not in line:
            continue
        stack, count = line.rsplit(" ", 1)
        frames = stack.split(";")
        for name in samples:
            if f"{name} ({FILE})" in frames:
                samples[name] += int(count)
    assert samples["hot"] + samples["cold"] >= 0.6 * CPU_SECONDS * 99, samples
    measured = int(hot_ns) / int(cold_ns)
    sampled = samples["hot"] / samples["cold"]
    assert abs(sampled / measured - 1) <= RATIO_TOLERANCE, (sampled, measured, samples)


def _chain_plan(tmp_path: Path) -> str:
    return write_plan(tmp_path, """
planrunner: 1
targets:
  libc: {binary: libc.so.6}
probes:
  getppid: {uprobe: libc:getppid}
outputs:
  - print: getppid
    fields: [ustack]
""")


def _python_frames(row: dict) -> list[tuple[str, int, str]]:
    return [(f["symbol"], f["line"], f["module"]) for f in row["ustack"]
            if f["kind"] == "python"]


def _chains(tmp_path: Path, linger: bool) -> tuple[dict[str, int], dict[str, int],
                                                    dict[int, dict]]:
    """Run the chain: thread name -> tid, call site -> line, tid -> its record."""
    said = tmp_path / "said"
    cmd = f"env PY_FRAMES_OUT={said} {PYTHON} {WORKLOAD} chain" + (" linger" if linger else "")
    res = run_planrunner(["run", _chain_plan(tmp_path), "-f", "json", "-c", cmd],
                         timeout=120)
    assert res.returncode == 0, res.stderr
    tids = {name: int(tid) for _, name, tid in _lines(said.read_text(), "tid")}
    lines = {name: int(n) for _, name, n in _lines(said.read_text(), "line")}
    rows = json_records("\n".join(line for line in res.stdout.splitlines()
                                  if line.startswith("{")))
    records = {r["tid"]: r for r in rows}
    assert len(rows) == 2 and set(records) == set(tids.values()), (rows, tids)
    return tids, lines, records


def test_a_uprobe_in_a_python_chain_names_it_in_two_threads_at_once(tmp_path: Path) -> None:
    tids, lines, records = _chains(tmp_path, linger=True)
    main, other = records[tids["MainThread"]], records[tids["other"]]
    where = str(WORKLOAD)
    chain = [("inner", lines["inner"], where), ("middle", lines["middle"], where),
             ("outer", lines["outer"], where)]
    assert _python_frames(main) == [*chain, ("<module>", lines["module"], where)]
    # the other thread's chain starts in threading's Thread.run, not in <module>
    got = _python_frames(other)
    assert got[:3] == chain and [f[0] for f in got[3:]] == \
        ["Thread.run", "Thread._bootstrap_inner", "Thread._bootstrap"], got
    for row in (main, other):
        symbols = [f["symbol"] for f in row["ustack"]]
        # in place of the interpreter loop, between getppid and the entry point
        assert symbols[0] == "getppid" and "_PyEval_EvalFrameDefault" not in symbols
        assert symbols.index("inner") > 0 and row["ustack"][-1]["kind"] == "native"
    assert [f["symbol"] for f in main["ustack"]][-1] == "_start"


def test_the_chain_is_named_when_the_process_is_gone_at_once(tmp_path: Path) -> None:
    """The names are read in BPF at the event: a process that has exited by the time
    planrunner reads the record is named all the same (a line read too late is the
    function's first)."""
    tids, _, records = _chains(tmp_path, linger=False)
    names = [[f[0] for f in _python_frames(records[tids[t]])] for t in ("MainThread", "other")]
    assert names[0] == ["inner", "middle", "outer", "<module>"]
    assert names[1][:3] == ["inner", "middle", "outer"]


def _line_of(text: str) -> int:
    """The line of the workload holding `text`."""
    (n,) = [i for i, line in enumerate(WORKLOAD.read_text().splitlines(), 1) if text in line]
    return n


def test_recursion_generators_and_coroutines_are_in_the_chain(tmp_path: Path) -> None:
    res = run_planrunner(["run", _chain_plan(tmp_path), "-f", "json", "-c",
                          f"{PYTHON} {WORKLOAD} shapes"], timeout=120)
    assert res.returncode == 0, res.stderr
    rec, gen, co = (_python_frames(r) for r in json_records(res.stdout))
    calls, returns = _line_of("return rec(n - 1)"), _line_of("the end of the recursion")
    assert [(name, line) for name, line, _ in rec] == \
        [("rec", returns), ("rec", calls), ("rec", calls), ("rec", calls),
         ("<module>", _line_of("    rec(3)"))]
    assert [name for name, _, _ in gen] == ["gen", "consume", "<module>"]
    assert gen[0][1] == _line_of("yield os.getppid()")
    names = [name for name, _, _ in co]
    assert names[:2] == ["co_inner", "co_outer"] and names[-2:] == ["run", "<module>"], names
    assert "BaseEventLoop.run_until_complete" in names


def test_the_flame_graph_of_a_python_service_names_its_functions(tmp_path: Path) -> None:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        pytest.skip("no chromium (Debian: apt-get install chromium; scripts/setup.sh)")
    svg = tmp_path / "cpu.svg"
    proc = subprocess.Popen([PYTHON, str(WORKLOAD), "spin", "2"], stdout=subprocess.PIPE,
                            text=True)
    try:
        res = run_planrunner(["run", "cpu-profile", "--pid", str(proc.pid),
                              "--flamegraph", str(svg)], timeout=300)
        proc.wait(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()  # our own, by its pid
            proc.wait()
    assert res.returncode == 0, res.stderr
    dom = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu",
                          "--dump-dom", svg.as_uri()], capture_output=True, text=True,
                         timeout=120)
    for name in ("hot", "cold", "spin"):
        assert f'data-name="{name} ({FILE})"' in dom.stdout, dom.stderr[-2000:]


COPIES_NOTE = re.compile(r"planrunner-note copies full=(\d+) light=(\d+) ")


def _body_lines(function: str) -> set[int]:
    """The lines of the workload's `def FUNCTION` (up to the next blank line).

    The def line is among them: a sample taken as the frame starts, before its
    first instruction or at its RESUME, is on the def line, as Python's own
    f_lineno says (CPython 3.11 maps an instruction index < 0 to co_firstlineno).
    """
    lines = WORKLOAD.read_text().splitlines()
    start = lines.index(f"def {function}(n):")
    end = lines.index("", start)
    return set(range(start + 1, end + 1))


def test_profile_samples_keep_their_lines_and_mostly_send_no_copy() -> None:
    res = run_planrunner(["run", "cpu-profile", "-f", "json", "-c",
                          f"{PYTHON} {WORKLOAD} spin {CPU_SECONDS}"], timeout=300,
                         env={**os.environ, "PLANRUNNER_TIMING": "1"})
    assert res.returncode == 0, res.stderr
    rows = [r for r in json_records("\n".join(
        line for line in res.stdout.splitlines() if line.startswith("{")))
        if r.get("ustack")]
    lines: dict[str, dict[int, int]] = {"hot": {}, "cold": {}, "spin": {}}
    samples = 0
    for row in rows:
        frames = [f for f in row["ustack"] if f["kind"] == "python"]
        names = [f["symbol"] for f in frames]
        samples += row["count"]
        for f in frames:
            if f["symbol"] in lines and f["module"].endswith(FILE):
                got = lines[f["symbol"]]
                got[f["line"]] = got.get(f["line"], 0) + row["count"]
        if "spin" in names and names.index("spin") > 0:  # the frame spin called
            callee = names[names.index("spin") - 1]
            call = frames[names.index("spin")]["line"]
            if callee in ("hot", "cold"):
                assert call == _line_of(f"        {callee}("), (callee, call)
    assert sum(lines["hot"].values()) >= 0.4 * CPU_SECONDS * 99, lines
    for fn in ("hot", "cold"):
        assert set(lines[fn]) <= _body_lines(fn), (fn, lines[fn])
        # the loop's two lines both take samples (the for and the addition)
        assert len(lines[fn]) >= 2, (fn, lines[fn])
    note = COPIES_NOTE.search(res.stderr)
    assert note, res.stderr[-2000:]
    full, light = map(int, note.groups())
    assert full + light <= 0.8 * samples, (note.group(0), samples)
