"""The committed fixture binaries (tests/fixtures/elf/bin/) still match their sources.

Rebuilds every fixture into a temporary directory with the fixtures' Makefile and checks
that the probes (provider, name, argument strings, whether a semaphore is set) in
`readelf -n` match those of the committed binaries, site by site in note order. Addresses
and bytes may differ; what golden and end-to-end tests rely on may not. Also ties
expected.json's recorded -O2 operand strings to the committed binaries.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ELF = Path(__file__).parents[1] / "fixtures" / "elf"
BIN = ELF / "bin"
PROGRAMS = ["operands_O0", "operands_O2", "semaphore", "libprobe.so", "libuser", "dlopen_user",
            "simple_pie", "simple_nopie", "demo", "agg", "recurse"]
PROBED = ["operands_O0", "operands_O2", "semaphore", "libprobe.so", "simple_pie",
          "simple_nopie", "demo", "agg", "recurse"]

_NOTE = re.compile(r"Provider: (\S+)\s+Name: (\S+)\s+Location: \S+, Base: \S+, "
                   r"Semaphore: (\S+)\s+Arguments: ?([^\n]*)")


def notes(path: Path) -> list[tuple[str, str, bool, str]]:
    out = subprocess.run(["readelf", "-n", str(path)], capture_output=True, text=True,
                         check=True).stdout
    return [(p, n, int(sem, 16) != 0, args.strip()) for p, n, sem, args in _NOTE.findall(out)]


def _missing_toolchain() -> str | None:
    for tool in ("gcc", "make", "readelf"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    probe = subprocess.run(["gcc", "-E", "-x", "c", "-", "-o", "/dev/null"],
                           input="#include <sys/sdt.h>\n", capture_output=True, text=True)
    if probe.returncode != 0:
        return "sys/sdt.h is not installed (Debian: systemtap-sdt-dev)"
    return None


@pytest.fixture(scope="module")
def rebuilt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    reason = _missing_toolchain()
    if reason:
        print(f"skipping fixture rebuild: {reason}")
        pytest.skip(reason)
    out = tmp_path_factory.mktemp("fixtures")
    subprocess.run(["make", "-s", "-C", str(ELF), f"OUT={out}"], check=True,
                   capture_output=True)
    return out


@pytest.mark.parametrize("name", PROBED)
def test_rebuilt_notes_match_committed(rebuilt: Path, name: str) -> None:
    committed = notes(BIN / name)
    assert committed, f"no USDT notes in committed {name}"
    assert notes(rebuilt / name) == committed


@pytest.mark.parametrize("name", PROGRAMS)
def test_committed_binaries_are_small_and_keep_symbols(name: str) -> None:
    path = BIN / name
    assert path.stat().st_size < 30 * 1024
    if shutil.which("readelf") is None:
        pytest.skip("readelf is not installed")
    sections = subprocess.run(["readelf", "-S", "-W", str(path)], capture_output=True,
                              text=True, check=True).stdout
    assert ".symtab" in sections and ".debug_info" not in sections


def test_expected_json_matches_committed_operands() -> None:
    if shutil.which("readelf") is None:
        pytest.skip("readelf is not installed")
    expected = json.loads((ELF / "expected.json").read_text())
    by_probe: dict[str, list[str]] = {}
    for provider, name, _, args in notes(BIN / "operands_O2"):
        by_probe.setdefault(f"{provider}:{name}", []).append(args)
    checked = 0
    for probe, spec in expected.items():
        if probe.startswith("_") or "operands_O2" not in spec:
            continue
        want = spec["operands_O2"]
        assert by_probe[probe] == (want if isinstance(want, list) else [want]), probe
        checked += 1
    assert checked >= 10
    lib = {f"{p}:{n}": a for p, n, _, a in notes(BIN / "libprobe.so")}
    assert lib["lib:state"] == expected["lib:state"]["operands"]
    sem = {f"{p}:{n}": s for p, n, s, _ in notes(BIN / "semaphore")}
    assert sem == {"sem:tick": True, "sem:hit": True}


def test_fixtures_run_quietly_and_report_semaphore() -> None:
    """Programs exit 0 and print nothing; semaphore's report mode prints its counters."""
    for name, argv in [("operands_O2", ["2"]), ("simple_pie", ["3"]), ("simple_nopie", ["3"]),
                       ("libuser", ["2"]), ("dlopen_user", ["2"]), ("agg", ["1", "0", "values"])]:
        done = subprocess.run([str(BIN / name), *argv], capture_output=True, text=True,
                              timeout=30)
        assert (done.returncode, done.stdout) == (0, ""), name
    done = subprocess.run([str(BIN / "semaphore"), "3", "0", "report"], capture_output=True,
                          text=True, timeout=30)
    assert done.stdout == "hits=0 semaphore=0\n"
