"""The binary changed between resolve and attach (issue 15 item 3): a package upgrade
renames a new build over the path while bcc compiles. planrunner resolved offsets in the
old file and the kernel attaches by path, so it must refuse, attach nothing and say
what changed."""

from __future__ import annotations

import os
import shutil
import subprocess

from tests.e2e.conftest import PLANRUNNER, ROOT
from tests.e2e.executor_helpers import simple_plan, uprobe_events

SLOW = [PLANRUNNER[0], "-m", "tests.e2e.slow_attach", "0"]


def test_a_binary_upgraded_during_start_up_is_refused(fixtures_built, tmp_path):
    app = tmp_path / "app"
    shutil.copy(fixtures_built / "simple_pie", app)
    proc = subprocess.Popen([*SLOW, "run", simple_plan(tmp_path, app), "-d", "5s"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stderr is not None
        assert proc.stderr.readline() == "test-hook: compiling\n"  # resolved, not attached
        new = tmp_path / "app.new"
        shutil.copy(fixtures_built / "simple_nopie", new)  # another build, other offsets
        os.rename(new, app)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 1, err
    assert f"{app} changed after planrunner read it (the path names another file now: " \
           "inode " in err
    assert "its probe offsets are the old file's" in err
    assert "run planrunner again to resolve the new file" in err
    assert "test-hook: attached" not in err and "Tracing" not in err and out == ""
    assert f"pr_{proc.pid}_" not in uprobe_events()
