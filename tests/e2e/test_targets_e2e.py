"""Targets traced for real: a probe in a shared library (rip-relative global included),
PIE and non-PIE executables, and a semaphore-gated probe of the real CPython traced
system-wide in a process started after the tracer."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from tests.e2e.conftest import ROOT, json_records, run_planrunner, write_plan
from tests.e2e.executor_helpers import simple_plan, start_tracer, stop_tracer, wait_for

PYTHON = "/usr/bin/python3.11"


def test_shared_library_probe_with_rip_relative_global(fixtures_built, tmp_path):
    lib = fixtures_built / "libprobe.so"
    plan = write_plan(tmp_path, f"""
planrunner: 1
name: lib
targets:
  lib: {{binary: {lib}}}
probes:
  work: {{usdt: lib:lib:work}}
  state: {{usdt: lib:lib:state}}
outputs:
  - print: work
    fields: [arg1, arg2]
  - print: state
    fields: [arg1]
""")
    proc = run_planrunner(["run", plan, "-f", "json", "-c", f"{fixtures_built}/libuser 4"])
    assert proc.returncode == 0, proc.stderr
    recs = json_records(proc.stdout)
    work = [(r["arg1"], r["arg2"]) for r in recs if r["probe"] == "work"]
    state = [r["arg1"] for r in recs if r["probe"] == "state"]
    assert work == [(i, 2 * i) for i in range(1, 5)]
    assert state == [1, 2, 3, 4]  # lib_calls, read rip-relative inside the .so


@pytest.mark.parametrize("build", ["simple_pie", "simple_nopie"])
def test_pie_and_non_pie(build, fixtures_built, tmp_path):
    binary = fixtures_built / build
    plan = write_plan(tmp_path, f"""
planrunner: 1
name: simple
targets:
  s: {{binary: {binary}}}
probes:
  hit: {{usdt: s:simple:hit, args: [{{name: i}}, {{name: x}}]}}
outputs:
  - print: hit
    fields: [i, x]
""")
    proc = run_planrunner(["run", plan, "-f", "json", "-c", f"{binary} 3"])
    assert proc.returncode == 0, proc.stderr
    assert [(r["i"], r["x"]) for r in json_records(proc.stdout)] == [
        (1, 100), (2, 200), (3, 300)]


def test_python_semaphore_probe_system_wide_in_a_later_process(tmp_path):
    """python:import__find__load__start is gated by a semaphore; no --pid: the kernel's
    reference counter raises it in a python3.11 started after the tracer."""
    if not os.path.exists(PYTHON):
        pytest.skip(f"{PYTHON} is not installed")
    plan = write_plan(tmp_path, f"""
planrunner: 1
name: pyimports
targets:
  py: {{binary: {PYTHON}}}
probes:
  load:
    usdt: py:python:import__find__load__start
    args: [{{name: module, type: string}}]
    where: startswith(module, "planrunner_marker_")
outputs:
  - print: load
    fields: [module]
""")
    modules = ["planrunner_marker_a", "planrunner_marker_b", "planrunner_marker_c"]
    for name in modules:
        (tmp_path / f"{name}.py").write_text("X = 1\n")
    tracer = start_tracer(plan, "-f", "json")
    try:
        script = "".join(f"import {m}\n" for m in modules)
        started = subprocess.run([PYTHON, "-S", "-c", script], cwd=tmp_path, timeout=30)
        assert started.returncode == 0
        time.sleep(0.3)  # the consumer drains on a short timer
    finally:
        out, err = stop_tracer(tracer)
    recs = json_records(out)
    assert tracer.returncode == 0, err
    assert [r["module"] for r in recs] == modules, err
    assert all(r["comm"].startswith("python3") for r in recs)


def test_pid_filter_only_traces_that_process(fixtures_built, tmp_path):
    """Both processes are held stopped (SIGSTOP, by their pids, during the sleep before
    their first hit) until the tracer says it is attached, so neither fires before it,
    however slow the compile on a loaded machine."""
    binary = fixtures_built / "simple_pie"
    plan = simple_plan(tmp_path, binary)
    target = subprocess.Popen([str(binary), "200", "1500", "0"])
    other = subprocess.Popen([str(binary), "200", "1500", "0"])
    try:
        for p in (target, other):
            assert wait_for(lambda p=p: _maps_file(p.pid, binary)), "fixture did not start"
            os.kill(p.pid, signal.SIGSTOP)
        tracer = start_tracer(plan, "-f", "json", "-p", str(target.pid))
        for p in (target, other):
            os.kill(p.pid, signal.SIGCONT)
        out, err = tracer.communicate(timeout=60)  # it ends when the target exits
        assert tracer.returncode == 0, err
        assert "exited" in err
        recs = json_records(out)
        assert {r["pid"] for r in recs} == {target.pid}
        assert [r["i"] for r in recs] == list(range(1, 201))
        assert other.wait(timeout=30) == 0  # it fired too, untraced
    finally:
        for p in (target, other):
            p.kill()
            p.wait()


def test_stdout_closed_early_ends_quietly(fixtures_built, tmp_path):
    binary = fixtures_built / "simple_pie"
    plan = simple_plan(tmp_path, binary)
    cmd = f"{sys.executable} -m planrunner run {plan} -c '{binary} 100000' | head -n 3"
    proc = subprocess.run(["bash", "-c", f"set -o pipefail; {cmd}"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert len(proc.stdout.splitlines()) == 3
    assert "Traceback" not in proc.stderr
    assert "BrokenPipe" not in proc.stderr


def _maps_file(pid: int, binary: object) -> bool:
    """The process has exec'd `binary` (its file is mapped)."""
    try:
        with open(f"/proc/{pid}/maps", encoding="utf-8") as fh:
            return str(binary) in fh.read()
    except OSError:
        return False
