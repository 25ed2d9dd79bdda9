"""Every x86-64 operand form gcc emits (and the hand-written ones), traced for real:
the values each fixture probe fired must come back exactly, at -O0 and -O2."""

from __future__ import annotations

import json
import struct

import pytest

from tests.e2e.conftest import FIXTURES, json_records, run_planrunner, write_plan

EXPECTED = json.loads((FIXTURES / "expected.json").read_text())
OPERAND_PROBES = {k: v for k, v in EXPECTED.items() if k.startswith("operands:")}


def _plan(binary: str) -> str:
    """One plan printing every readable argument of every operands:* probe (JSON is
    valid YAML, so the plan is built as data)."""
    probes, outputs = {}, []
    for key, spec in OPERAND_PROBES.items():
        name = key.split(":")[1]
        n = len(spec["fires"][0]) if "fires" in spec else len(spec["args"])
        unreadable = set(spec.get("unreadable", []))
        strings = [i for i, v in enumerate(spec.get("args", []), 1) if isinstance(v, str)]
        probes[name] = {"usdt": f"t:operands:{name}",
                        "args": [{"name": f"a{i}", "type": "string"} for i in strings]}
        fields = [f"a{i}" if i in strings else f"arg{i}"
                  for i in range(1, n + 1) if i not in unreadable]
        outputs.append({"print": name, "name": name, "fields": fields})
    return json.dumps({"planrunner": 1, "name": "operands", "targets": {"t": {"binary": binary}},
                       "probes": probes, "outputs": outputs}, indent=1)


def _as_float(bits: int, size: int) -> float:
    if size == 8:
        return struct.unpack("<d", struct.pack("<Q", bits & (2**64 - 1)))[0]
    return struct.unpack("<f", struct.pack("<I", bits & (2**32 - 1)))[0]


@pytest.mark.parametrize("build", ["operands_O0", "operands_O2"])
def test_every_operand_form_reads_the_fired_values(build, fixtures_built, tmp_path):
    binary = str(fixtures_built / build)
    plan = write_plan(tmp_path, _plan(binary))
    proc = run_planrunner(["run", plan, "-f", "json", "-c", f"{binary} 1"])
    assert proc.returncode == 0, proc.stderr
    records = json_records(proc.stdout)
    by_probe: dict[str, list[dict]] = {}
    for rec in records:
        by_probe.setdefault(rec["probe"], []).append(rec)
    for key, spec in OPERAND_PROBES.items():
        name = key.split(":")[1]
        got = by_probe.get(name, [])
        fires = spec.get("fires", [spec.get("args")])
        assert len(got) == len(fires), (name, got)
        for rec, values in zip(got, fires, strict=True):
            for i, want in enumerate(values, 1):
                if i in spec.get("unreadable", []):
                    continue
                value = rec.get(f"a{i}", rec.get(f"arg{i}"))
                if name == "floats":
                    assert _as_float(value, 8 if i == 1 else 4) == want, (name, i, rec)
                elif isinstance(want, int) and want < 0 < value:
                    assert value == want + 2**64 or value == want, (name, i, rec)
                else:
                    assert value == want, (name, i, rec)
