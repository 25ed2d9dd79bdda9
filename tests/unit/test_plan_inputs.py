"""A plan file is read once, bounded, and only if it is a regular file (issue 23 items 7
and 8). Before: the error printer read the whole file again to show one source line (a
200 MB sparse plan cost 200 MB more RSS, a `.yaml` symlink to /dev/zero ended in a
MemoryError traceback), and a FIFO as the plan path blocked in open(), then again in the
printer.

Each case runs `planrunner validate` in a fresh interpreter (address space capped at
2 GiB, a timeout so that a blocking open() fails the test instead of hanging it) which
reports the exit code, stderr and its growth in peak RSS (resource.getrusage). The bounds
are loose on purpose: 100 MB of RSS, whatever the file's size.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from planrunner.plan_file import MAX_PLAN_BYTES, read_plan_bytes

ROOT = Path(__file__).resolve().parents[2]

CHILD = r"""
import io, json, resource, sys
resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
from planrunner.cli import main
import planrunner.plan, planrunner.plan.limits  # noqa: imported before measuring
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
out, err = io.StringIO(), io.StringIO()
code = main(sys.argv[1:], out, err)
print(json.dumps({"code": code, "stderr": err.getvalue(), "rss_mb":
                  (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024}))
"""


def validate(plan: Path, *extra: str) -> dict:
    proc = subprocess.run([sys.executable, "-c", CHILD, "validate", *extra, str(plan)],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout)
    assert "Traceback" not in result["stderr"]
    assert result["rss_mb"] < 100, result
    return result


@pytest.mark.parametrize("suffix", [".yaml", ".toml"])
def test_big_sparse_plan_is_refused_without_reading_it(tmp_path: Path, suffix: str) -> None:
    plan = tmp_path / f"big{suffix}"
    with open(plan, "wb") as fh:
        fh.write(b"planrunner: 1\n" if suffix == ".yaml" else b"planrunner = 1\n")
        fh.truncate(200 << 20)  # 200 MB, sparse: nothing on disk, all in a read()
    result = validate(plan, "--schema-only")
    assert result["code"] == 1
    assert result["stderr"].startswith(
        f"{plan}:1:1: error: plan file is larger than {MAX_PLAN_BYTES >> 20} MiB: refused "
        "unread\n"), result["stderr"]


def test_plan_symlink_to_dev_zero_is_refused(tmp_path: Path) -> None:
    plan = tmp_path / "zero.yaml"
    plan.symlink_to("/dev/zero")
    result = validate(plan)
    assert result["code"] == 1
    assert result["stderr"].startswith(
        f"{plan}:1:1: error: plan file is a character device, not a regular file: refused "
        "unread\n"), result["stderr"]


def test_fifo_as_plan_is_refused_without_blocking(tmp_path: Path) -> None:
    plan = tmp_path / "pipe.yaml"
    os.mkfifo(plan)
    try:  # before: open() waited for a writer (the subprocess timeout fails the test)
        result = validate(plan, "--schema-only")
    except subprocess.TimeoutExpired:
        pytest.fail("validate blocked on a FIFO plan")
    assert result["code"] == 1
    assert result["stderr"].startswith(
        f"{plan}:1:1: error: plan file is a FIFO (named pipe), not a regular file: "
        "refused unread\n"), result["stderr"]


def test_error_printer_shows_the_text_the_loader_read(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The source line under a diagnostic is the loaded one, even if the file changed or
    went away since: the printer does not open it again."""
    from io import StringIO

    from planrunner.cli import main

    plan = tmp_path / "typo.yaml"
    plan.write_text("planrunner: 1\nname: typo\nprobes:\n  p: {usdt: 42}\n")

    real_read = read_plan_bytes

    def read_then_remove(path: str) -> bytes:
        data = real_read(path)
        os.unlink(path)  # what the printer shows must come from `data`
        return data

    monkeypatch.setattr("planrunner.plan.limits.read_plan_bytes", read_then_remove)
    err = StringIO()
    assert main(["validate", "--schema-only", str(plan)], StringIO(), err) == 1
    assert not plan.exists()
    assert "  p: {usdt: 42}\n" in err.getvalue(), err.getvalue()


def test_read_plan_bytes_reads_a_regular_file_once_bounded(tmp_path: Path) -> None:
    plan = tmp_path / "ok.yaml"
    plan.write_bytes(b"planrunner: 1\n")
    assert read_plan_bytes(str(plan)) == b"planrunner: 1\n"
    with pytest.raises(FileNotFoundError):
        read_plan_bytes(str(tmp_path / "missing.yaml"))
