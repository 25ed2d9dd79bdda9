"""Every mistake at once, as a user sees it: `planrunner validate` (a subprocess) on a
plan with schema and semantic errors prints all of them, in file order, each once."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

INVALID = Path(__file__).resolve().parents[1] / "fixtures" / "plans" / "invalid"


@pytest.mark.parametrize("name", ["schema-and-semantic.yaml", "schema-and-semantic-toml.toml"])
def test_validate_prints_schema_and_semantic_errors_together(name: str) -> None:
    proc = subprocess.run([sys.executable, "-m", "planrunner", "validate", name],
                          cwd=INVALID, capture_output=True, text=True)
    expected = (INVALID / name).with_suffix("").name + ".expected.txt"
    assert (proc.returncode, proc.stdout) == (1, "")
    assert proc.stderr == (INVALID / expected).read_text(encoding="utf-8")
    headlines = [ln for ln in proc.stderr.splitlines() if ": error: " in ln]
    assert len(headlines) == len(set(headlines)) >= 7
    lines = [int(h.split(":")[1]) for h in headlines]
    assert lines == sorted(lines)


def test_a_probe_broken_by_the_schema_is_still_a_known_name(tmp_path: Path) -> None:
    plan = tmp_path / "p.yaml"
    plan.write_text("planrunner: 1\ntargets:\n  app: {binary: /bin/true}\nprobes:\n"
                    "  a: {usdt: app:x:a, args: [{type: int33}]}\n"
                    "  s: {span: {begin: a, end: b}}\n"
                    "outputs:\n  - print: a\n  - count: s\n")
    proc = subprocess.run([sys.executable, "-m", "planrunner", "validate", str(plan)],
                          capture_output=True, text=True)
    assert proc.returncode == 1
    assert "must be one of int8" in proc.stderr
    assert "unknown end probe 'b'" in proc.stderr
    assert "unknown probe 'a'" not in proc.stderr and "begin probe 'a'" not in proc.stderr
