"""templates/, schema/ and plans/ ship inside the wheel and are found installed and
from a checkout (planrunner/resources.py)."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from planrunner.resources import data_dir

ROOT = Path(__file__).resolve().parents[2]


def test_checkout_finds_the_top_level_folders() -> None:
    for name in ("templates", "schema", "plans"):
        assert (data_dir(name)).is_dir()
    assert (data_dir("templates") / "program.bpf.c.j2").is_file()


def test_wheel_carries_templates_schema_and_plans(tmp_path: Path) -> None:
    pytest.importorskip("hatchling")
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
         "-q", "-w", str(tmp_path), str(ROOT)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    (wheel,) = tmp_path.glob("planrunner-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "planrunner/_data/templates/program.bpf.c.j2" in names
    assert "planrunner/_data/templates/expr_helpers.h" in names
    assert "planrunner/_data/schema/plan.schema.json" in names
    assert "planrunner/_data/plans/sdt-demo.yaml" in names
    assert "planrunner/resources.py" in names
