"""runtime/child.py without BPF: `-c` commands that cannot run are refused before
anything is compiled (exit 127, as a shell), a released child becomes the command with
its exit status, one never released exits without running it, and an exec that fails
after the release says why and exits 127."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from planrunner.errors import CommandNotFound
from planrunner.runtime.child import Child


def _wait(child: Child, bound: float = 10.0) -> None:
    limit = time.monotonic() + bound
    while child.poll() is None:
        assert time.monotonic() < limit, "the child did not end"
        time.sleep(0.01)


@pytest.mark.parametrize("make,why", [
    (lambda d: "no-such-command-xyz", "command not found in PATH"),
    (lambda d: str(d / "absent"), "no such file"),
    (lambda d: str(d), "is a directory"),
    (lambda d: str(_write(d / "plain", "#!/bin/sh\n", 0o644)), "not executable"),
])
def test_a_command_that_cannot_run_is_refused_before_the_fork(tmp_path: Path, make, why):
    name = make(tmp_path)
    with pytest.raises(CommandNotFound) as err:
        Child.spawn_stopped([name, "arg"])
    assert err.value.exit_code == 127
    assert err.value.diagnostics[0].message == f"cannot run {name}: {why}"


def test_released_child_runs_the_command_with_its_exit_status(tmp_path: Path) -> None:
    child = Child.spawn_stopped(["sh", "-c", f"echo \"$0 $1\" > {tmp_path}/out; exit 3",
                                 "zero", "one two"])
    child.release()
    _wait(child)
    assert child.exit_status() == 3
    assert (tmp_path / "out").read_text() == "zero one two\n"  # argv passed as given


def test_a_child_never_released_does_not_run_the_command(tmp_path: Path) -> None:
    child = Child.spawn_stopped(["sh", "-c", f"touch {tmp_path}/ran"])
    child.kill_if_running()
    assert child.poll() is not None
    assert not (tmp_path / "ran").exists()


def test_an_exec_that_fails_after_release_exits_127(tmp_path: Path, capfd) -> None:
    script = _write(tmp_path / "noshebang", "\x7fELF not really\n", 0o755)
    child = Child.spawn_stopped([str(script)])
    child.release()
    _wait(child)
    assert child.exit_status() == 127
    assert f"planrunner: cannot run {script}: Exec format error" in capfd.readouterr().err


def _write(path: Path, text: str, mode: int) -> Path:
    path.write_text(text)
    os.chmod(path, mode)
    return path


def test_execed_says_when_the_command_replaced_the_copy_of_planrunner() -> None:
    child = Child.spawn_stopped(["sleep", "30"])
    try:
        assert not child.execed()  # waiting for the release: still a copy of us
        assert os.readlink(f"/proc/{child.pid}/exe") == os.readlink("/proc/self/exe")
        child.release()
        limit = time.monotonic() + 10
        while not child.execed():
            assert time.monotonic() < limit, "no exec seen"
            time.sleep(0.001)
        assert os.path.basename(os.readlink(f"/proc/{child.pid}/exe")) == "sleep"
        assert child.execed()  # stays true
    finally:
        os.kill(child.pid, 9)
        _wait(child)
