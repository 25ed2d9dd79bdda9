"""Absolute indexed and thread-local operands, traced for real: every value the fixture
fired (it writes them to a truth file) must come back exactly, non-PIE and PIE, -O0 and
-O2, in the main program and in a shared library, on two threads with their own values.
Also: without the kernel's BTF, a thread-local argument is refused at the argument."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.e2e.conftest import json_records, run_planrunner, write_plan
from tests.unit.test_fixtures_rebuild import notes

ARGS = {"table": 2, "field": 1, "bytes": 4, "literal": 1, "asm": 2,  # indexed
        "exe": 4, "lib": 4}  # tls (asm: 2, as above)


def _plan(targets: dict[str, str], probes: dict[str, tuple[str, str]]) -> str:
    """probes: name -> (target, provider:name); prints every argument."""
    return json.dumps({
        "planrunner": 1, "name": "tls_indexed",
        "targets": {t: {"binary": b} for t, b in targets.items()},
        "probes": {n: {"usdt": f"{t}:{p}"} for n, (t, p) in probes.items()},
        "outputs": [{"print": n, "name": n,
                     "fields": [f"arg{i}" for i in range(1, ARGS[n] + 1)]} for n in probes],
    }, indent=1)


def _truth(path: Path) -> list[tuple[str, list[int]]]:
    out = []
    for line in path.read_text().splitlines():
        name, *values = line.split()
        if name != "tpoff":
            out.append((name, [int(v) for v in values]))
    return out


def _run(tmp_path: Path, plan: str, command: str) -> list[dict]:
    proc = run_planrunner(["run", write_plan(tmp_path, plan), "-f", "json", "-c", command])
    assert proc.returncode == 0, proc.stderr
    return json_records(proc.stdout)


def _got(records: list[dict]) -> list[tuple[str, list[int]]]:
    return [(r["probe"], [r[f"arg{i}"] for i in range(1, ARGS[r["probe"]] + 1)])
            for r in records]


@pytest.mark.parametrize("build", ["indexed_O2", "indexed_O0", "indexed_pie"])
def test_absolute_indexed_operands(build: str, fixtures_built: Path, tmp_path: Path) -> None:
    binary = str(fixtures_built / build)
    names = [n for p, n, _, _ in notes(fixtures_built / build) if p == "idx"]
    assert "asm" in names  # hand-written `table+4(,%rcx,4)`: rebased in indexed_pie
    plan = _plan({"t": binary}, {n: ("t", f"idx:{n}") for n in names})
    truth = tmp_path / "truth"
    records = _run(tmp_path, plan, f"{binary} 2 0 {truth}")
    assert _got(records) == _truth(truth)
    assert len(records) == 2 * len(names)


@pytest.mark.parametrize("build", ["tls_O2", "tls_pie", "tls_O0"])
def test_thread_local_operands(build: str, fixtures_built: Path, tmp_path: Path) -> None:
    binary = str(fixtures_built / build)
    plan = _plan({"t": binary, "l": str(fixtures_built / "libtls.so")},
                 {"exe": ("t", "tls:exe"), "asm": ("t", "tls:asm"), "lib": ("l", "tls:lib")})
    truth = tmp_path / "truth"
    records = _run(tmp_path, plan, f"{binary} 2 0 {truth}")
    want = _truth(truth)
    assert len(want) == 12  # 2 threads x 2 repeats x 3 probes
    assert _got(records) == want
    tids = [r["tid"] for r in records]
    assert len(set(tids)) == 2 and tids[:6] == [tids[0]] * 6  # each thread its own values


def test_without_kernel_btf_a_thread_local_argument_is_refused_where_it_is_read(
        fixtures_built: Path, tmp_path: Path) -> None:
    binary = str(fixtures_built / "tls_O2")
    plan = write_plan(tmp_path, (
        "planrunner: 1\nname: nobtf\ntargets:\n  t: {binary: " + binary + "}\n"
        "probes:\n  exe:\n    usdt: t:tls:exe\n    args:\n      - {name: tv}\n"
        "outputs:\n  - {print: exe, fields: [tv, arg2]}\n"))
    env_btf = {"PLANRUNNER_VMLINUX_BTF": str(tmp_path / "no-vmlinux")}
    proc = run_planrunner(["validate", plan], env={**os.environ, **env_btf})
    assert proc.returncode == 1, proc.stdout + proc.stderr
    err = proc.stderr
    assert "argument 1 of probe 'exe' is thread-local ('-4@%fs:tv@tpoff')" in err, err
    assert "argument 2 of probe 'exe' is thread-local" in err, err
    assert "CONFIG_DEBUG_INFO_BTF" in err and "plan.yaml:9:9: error: argument 1" in err, err
