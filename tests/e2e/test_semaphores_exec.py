"""Poke-mode semaphores and a target that exec()s (issue 15 item 2).

exec_sem waits until the tracer raises its semaphore, then exec()s squat_word, a
different program that maps a page at the old semaphore's address and stores 0x4141
there. The pid and its start time stay the same; the memory does not. Neither the
tracer's restore at exit nor a later run's recovery after a SIGKILL may write the word
(before the fix both decremented it: 0x4141 -> 0x4140).
"""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

from tests.e2e.conftest import run_planrunner, write_plan
from tests.e2e.executor_helpers import (
    kill,
    runtime_address,
    semaphore_value,
    site,
    start_tracer,
    wait_for,
)

POKE = {"PLANRUNNER_SEMAPHORE_MODE": "poke"}
STATE_DIR = Path("/run/planrunner")
TICK = "execsem:tick"


def exec_plan(tmp_path: Path, binary: Path) -> str:
    return write_plan(tmp_path, f"""
planrunner: 1
name: execsem
targets:
  e: {{binary: {binary}}}
probes:
  tick: {{usdt: e:execsem:tick}}
outputs:
  - print: tick
    fields: [pid]
""")


def _mapped(pid: int, binary: Path) -> bool:
    """The semaphore's page of `binary` is mapped in `pid` (exec has got that far)."""
    try:
        runtime_address(pid, binary, site(binary, TICK).semaphore_offset)
    except AssertionError:
        return False
    return True


def _exe(pid: int) -> str:
    try:
        return os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return ""


def start_target(build: Path) -> subprocess.Popen:
    """exec_sem, which becomes squat_word once its semaphore is raised (or after 30 s);
    squat_word waits for a line on stdin."""
    proc = subprocess.Popen([str(build / "exec_sem"), "30000", str(build / "squat_word")],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert wait_for(lambda: _exe(proc.pid).endswith("/exec_sem")
                    and _mapped(proc.pid, build / "exec_sem")), "exec_sem did not start"
    return proc


def raise_then_exec(tmp_path: Path, build: Path, target: subprocess.Popen
                    ) -> subprocess.Popen:
    """Start a poke-mode tracer on `target`; return it once the target became
    squat_word and wrote its word."""
    binary = build / "exec_sem"
    tracer = start_tracer(exec_plan(tmp_path, binary), "-f", "json", "-p", str(target.pid),
                          env=POKE)
    assert target.stdout is not None
    assert target.stdout.readline() == "ready\n"  # exec'd; 0x4141 is in place
    assert _exe(target.pid).endswith("/squat_word")
    return tracer


def final_word(target: subprocess.Popen) -> str:
    out, _ = target.communicate("\n", timeout=30)  # squat_word prints its word and exits
    return out.strip()


def _state_files(pid: int) -> list[Path]:
    return [p for p in STATE_DIR.glob(f"semaphores-{pid}.json")] if STATE_DIR.exists() \
        else []


def test_restore_after_exec_leaves_the_new_program_alone(fixtures_built, tmp_path):
    target = start_target(fixtures_built)
    try:
        tracer = raise_then_exec(tmp_path, fixtures_built, target)
        tracer.send_signal(signal.SIGINT)
        _out, err = tracer.communicate(timeout=30)
        assert tracer.returncode == 0, err
        assert not _state_files(tracer.pid)
        assert final_word(target) == "word=0x4141"
    finally:
        kill(target)


def test_recovery_after_sigkill_and_exec_leaves_the_new_program_alone(fixtures_built,
                                                                       tmp_path):
    target = start_target(fixtures_built)
    try:
        tracer = raise_then_exec(tmp_path, fixtures_built, target)
        tracer.kill()  # no cleanup: the state file stays behind
        tracer.communicate(timeout=30)
        assert _state_files(tracer.pid)
        again = run_planrunner(["run", exec_plan(tmp_path, fixtures_built / "exec_sem"),
                                "-d", "0.3"], env={**os.environ, **POKE})
        assert again.returncode == 0, again.stderr
        assert "restored" not in again.stderr  # nothing was lowered...
        assert not _state_files(tracer.pid)  # ...and the stale entry is gone
        assert final_word(target) == "word=0x4141"
    finally:
        kill(target)


def test_semaphore_is_raised_while_exec_sem_runs(fixtures_built, tmp_path):
    """The fixture does what the tests above rely on: a tracer raises its semaphore."""
    binary = fixtures_built / "exec_sem"
    target = subprocess.Popen([str(binary), "30000", "/bin/true"], stdout=subprocess.PIPE)
    try:
        # /proc/PID/exe names the new program before exec has mapped its segments
        assert wait_for(lambda: _exe(target.pid).endswith("/exec_sem")
                        and _mapped(target.pid, binary))
        assert semaphore_value(target.pid, binary, TICK) == 0
        tracer = start_tracer(exec_plan(tmp_path, binary), "-p", str(target.pid), env=POKE)
        target.wait(timeout=30)  # raised -> exec /bin/true -> exit
        assert target.returncode == 0
        tracer.send_signal(signal.SIGINT)
        tracer.communicate(timeout=30)
    finally:
        kill(target)
