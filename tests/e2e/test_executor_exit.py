"""Clean exit whatever happens. For each way a run can end — its --duration, SIGINT,
SIGTERM, SIGHUP, stdout closed by the reader, a crash inside planrunner (its backend
made to raise in the loop by the tests/e2e/crash_after.py wrapper) — and for both
semaphore modes (the kernel's reference counter system-wide, and poke mode with
--pid), a long-running
semaphore fixture started by the test is checked before, during and after:
tracefs uprobe_events unchanged, no int3 (0xcc) left at either probe site in its
memory, its semaphores back to 0, no state file left, and sem:hit stops firing."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.e2e.conftest import PLANRUNNER, write_plan
from tests.e2e.executor_helpers import (
    kill,
    probe_byte,
    semaphore_value,
    start_tracer,
    uprobe_events,
    wait_for,
)

# planrunner's CLI with its backend raising RuntimeError 1 s into the loop
CRASHING = [PLANRUNNER[0], "-m", "tests.e2e.crash_after", "1"]
WAYS = ["duration", "SIGINT", "SIGTERM", "SIGHUP", "closed-stdout", "crash"]
PROBES = ("sem:hit", "sem:tick")


def _plan(tmp_path: Path, binary: Path) -> str:
    return write_plan(tmp_path, f"""
planrunner: 1
name: sem
targets:
  s: {{binary: {binary}}}
probes:
  hit: {{usdt: s:sem:hit}}
  tick: {{usdt: s:sem:tick}}
outputs:
  - {{print: hit, fields: [arg1]}}
  - {{print: tick, fields: [arg1]}}
""")


def _state_of(pid: int) -> list[Path]:
    return list(Path("/run/planrunner").glob(f"semaphores-{pid}.json"))


def _end(tracer: subprocess.Popen, way: str) -> str:
    """End the run `way`; its stderr."""
    assert tracer.stdout is not None and tracer.stderr is not None
    if way in ("SIGINT", "SIGTERM", "SIGHUP"):
        tracer.send_signal(getattr(signal, way))
    elif way == "closed-stdout":
        tracer.stdout.readline()
        tracer.stdout.close()  # the next batch it writes gets EPIPE
        tracer.wait(timeout=30)
        return tracer.stderr.read()
    return tracer.communicate(timeout=30)[1]  # duration, crash: it ends by itself


@pytest.mark.parametrize("mode", ["refctr", "poke"])
@pytest.mark.parametrize("way", WAYS)
def test_every_way_of_ending_leaves_the_target_as_it_was(way, mode, fixtures_built,
                                                         tmp_path):
    b = fixtures_built / "semaphore"
    target = subprocess.Popen([str(b), "100000", "5"])  # ~9 min: killed by pid below
    try:
        assert wait_for(lambda: str(b) in Path(f"/proc/{target.pid}/maps").read_text())
        events_before = uprobe_events()
        for probe in PROBES:
            assert (semaphore_value(target.pid, b, probe), probe_byte(target.pid, b, probe)) \
                == (0, 0x90)
        extra = ["-f", "json"]
        env = {}
        if mode == "poke":
            extra += ["-p", str(target.pid)]
            env["PLANRUNNER_SEMAPHORE_MODE"] = "poke"
        if way == "duration":
            extra += ["-d", "1.5"]
        tracer = start_tracer(_plan(tmp_path, b), *extra, env=env,
                              entry=CRASHING if way == "crash" else PLANRUNNER)
        try:
            # attached: int3 at both sites, both semaphores raised
            assert wait_for(lambda: all(semaphore_value(target.pid, b, p) == 1
                                        for p in PROBES)), mode
            assert [probe_byte(target.pid, b, p) for p in PROBES] == [0xCC, 0xCC]
            if mode == "poke":
                state = json.loads(_state_of(tracer.pid)[0].read_text())
                assert len(state["raised"]) == 2
            if way not in ("duration", "crash"):
                time.sleep(0.5)
            err = _end(tracer, way)
        finally:
            if tracer.poll() is None:
                tracer.kill()
                tracer.wait()
        if way == "crash":
            assert tracer.returncode != 0 and "simulated crash" in err, err
        else:
            assert tracer.returncode == 0, err
            assert "Traceback" not in err, err
        # nothing left behind, in tracefs, in the target's memory or in the state dir
        assert uprobe_events() == events_before
        for probe in PROBES:
            assert semaphore_value(target.pid, b, probe) == 0, probe
            assert probe_byte(target.pid, b, probe) == 0x90, probe
        assert not _state_of(tracer.pid)
        assert target.poll() is None  # the target was never disturbed
    finally:
        kill(target)


def test_events_stop_after_the_end(fixtures_built, tmp_path):
    """After the tracer is gone the fixture's hit count stops growing (semaphore 0):
    semaphore_until in `times` mode runs until asked and logs each hit's time, so every
    hit before the stop was asked for is traced and none comes after the tracer ended,
    however long the compile took on a loaded machine."""
    b = fixtures_built / "semaphore_until"
    target = subprocess.Popen([str(b), "0", "10", "times"], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    try:
        assert wait_for(lambda: str(b) in Path(f"/proc/{target.pid}/maps").read_text())
        tracer = start_tracer(_plan(tmp_path, b), "-f", "json")
        assert wait_for(lambda: semaphore_value(target.pid, b, "sem:hit") == 1)
        time.sleep(0.5)
        asked_to_stop = time.monotonic_ns()
        tracer.send_signal(signal.SIGINT)
        out, _ = tracer.communicate(timeout=30)
        ended = time.monotonic_ns()
        traced = [json.loads(line) for line in out.splitlines()]
        hits = [r["arg1"] for r in traced if r["probe"] == "hit" and r["pid"] == target.pid]
        time.sleep(0.3)  # it runs on, untraced, then is asked to end (SIGUSR1, by pid)
        target.send_signal(signal.SIGUSR1)
        report, err = target.communicate(timeout=30)
        m = re.fullmatch(r"hits=(\d+) semaphore=(\d+)\n", report)
        assert m and m.group(2) == "0", report
        times = [(int(i), int(ns)) for i, ns in re.findall(r"^hit (\d+) (\d+)$", err, re.M)]
        assert int(m.group(1)) == len(times)
        # every hit before the stop was asked for was traced, in order (while the link
        # closes the kernel may drop the program before the semaphore: not traced)
        before_stop = [i for i, ns in times if ns < asked_to_stop]
        assert len(before_stop) >= 10
        assert hits[:len(before_stop)] == before_stop, (hits, times, asked_to_stop)
        assert not [i for i, ns in times if ns > ended], (times, ended)  # stopped growing
    finally:
        kill(target)
