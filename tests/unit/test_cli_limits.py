"""Command-line values that would silently do the wrong thing are usage errors (exit 2):
`--pid` 0, negative, of no process or of a kernel thread (issue 15 item 8), and a
`--duration` of 0, nan, inf or below zero (item 14). Each is refused before any plan is
compiled or anything attached."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from planrunner.commands.pids import pid_arg
from planrunner.commands.run import parse_seconds
from planrunner.errors import UsageError

ROOT = Path(__file__).resolve().parents[2]
DEMO = ["sdt-demo", "--set", "demo=tests/fixtures/elf/bin/demo"]


def cli(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "planrunner", *argv], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)


def _a_dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid  # reaped: no process has it until the pid space wraps


def _a_kernel_thread() -> int | None:
    for pid in (2, *range(3, 200)):
        try:
            with open(f"/proc/{pid}/stat") as fh:
                flags = int(fh.read().rpartition(")")[2].split()[6])
        except (OSError, IndexError, ValueError):
            continue
        if flags & 0x00200000:
            return pid
    return None


@pytest.mark.parametrize("command", ["run", "validate", "render"])
@pytest.mark.parametrize("pid", ["0", "-5"])
def test_pid_zero_or_negative_is_a_usage_error(command: str, pid: str) -> None:
    extra = ["--duration", "1"] if command == "run" else []
    proc = cli(command, *DEMO, f"--pid={pid}", *extra)
    assert proc.returncode == 2, proc.stderr
    assert f"argument -p/--pid: {pid} is not a process id: give a positive pid" \
        in proc.stderr
    assert "Tracing" not in proc.stdout + proc.stderr


def test_pid_of_no_process_is_a_usage_error() -> None:
    pid = _a_dead_pid()
    for argv in (["validate", *DEMO], ["render", *DEMO], ["list", "c"]):
        proc = cli(*argv, "--pid", str(pid))
        assert proc.returncode == 2, (argv, proc.stderr)
        assert f"argument -p/--pid: no process with pid {pid}" in proc.stderr


def test_pid_of_a_kernel_thread_is_a_usage_error() -> None:
    pid = _a_kernel_thread()
    if pid is None:
        pytest.skip("no kernel thread visible in /proc (a pid namespace?)")
    proc = cli("validate", *DEMO, "--pid", str(pid))
    assert proc.returncode == 2, proc.stderr
    assert f"pid {pid} (" in proc.stderr and "is a kernel thread" in proc.stderr


def test_pid_arg_accepts_a_live_user_process() -> None:
    assert pid_arg(str(os.getpid())) == os.getpid()


@pytest.mark.parametrize("text", ["0", "0s", "0ms", "nan", "inf", "-inf", "-1", "-2s",
                                  "1e400"])
def test_duration_without_a_limit_is_refused(text: str) -> None:
    with pytest.raises(UsageError, match="--duration"):
        parse_seconds(text)


@pytest.mark.parametrize("text", ["1e10", "9223372036", "1e18", "1e300", "9223372036s",
                                  "100000h", "31536001"])
def test_duration_past_what_a_timer_takes_is_refused(text: str) -> None:
    """Before: accepted, then an OverflowError traceback from signal.setitimer."""
    with pytest.raises(UsageError, match="at most 365 days"):
        parse_seconds(text)


def test_duration_of_a_year_is_taken() -> None:
    assert parse_seconds("31536000") == 365 * 86400


def test_duration_too_long_from_the_command_line_is_exit_2() -> None:
    proc = cli("run", *DEMO, "-d", "1e10", "-c", "true")
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "--duration must be a positive, finite time of at most 365 days, not '1e10'" \
        in proc.stderr


@pytest.mark.parametrize("text,seconds", [("1.5", 1.5), ("500ms", 0.5), ("2s", 2.0)])
def test_duration_positive_is_seconds(text: str, seconds: float) -> None:
    assert parse_seconds(text) == pytest.approx(seconds)


def test_duration_zero_from_the_command_line_is_exit_2() -> None:
    # Before the fix, 0 meant "no limit" and `-c true` ended the run with status 0.
    proc = cli("run", *DEMO, "--duration", "0", "-c", "true")
    assert proc.returncode == 2, proc.stderr
    assert "--duration must be a positive, finite time of at most 365 days, not '0'" \
        in proc.stderr
