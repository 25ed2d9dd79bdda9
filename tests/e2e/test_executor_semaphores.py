"""Semaphore-gated USDT probes with the semaphore fixture (`semaphore N SLEEP report`
prints `hits=H semaphore=S`; sem:hit fires only while its semaphore is raised).

- system-wide through the kernel's reference counter: a process started before the
  tracer and one started after both get hits, only while attached, and both semaphores
  are back to 0 after the detach;
- the /proc/PID/mem fallback (poke mode, forced with PLANRUNNER_SEMAPHORE_MODE=poke since
  this kernel has reference counters) with --pid: raised while attached, recorded in a
  state file, restored on exit, and undone by the next run after a SIGKILL.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from planrunner.runtime.semaphores import kernel_has_ref_ctr
from tests.e2e.conftest import json_records, run_planrunner, write_plan
from tests.e2e.executor_helpers import (
    kill,
    probe_byte,
    semaphore_value,
    start_tracer,
    wait_for,
)

HIT = "sem:hit"
# The semaphore fixture that runs until asked (SIGUSR1) when started with REPEAT 0: a
# test's steps (compiles on a loaded machine) never outlast it.
UNTIL = "semaphore_until"
STATE_DIR = Path("/run/planrunner")
POKE = {"PLANRUNNER_SEMAPHORE_MODE": "poke"}


def sem_plan(tmp_path: Path, binary: Path) -> str:
    return write_plan(tmp_path, f"""
planrunner: 1
name: sem
targets:
  s: {{binary: {binary}}}
probes:
  hit: {{usdt: s:sem:hit, args: [{{name: i}}, {{name: x}}]}}
outputs:
  - print: hit
    fields: [i, x]
