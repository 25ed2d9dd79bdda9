"""Stopping when told (issue 15 items 11, 12, 13, 15), with real processes and signals:
a stop during start-up ends it between two sites, detaches and never runs the `-c`
command; a stdout nobody reads holds neither the deadline nor a signal; a `-c` command
that ignores SIGTERM gets SIGKILL; the exit status says when the command was killed or
records were not written. After each run, no probe of the run is left (tracefs)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.e2e.conftest import PLANRUNNER, ROOT, write_plan
from tests.e2e.executor_helpers import (
    libc_path,
    simple_plan,
    start_tracer,
    uprobe_events,
)

SLOW = [PLANRUNNER[0], "-m", "tests.e2e.slow_attach"]
LIBC_FUNCTIONS = ("getpid", "getppid", "getuid", "geteuid", "getgid", "getegid", "umask",
                  "sync", "sched_yield", "getpgrp")


def _libc_plan(tmp_path: Path) -> str:
    probes = "".join(f"  p{i}: {{uprobe: c:{fn}}}\n" for i, fn in enumerate(LIBC_FUNCTIONS))
    outputs = "".join(f"  - {{count: p{i}}}\n" for i in range(len(LIBC_FUNCTIONS)))
    return write_plan(tmp_path, f"planrunner: 1\nname: many\ntargets: {{c: {{binary: "
                      f"{libc_path()}}}}}\nprobes:\n{probes}outputs:\n{outputs}")


def _ended(proc: subprocess.Popen, timeout: float = 30, read_stdout: bool = True) -> str:
    """Wait for a tracer to end by itself; its stderr (SIGKILL it, by pid, when it hangs:
    a failing test must not leave a tracer attached). Without `read_stdout`, its stdout
    stays a pipe nobody reads."""
    try:
        if read_stdout:
            return proc.communicate(timeout=timeout)[1]
        proc.wait(timeout=timeout)
        assert proc.stderr is not None
        return proc.stderr.read()
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise


def _no_probe_left(pid: int) -> None:
    assert f"pr_{pid}_" not in uprobe_events()  # the perf-event strategy's names


def test_sigterm_during_attach_stops_there_and_never_runs_the_command(tmp_path):
    ran = tmp_path / "ran"
    proc = subprocess.Popen([*SLOW, "0.5", "run", _libc_plan(tmp_path), "-c",
                             f"touch {ran}"], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    line = proc.stderr.readline()
    while line and not line.startswith("test-hook: attached 2"):
        line = proc.stderr.readline()
    assert line, proc.communicate()
    start = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    err = _ended(proc)
    took = time.monotonic() - start
    assert took < 2.0, took  # before: every remaining site was attached first
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert ("stopped by SIGTERM during start-up, before tracing began: 2 of 10 probe sites "
            "had been attached, now detached; the command was not started") in err
    assert "Tracing" not in err
    assert not ran.exists()
    _no_probe_left(proc.pid)


def test_sigint_during_compile_ends_start_up_at_once(fixtures_built, tmp_path):
    ran = tmp_path / "ran"
    proc = subprocess.Popen([*SLOW, "0", "10", "run", simple_plan(tmp_path, fixtures_built /
                                                            "simple_pie"),
                             "-c", f"touch {ran}"], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    assert proc.stderr.readline() == "test-hook: compiling\n"
    start = time.monotonic()
    proc.send_signal(signal.SIGINT)  # a compile of 10 s more has begun
    err = _ended(proc)
    assert time.monotonic() - start < 2  # before: it waited for the compile
    assert "test-hook: attached" not in err
    assert proc.returncode == 128 + signal.SIGINT, err
    assert "stopped by SIGINT during start-up, before tracing began: nothing had been " \
           "attached; the command was not started" in err
    assert not ran.exists()


def _burst(binary: Path, n: int) -> None:
    subprocess.run([str(binary), str(n)], check=True, timeout=60)


def test_a_stdout_nobody_reads_does_not_hold_the_deadline(fixtures_built, tmp_path):
    """Before: `--duration 3s` ended after 15 s, and only because the test gave up."""
    b = fixtures_built / "simple_pie"
    tracer = start_tracer(simple_plan(tmp_path, b), "-f", "json", "-d", "2s")
    start = time.monotonic()  # stdout is a pipe this test never reads
    _burst(b, 20000)  # ~1 MB of JSON lines: far more than a pipe holds
    err = _ended(tracer, read_stdout=False)
    took = time.monotonic() - start
    assert took < 2 + 1 + 1.5, took  # the deadline, the output's grace, start-up slack
    assert tracer.returncode == 4, err
    assert "records not written: the output was blocked for 1 s after the stop" in err
    assert err.splitlines()[-1].startswith("incomplete trace: ")
    _no_probe_left(tracer.pid)


def test_a_signal_ends_a_run_blocked_on_stdout(fixtures_built, tmp_path):
    b = fixtures_built / "simple_pie"
    tracer = start_tracer(simple_plan(tmp_path, b), "-f", "json")
    _burst(b, 20000)
    time.sleep(0.3)
    start = time.monotonic()
    tracer.send_signal(signal.SIGINT)
    err = _ended(tracer, read_stdout=False)
    assert time.monotonic() - start < 1 + 1.5
    assert tracer.returncode == 4 and "records not written" in err, err


def test_a_command_that_ignores_sigterm_is_killed_and_the_status_says_so(fixtures_built,
                                                                          tmp_path):
    b = fixtures_built / "simple_pie"
    ready = tmp_path / "ready"
    tracer = start_tracer(simple_plan(tmp_path, b), "-c",
                          f"sh -c \"trap '' TERM; touch {ready}; exec sleep 60\"")
    deadline = time.monotonic() + 10
    while not ready.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    child = _child_of(tracer.pid)
    start = time.monotonic()
    tracer.send_signal(signal.SIGINT)  # to planrunner alone, not the process group
    try:
        err = _ended(tracer, timeout=20)
    finally:
        if os.path.exists(f"/proc/{child}"):
            os.kill(child, signal.SIGKILL)
    took = time.monotonic() - start
    assert 3 <= took < 6, took  # before: it waited for the command forever
    assert tracer.returncode == 128 + signal.SIGKILL, err
    assert f"the command (pid {child}) did not end within 3 s of SIGTERM: sent SIGKILL" in err
    assert not os.path.exists(f"/proc/{child}")
    _no_probe_left(tracer.pid)


def test_a_command_ended_by_planrunner_gives_its_signal_status(fixtures_built, tmp_path):
    b = fixtures_built / "simple_pie"
    tracer = start_tracer(simple_plan(tmp_path, b), "-d", "0.5s", "-c", "sleep 60")
    err = _ended(tracer)
    assert tracer.returncode == 128 + signal.SIGTERM, err
    assert "was still running: sent SIGTERM" in err


def _child_of(pid: int) -> int:
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    assert len(children) == 1, children
    return int(children[0])


@pytest.mark.parametrize("extra", [(), ("-d", "60")])
def test_a_closed_stdout_ends_a_command_with_its_status_and_says_so(fixtures_built,
                                                                    tmp_path, extra):
    """`| head` with -c: the command gets SIGTERM, stderr says so and the status is the
    command's (143), with or without --duration. Before: without -d, SIGTERM unsaid and
    status 0."""
    b = fixtures_built / "simple_pie"
    tracer = start_tracer(simple_plan(tmp_path, b), *extra, "--follow-children", "-c",
                          f"sh -c '{b} 100000; exec sleep 60'")
    assert tracer.stdout is not None
    header, first = tracer.stdout.readline(), tracer.stdout.readline()
    assert header.startswith("TIME") and "hit0" in first, (header, first)
    child = _child_of(tracer.pid)
    tracer.stdout.close()  # as `head -2` does
    try:
        err = _ended(tracer, timeout=30, read_stdout=False)
    finally:
        if os.path.exists(f"/proc/{child}"):
            os.kill(child, signal.SIGKILL)
    assert tracer.returncode == 128 + signal.SIGTERM, err
    assert f"the command (pid {child}) was still running: sent SIGTERM" in err
    assert "Traceback" not in err
    _no_probe_left(tracer.pid)
