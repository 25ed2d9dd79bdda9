"""End-to-end helpers: real BPF attached to real processes (root + bcc).

Tests here are skipped, with the reason printed, where the machine cannot trace;
nothing is faked. Fixture programs come from `make -C tests/fixtures/elf` (build/).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "elf"
BUILD = FIXTURES / "build"
PLANRUNNER = [sys.executable, "-m", "planrunner"]


def _why_not() -> str | None:
    if os.geteuid() != 0:
        return "needs root: end-to-end tests attach uprobes"
    try:
        import bcc  # noqa: F401
    except ImportError:
        return "needs bcc (Debian python3-bpfcc): end-to-end tests compile BPF"
    if not os.path.exists(f"/lib/modules/{os.uname().release}/build"):
        return "needs kernel headers at /lib/modules/$(uname -r)/build (make setup)"
    return None


REASON = _why_not()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/e2e/" in str(item.fspath).replace(os.sep, "/"):
            item.add_marker(pytest.mark.e2e)
            if REASON:
                item.add_marker(pytest.mark.skip(reason=REASON))


@pytest.fixture(scope="session", autouse=True)
def bpffs() -> None:
    """Programs pin the tracer registry under /sys/fs/bpf: tests that load rendered C
    with bcc directly need the BPF filesystem there, as `run` makes sure."""
    if REASON is None:
        from planrunner.runtime.registry_pin import ensure_bpffs

        ensure_bpffs("/sys/fs/bpf")


@pytest.fixture(scope="session", autouse=True)
def program_cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every planrunner run of the session caches compiled programs in a fresh 0700
    directory, never the user's ~/.cache; set PLANRUNNER_CACHE_DIR beforehand to share
    one between sessions (a second session then runs warm)."""
    preset = os.environ.get("PLANRUNNER_CACHE_DIR")
    if preset:
        return Path(preset)
    path = tmp_path_factory.mktemp("program-cache")
    path.chmod(0o700)
    os.environ["PLANRUNNER_CACHE_DIR"] = str(path)
    return path


@pytest.fixture(scope="session")
def fixtures_built() -> Path:
    """Build the C fixtures once per session (idempotent make)."""
    if shutil.which("gcc") is None:
        pytest.skip("needs gcc to build the fixtures")
    subprocess.run(["make", "-s", "-C", str(FIXTURES)], check=True)
    return BUILD


def run_planrunner(args: list[str], timeout: float = 60, **kw) -> subprocess.CompletedProcess:
    """Run the CLI in a fresh process (the real entry point), capturing output."""
    return subprocess.run([*PLANRUNNER, *args], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT, **kw)


def json_records(stdout: str) -> list[dict]:
    return [json.loads(line) for line in stdout.split("\n") if line.strip()]


def write_plan(tmp_path: Path, text: str, name: str = "plan.yaml") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def run_plan_out(name: str, command: str, *sets: str) -> tuple[list[dict], str]:
    """`run NAME -f json -c COMMAND --set ...`: the records, and the whole stdout (a
    workload's own lines share it with the records)."""
    args = ["run", name, "-f", "json", "-c", command]
    for s in sets:
        args += ["--set", s]
    proc = run_planrunner(args, timeout=120)
    assert proc.returncode == 0, proc.stderr
    records = "\n".join(line for line in proc.stdout.splitlines() if line.startswith("{"))
    return json_records(records), proc.stdout


@pytest.fixture
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private, empty cache directory for this test, its hits and misses logged."""
    d = tmp_path / "cache"
    d.mkdir(mode=0o700)
    monkeypatch.setenv("PLANRUNNER_CACHE_DIR", str(d))
    monkeypatch.setenv("PLANRUNNER_CACHE_LOG", "1")
    return d
