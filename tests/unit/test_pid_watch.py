"""runtime/pid_watch.py: every --pid process ended, by pidfd, or by /proc/PID/stat where
pidfd_open is refused."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import time

import pytest

from planrunner.runtime import pid_watch
from planrunner.runtime.pid_watch import ExitWatch


def _sleeper(seconds: float) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", f"import time; time.sleep({seconds})"])


def _ends_within(watch: ExitWatch, seconds: float) -> bool:
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        if watch.all_ended():
            return True
        time.sleep(0.01)
    return False


@pytest.mark.parametrize("pidfd", [True, False])
def test_all_ended_once_every_process_has_exited_zombies_included(
        pidfd: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    if not pidfd:
        def refused(_pid: int, _flags: int = 0) -> int:
            raise OSError(errno.ENOSYS, "pidfd_open")
        monkeypatch.setattr(pid_watch.os, "pidfd_open", refused)
    short, long_ = _sleeper(0.2), _sleeper(30)
    try:
        watch = ExitWatch([short.pid, long_.pid])
        assert not watch.all_ended()
        time.sleep(0.5)  # the short one is a zombie now (not reaped)
        assert not watch.all_ended()  # the other still runs
        long_.kill()
        assert _ends_within(watch, 5.0)
        assert short.poll() is not None
        watch.close()
    finally:
        long_.kill()
        short.wait()
        long_.wait()


def test_a_process_gone_before_the_watch_has_ended() -> None:
    gone = _sleeper(0)
    gone.wait()  # reaped: its pid is free (ESRCH)
    watch = ExitWatch([gone.pid])
    assert watch.all_ended()


def test_no_descriptor_is_left_open() -> None:
    before = len(os.listdir("/proc/self/fd"))
    proc = _sleeper(0.1)
    try:
        watch = ExitWatch([proc.pid])
        assert _ends_within(watch, 5.0)
        watch.close()
    finally:
        proc.wait()
    assert len(os.listdir("/proc/self/fd")) == before
