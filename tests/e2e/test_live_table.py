"""The live table in a real terminal: `planrunner run runtime-stat` inside tmux (stdout
a terminal, so the Rich table is redrawn in place on the alternate screen), a Python
and a Ruby workload started after it attached, the screen read back with
`tmux capture-pane -p`: their rows are there with their command lines and plausible
rates, sorted by calls/s; after Ctrl-C the last table stays on the normal screen."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
WORKLOADS = ROOT / "tests" / "e2e" / "workloads"
PYTHON = "/usr/bin/python3.11"
RUBY = shutil.which("ruby3.1")
ROW = re.compile(r"^\s*(\d+)\s+(.*?)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s*$")


# A tmux server of our own (its own socket): nothing of another server's sessions or
# options (a window-size there would change ours).
SOCKET = f"planrunner-test-{os.getpid()}"


# Without COLUMNS and LINES (a test run may have them, e.g. 80 and 24: Rich would take
# them over the terminal's own size).
ENV = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}


def tmux(*args: str) -> str:
    return subprocess.run(["tmux", "-L", SOCKET, "-f", "/dev/null", *args], env=ENV,
                          capture_output=True, text=True, check=True, timeout=10).stdout


@pytest.fixture
def session(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed (apt-get install tmux)")
    if not os.path.exists(PYTHON):
        pytest.skip(f"{PYTHON} is not installed")
    name = f"planrunner-live-{os.getpid()}"
    err = tmp_path / "stderr"
    cmd = (f"cd {ROOT} && {ROOT / '.venv' / 'bin' / 'planrunner'} run runtime-stat "
           f"--set every=500ms 2>{err}; sleep 120")
    tmux("new-session", "-d", "-s", name, "-x", "160", "-y", "40", cmd)
    try:
        deadline = time.monotonic() + 90
        while "Tracing" not in (err.read_text() if err.exists() else ""):
            assert time.monotonic() < deadline, err.read_text()
            time.sleep(0.2)
        yield name, err
    finally:
        subprocess.run(["tmux", "-L", SOCKET, "kill-server"], capture_output=True)


def rows_of(screen: str) -> dict[int, tuple[str, list[float]]]:
    out = {}
    for line in screen.splitlines():
        m = ROW.match(line)
        if m:
            out[int(m[1])] = (m[2], [float(v) for v in m.groups()[2:]])
    return out


def test_the_live_table_shows_processes_started_later_with_their_rates(
        session: tuple[str, Path]) -> None:
    name, err = session
    workloads = [subprocess.Popen([PYTHON, str(WORKLOADS / "stat_workload.py"),
                                   "3000000", "3"])]
    if RUBY is not None:  # Ruby is optional here: the Python row is the proof
        workloads.append(subprocess.Popen([RUBY, str(WORKLOADS / "stat_workload.rb"),
                                           "2000000", "3"]))
    else:
        print("ruby3.1 is not installed: the live table is checked with Python only")
    pids = {p.pid for p in workloads}
    try:
        deadline = time.monotonic() + 30
        while True:
            screen = tmux("capture-pane", "-p", "-t", name)
            rows = rows_of(screen)
            if all(pid in rows and rows[pid][1][0] > 0 for pid in pids):
                break
            assert time.monotonic() < deadline, screen
            time.sleep(0.3)
        lines = screen.splitlines()
        assert any(re.match(r"^\[\d\d:\d\d:\d\d\] stat: calls/s, objects/s, gcs/s, "
                            r"threads/s, loads/s by pid \(sorted by calls/s", li)
                   for li in lines), screen
        assert any(li.split()[:3] == ["pid", "cmdline", "calls/s"] for li in lines), screen
        assert "Ctrl-C to end" in screen
        calls = [vals[0] for _, vals in rows.values()]
        assert calls == sorted(calls, reverse=True), screen  # sorted by calls/s
        py_cmd, py_vals = rows[workloads[0].pid]
        assert "stat_workload.py" in py_cmd
        assert 1_000 < py_vals[0] < 100_000_000, screen  # calls/s of a busy loop
        if RUBY is not None:
            rb_cmd, rb_vals = rows[workloads[1].pid]
            assert "stat_workload.rb" in rb_cmd
            assert 1_000 < rb_vals[0] < 100_000_000 and rb_vals[1] > 1_000, screen
    finally:
        for p in workloads:
            p.wait(timeout=60)
    tmux("send-keys", "-t", name, "C-c")
    deadline = time.monotonic() + 30
    while True:  # the run ends: the alternate screen goes, the last table is printed
        screen = tmux("capture-pane", "-p", "-t", name)
        if "Ctrl-C to end" not in screen and "stat: calls/s" in screen:
            break
        assert time.monotonic() < deadline, screen
        time.sleep(0.3)
    assert re.search(r"pid\s+cmdline\s+calls/s", screen), screen
    assert "Traceback" not in err.read_text()
