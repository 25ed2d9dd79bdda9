"""An empty run says why, on stderr at exit, with exit status 0 (issue 22 item 4):

- `-c 'python3.11 fib.py'` where `python3.11` on PATH is a shim (a shell script that
  execs another program, as pyenv's do): no process mapped /usr/bin/python3.11, and the
  command ran the shim, which exec'd that other program;
- `--pid` of a Python that sleeps the whole run: it mapped the target but never
  reached the probe.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.e2e.conftest import run_planrunner

PY = "/usr/bin/python3.11"  # python-calls' default target


def _needs_python() -> None:
    if not os.path.exists(PY):
        pytest.skip(f"needs {PY}, the target of the python-calls plan")


def test_a_shim_on_path_is_named_and_the_target_was_never_mapped(tmp_path: Path) -> None:
    _needs_python()
    sleep = shutil.which("sleep")
    assert sleep is not None
    shim_dir = tmp_path / "shims"
    shim_dir.mkdir()
    shim = shim_dir / "python3.11"
    shim.write_text(f"#!/bin/sh\nexec {sleep} 0.5\n")
    shim.chmod(0o755)
    env = {**os.environ, "PATH": f"{shim_dir}:{os.environ.get('PATH', '')}"}
    res = run_planrunner(["run", "python-calls", "-c", "python3.11 fib.py"], env=env)
    assert res.returncode == 0, res.stderr
    err = res.stderr
    assert f"never mapped {PY}, the binary of probe call" in err, err
    assert f"the command ran {shim} (a script for /bin/sh), which exec'd " \
           f"{os.path.realpath(sleep)}" in err, err


def test_a_pid_that_never_reaches_the_probe_is_said_so() -> None:
    _needs_python()
    sleeper = subprocess.Popen([PY, "-c", "import time; print(flush=True); time.sleep(30)"],
                               stdout=subprocess.PIPE)
    try:
        assert sleeper.stdout is not None
        sleeper.stdout.readline()  # it is asleep: its start-up calls are over
        res = run_planrunner(["run", "python-calls", "--pid", str(sleeper.pid), "-d", "1"])
    finally:
        sleeper.kill()
        sleeper.wait()
    assert res.returncode == 0, res.stderr
    assert f"no events: process {sleeper.pid} mapped {PY} but never reached probe call" \
        in res.stderr, res.stderr


def test_an_empty_latency_span_without_a_profile_hook_says_entry_is_gated(
        tmp_path: Path) -> None:
    """python-latency on a script that sets no profile hook: function__entry never fires
    for it, the span output `latency` stays empty, and the gate is said at exit (the
    span has no sites of its own: it was explained by nothing)."""
    _needs_python()
    script = tmp_path / "quiet.py"
    script.write_text("def f(n):\n    return n + 1\n\nfor i in range(100):\n    f(i)\n")
    res = run_planrunner(["run", "python-latency", "--set", "file_match=quiet.py",
                          "--no-cache", "-c", f"{PY} {script}"])
    assert res.returncode == 0, res.stderr
    assert "(no events)" in res.stdout, res.stdout
    assert "no events: the command (process " in res.stderr, res.stderr
    assert f"mapped {PY}, but CPython fires python:function__entry only while a profile " \
           "or trace hook is set" in res.stderr, res.stderr
