"""Shared pytest options. `--update-goldens` rewrites expected-output files
(tests/golden/, tests/fixtures/plans/invalid/*.expected.txt) instead of comparing."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--update-goldens", action="store_true", default=False,
                     help="rewrite golden/expected files and list the ones that changed")


@pytest.fixture
def update_goldens(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--update-goldens"))


GO_FIXTURES = Path(__file__).parent / "fixtures" / "go"


@pytest.fixture(scope="session")
def go_growstack() -> Path:
    """tests/fixtures/go/growstack, built by Go (idempotent make; skipped without a Go
    1.18+ toolchain: Debian's golang-go, in scripts/setup.sh)."""
    go = shutil.which("go")
    if go is None:
        pytest.skip("needs the Go toolchain (apt-get install golang-go) to build the Go "
                    "fixture")
    version = subprocess.run([go, "env", "GOVERSION"], capture_output=True, text=True,
                             env={**os.environ, "GOTOOLCHAIN": "local"}).stdout.strip()
    match = re.match(r"go1\.(\d+)", version)
    if not match or int(match.group(1)) < 18:
        pytest.skip(f"needs Go 1.18 or later (register ABI, pclntab layout), not {version!r}")
    subprocess.run(["make", "-s", "-C", str(GO_FIXTURES)], check=True)
    return GO_FIXTURES / "build" / "growstack"