""")


def report(proc: subprocess.Popen) -> tuple[int, int]:
    hits, sem, _times = report_times(proc)
    return hits, sem


def report_times(proc: subprocess.Popen) -> tuple[int, int, list[tuple[int, int]]]:
    """`times` mode: the report, and (i, CLOCK_MONOTONIC ns) of every hit. A
    semaphore_until started with REPEAT 0 is asked to end first (SIGUSR1, by its pid)."""
    if proc.poll() is None and Path(proc.args[0]).name == UNTIL:
        proc.send_signal(signal.SIGUSR1)
    out, err = proc.communicate(timeout=60)
    m = re.fullmatch(r"hits=(\d+) semaphore=(\d+)\n", out)
    assert m, out
    times = [(int(i), int(ns)) for i, ns in re.findall(r"^hit (\d+) (\d+)$", err, re.M)]
    return int(m.group(1)), int(m.group(2)), times


def start_fixture(binary: Path, repeat: int, sleep_ms: int,
                  mode: str = "report") -> subprocess.Popen:
    proc = subprocess.Popen([str(binary), str(repeat), str(sleep_ms), mode],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert wait_for(lambda: _mapped(proc.pid, binary)), "fixture did not start"
    return proc


def _mapped(pid: int, binary: Path) -> bool:
    try:
        return str(binary) in Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return False


def test_system_wide_semaphore_before_and_after_the_tracer(fixtures_built, tmp_path):
    if not kernel_has_ref_ctr():
        pytest.skip("this kernel has no uprobe reference counters")
    b = fixtures_built / UNTIL
    early = start_fixture(b, 0, 10, "times")  # started before the tracer, runs until asked
    try:
        time.sleep(0.2)
        assert semaphore_value(early.pid, b, HIT) == 0
        tracer = start_tracer(sem_plan(tmp_path, b), "-f", "json")
        assert wait_for(lambda: semaphore_value(early.pid, b, HIT) == 1)
        assert probe_byte(early.pid, b, HIT) == 0xCC  # the uprobe's int3 is in place
        late = subprocess.run([str(b), "5", "0", "report"], capture_output=True, text=True,
                              timeout=30)
        assert late.stdout == "hits=5 semaphore=1\n"  # started after the tracer: raised
        time.sleep(0.5)
        asked_to_stop = time.monotonic_ns()
        tracer.send_signal(signal.SIGINT)
        out, err = tracer.communicate(timeout=30)
        assert tracer.returncode == 0, err
        # detached: semaphore back to 0 and the int3 gone in the process still running
        assert semaphore_value(early.pid, b, HIT) == 0
        assert probe_byte(early.pid, b, HIT) == 0x90
        recs = json_records(out)
        mine = [r["i"] for r in recs if r["pid"] == early.pid]
        later = [(r["i"], r["x"]) for r in recs if r["pid"] not in (early.pid,)]
        assert later == [(i, 3 * i) for i in range(5)]
        time.sleep(0.3)  # let it hit a few times after the detach, then end it
        hits, sem, times = report_times(early)
        assert sem == 0 and hits == len(times)
        # sem:hit fired only while the semaphore was up, and every hit before the stop
        # was asked for was traced, in order. While the link closes, the kernel drops the
        # program before the semaphore (tens of ms here): a hit then is not traced.
        before_stop = [i for i, ns in times if ns < asked_to_stop]
        assert len(before_stop) >= 10
        assert mine[:len(before_stop)] == before_stop, (mine, times, asked_to_stop)
        assert mine == [i for i, _ in times[:len(mine)]]
    finally:
        kill(early)


def _state_files() -> list[Path]:
    return sorted(STATE_DIR.glob("semaphores-*.json")) if STATE_DIR.exists() else []


def test_poke_mode_raises_and_restores_through_proc_mem(fixtures_built, tmp_path):
    b = fixtures_built / UNTIL
    target = start_fixture(b, 0, 10)  # runs until report() asks it to end
    try:
        assert semaphore_value(target.pid, b, HIT) == 0
        tracer = start_tracer(sem_plan(tmp_path, b), "-f", "json", "-p", str(target.pid),
                              env=POKE)
        assert wait_for(lambda: semaphore_value(target.pid, b, HIT) == 1)
        state = [json.loads(p.read_text()) for p in _state_files()]
        mine = [s for s in state if s["owner"] == tracer.pid]
        assert len(mine) == 1 and [r["pid"] for r in mine[0]["raised"]] == [target.pid]
        time.sleep(0.5)
        tracer.send_signal(signal.SIGTERM)
        out, err = tracer.communicate(timeout=30)
        assert tracer.returncode == 0, err
        assert semaphore_value(target.pid, b, HIT) == 0
        assert not [p for p in _state_files() if f"-{tracer.pid}." in p.name]
        recs = json_records(out)
        assert recs and {r["pid"] for r in recs} == {target.pid}
        assert [r["x"] for r in recs] == [3 * r["i"] for r in recs]
        hits, sem = report(target)
        assert sem == 0 and 0 <= hits - len(recs) <= 1, (hits, len(recs))
    finally:
        kill(target)


def test_poke_mode_after_sigkill_the_next_run_restores(fixtures_built, tmp_path):
    b = fixtures_built / UNTIL
    target = start_fixture(b, 0, 10)  # runs until the end of the test
    try:
        plan = sem_plan(tmp_path, b)
        tracer = start_tracer(plan, "-f", "json", "-p", str(target.pid), env=POKE)
        assert wait_for(lambda: semaphore_value(target.pid, b, HIT) == 1)
        tracer.kill()  # no cleanup can run
        tracer.communicate(timeout=30)
        assert semaphore_value(target.pid, b, HIT) == 1  # left raised...
        assert [p for p in _state_files() if f"-{tracer.pid}." in p.name]  # ...and recorded
        again = run_planrunner(["run", plan, "-f", "json", "-p", str(target.pid),
                                "-d", "0.3"], env={**os.environ, **POKE})
        assert again.returncode == 0, again.stderr
        assert "restored 1 semaphore a previous planrunner run left raised" in again.stderr
        assert semaphore_value(target.pid, b, HIT) == 0
        assert not [p for p in _state_files() if f"-{tracer.pid}." in p.name]
    finally:
        kill(target)
