"""A container's binary at a path the host has too: `--pid` resolves the plan's path inside
the process's root (/proc/PID/root), so the probes go on the file the process runs, not on
the host's file of the same name; `list`, `validate` and `run` agree on which file it is.

The "container" is a private mount namespace (unshare(1), no docker): the host has the
non-PIE build of simple.c at DIR/app, the namespace has the PIE build bind-mounted over
the same path (same probe, other offsets, another inode)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from tests.e2e.conftest import json_records, run_planrunner, write_plan
from tests.e2e.executor_helpers import kill, start_tracer, wait_for


def _maps_inode(pid: int, ino: int) -> bool:
    """Whether `pid` has a file of inode `ino` mapped."""
    try:
        lines = Path(f"/proc/{pid}/maps").read_text().splitlines()
    except OSError:
        return False
    return any(len(f) > 4 and f[4] == str(ino) for f in map(str.split, lines))


@pytest.fixture
def shadowed(fixtures_built, tmp_path):  # type: ignore[no-untyped-def]
    """(pid, DIR/app): a process running the PIE build at DIR/app in its own mount
    namespace, stopped, while the host's DIR/app is the non-PIE build."""
    if shutil.which("unshare") is None:
        pytest.skip("needs unshare(1) to make a private mount namespace")
    app = tmp_path / "d" / "app"
    app.parent.mkdir()
    shutil.copy(fixtures_built / "simple_nopie", app)
    inner_file = tmp_path / "inner_app"
    shutil.copy(fixtures_built / "simple_pie", inner_file)
    inner_ino = os.stat(inner_file).st_ino
    script = f"mount --bind {inner_file} {app} && exec {app} 4 4000"
    proc = subprocess.Popen(["unshare", "--mount", "--propagation", "private",
                             "sh", "-c", script], stderr=subprocess.PIPE, text=True)
    try:
        if not wait_for(lambda: _maps_inode(proc.pid, inner_ino)):
            proc.kill()
            _out, err = proc.communicate()
            pytest.skip(f"could not start a process in a private mount namespace: {err}")
        # held stopped within its 4 s sleep until the tracer is attached
        os.kill(proc.pid, signal.SIGSTOP)
        yield proc.pid, app
        os.kill(proc.pid, signal.SIGCONT)
    finally:
        kill(proc)


def _plan(tmp_path: Path, app: Path) -> str:
    return write_plan(tmp_path, f"""
planrunner: 1
name: shadowed
targets:
  s: {{binary: {app}}}
probes:
  hit: {{usdt: s:simple:hit, args: [{{name: i}}]}}
outputs:
  - {{print: hit, fields: [i]}}
""")


def test_list_validate_and_run_pid_take_the_file_inside_the_process_root(shadowed,
                                                                        tmp_path):
    pid, app = shadowed
    inside = f"/proc/{pid}/root{app}"
    # list: the path given, and the objects the process maps, name the same file
    given = run_planrunner(["list", str(app), "--pid", str(pid), "--format", "json"])
    assert given.returncode == 0, given.stderr
    mapped = run_planrunner(["list", "--pid", str(pid), "--format", "json"])
    assert mapped.returncode == 0, mapped.stderr
    given_paths = {p["path"] for p in json.loads(given.stdout)["probes"]}
    mapped_paths = {p["path"] for p in json.loads(mapped.stdout)["probes"]}
    assert given_paths == {inside}, given.stdout
    assert inside in mapped_paths, mapped.stdout
    assert "not the host's" in given.stderr, given.stderr

    plan = _plan(tmp_path, app)
    checked = run_planrunner(["validate", plan, "--pid", str(pid)])
    assert checked.returncode == 0, checked.stderr
    assert inside in checked.stdout + checked.stderr
    assert "not the host's" in checked.stdout + checked.stderr

    proc = start_tracer(plan, "-f", "json", "--pid", str(pid))
    os.kill(pid, signal.SIGCONT)
    out, err = proc.communicate(timeout=60)  # it ends when the process exits
    assert proc.returncode == 0, err
    assert [r["i"] for r in json_records(out)] == [1, 2, 3, 4], err
