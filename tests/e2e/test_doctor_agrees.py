"""`doctor` and `run` give one answer about kernel headers (issue 15 item 19), checked
against bcc itself: a tree doctor accepts compiles, one it refuses does not (and run
refuses it up front with exit 3, as doctor does). The tree is chosen the way users
do, with $BCC_KERNEL_SOURCE (the installed headers: bcc's default lookup)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.e2e.conftest import run_planrunner
from tests.e2e.executor_helpers import simple_plan


@pytest.mark.parametrize("tree", ["installed", "empty"])
def test_doctor_and_run_agree_on_the_headers(tree, fixtures_built, tmp_path):
    if Path("/sys/kernel/kheaders.tar.xz").exists():
        pytest.skip("kheaders is loaded: bcc falls back to it for any tree")
    env = {k: v for k, v in os.environ.items() if not k.startswith("BCC_KERNEL_")}
    if tree == "empty":
        env["BCC_KERNEL_SOURCE"] = str(tmp_path)
    doctor = run_planrunner(["doctor"], env=env)
    [line] = [ln for ln in doctor.stdout.splitlines() if "kernel headers" in ln]
    plan = simple_plan(tmp_path, fixtures_built / "simple_pie")
    run = run_planrunner(["run", plan, "-c", f"{fixtures_built / 'simple_pie'} 3"], env=env)
    if tree == "installed":
        assert line.startswith("OK"), line
        assert run.returncode == 0, run.stderr
    else:
        assert line.startswith("MISSING") and "$BCC_KERNEL_SOURCE" in line, line
        assert run.returncode == 3, run.stderr
        assert "kernel headers for" in run.stderr and "$BCC_KERNEL_SOURCE" in run.stderr
