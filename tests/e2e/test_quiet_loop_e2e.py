"""A profile's loop sleeps until something is due (runtime/loop_wait.py, issue 28 item
5), and still stops at once: a SIGINT, or the end of the --pid process, ends tracing
(the `stopping` mark, PLANRUNNER_TIMING=1) within 0.2 s though the loop sleeps up to a
second, and the samples taken are all printed."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time

from tests.e2e.conftest import ROOT
from tests.e2e.executor_helpers import start_tracer

PROFILE = str(ROOT / "plans" / "cpu-profile.yaml")
SPIN = "import sys, time\nend = time.monotonic() + float(sys.argv[1])\n" \
       "def spin():\n    while time.monotonic() < end: pass\nspin()\n"
TIMING = {"PLANRUNNER_TIMING": "1"}


def _stopping_at(err: str) -> float:
    found = re.search(r"^planrunner-timing stopping ([0-9.]+) ", err, re.M)
    assert found, err
    return float(found.group(1))


def test_sigint_ends_a_sleeping_profile_loop_at_once() -> None:
    spin = subprocess.Popen([sys.executable, "-c", SPIN, "60"])
    try:
        tracer = start_tracer(PROFILE, "--pid", str(spin.pid), env=TIMING)
        time.sleep(1.7)  # inside one of the loop's sleeps (up to 1 s each)
        asked = time.monotonic()
        tracer.send_signal(signal.SIGINT)
        out, err = tracer.communicate(timeout=30)
    finally:
        spin.kill()
        spin.wait()
    assert tracer.returncode == 0, err
    assert _stopping_at(err) - asked < 0.2
    counts = [int(n) for n in re.findall(r"^python\S*\s+(\d+)$", out, re.M)]
    assert sum(counts) > 0, out  # (~170 at 99 Hz on an idle CPU; a shared one gives less)


def test_the_end_of_the_pid_process_ends_a_sleeping_loop_at_once() -> None:
    spin = subprocess.Popen([sys.executable, "-c", SPIN, "60"])
    try:
        tracer = start_tracer(PROFILE, "--pid", str(spin.pid), env=TIMING)
        time.sleep(1.7)  # the loop is sleeping
        spin.kill()
        spin.wait(timeout=30)  # (a zombie until reaped: its pidfd is readable already)
        ended = time.monotonic()
        out, err = tracer.communicate(timeout=30)
    finally:
        spin.kill()
    assert tracer.returncode == 0, err
    assert f"process {spin.pid} exited" in err
    assert _stopping_at(err) - ended < 0.2
    assert re.search(r"^python\S*\s+\d+$", out, re.M), out  # its samples are printed
