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


def test_partial_build_never_needs_its_safety_net() -> None:
    """Valid plans with values broken at random (as a schema error would have them):
    building the parts the schema accepted raises PlanError or nothing, never a crash
    (load_plan would then fall back to the schema errors alone)."""
    import copy
    import random
    from dataclasses import replace

    from planrunner.errors import PlanError
    from planrunner.plan import _without, load_source
    from planrunner.plan.build import build
    from planrunner.plan.validate import schema_report

    rng = random.Random(18)
    junk = [None, 42, -1, "x", True, [], {}, [1], {"a": 1}, "${nope}", 1.5]

    def paths(d, p=()):  # type: ignore[no-untyped-def]
        yield p
        items = d.items() if isinstance(d, dict) else enumerate(d) if isinstance(d, list) else ()
        for k, v in items:
            yield from paths(v, p + (k,))

    valid = Path(__file__).resolve().parents[1] / "fixtures" / "plans" / "valid"
    cases = 0
    for plan in sorted(valid.glob("*.yaml"))[:6] + sorted(valid.glob("*.toml"))[:3]:
        loaded = load_source(plan)
        spots = [p for p in paths(loaded.data) if p]
        for _ in range(40):
            data = copy.deepcopy(loaded.data)
            for spot in rng.sample(spots, min(2, len(spots))):
                node = data
                try:
                    for k in spot[:-1]:
                        node = node[k]
                    node[spot[-1]] = rng.choice(junk)
                except (KeyError, IndexError, TypeError):
                    pass
            broken = replace(loaded, data=data)
            report = schema_report(broken)
            if not report.diagnostics:
                continue
            cases += 1
            try:
                build(replace(broken, data=_without(data, report.unknown_keys)), {},
                      require_params=False, broken=report.broken)
            except PlanError:
                pass
    assert cases > 100


def test_schema_errors_come_with_what_resolve_finds_in_the_rest(tmp_path: Path) -> None:
    """A schema error no longer hides the mistakes only the binaries can show: a symbol
    that is not there, an argument the probe has not got. Parts that depend on the
    broken one (a span, its outputs) are not blamed for it."""
    import os

    binary = os.path.realpath(sys.executable)
    plan = tmp_path / "p.yaml"
    plan.write_text(f"""planrunner: 1
targets:
  t: {{binary: {binary}}}
probes:
  a: {{uprobe: "t:Py_BytesMain", args: [{{name: n, type: int33}}]}}
  e: {{uprobe: "t:no_such_function_in_it"}}
  m: {{uprobe: "t:Py_BytesMain", args: [{{name: argc, type: int32}}]}}
  s: {{span: {{begin: a, end: m}}}}
outputs:
  - print: a
  - count: s
  - print: m
    fields: [argc, nosuch]
""")
    proc = subprocess.run([sys.executable, "-m", "planrunner", "validate", str(plan)],
                          capture_output=True, text=True)
    assert proc.returncode == 1
    headlines = [ln for ln in proc.stderr.splitlines() if ": error: " in ln]
    assert [int(h.split(":")[1]) for h in headlines] == [5, 6, 13], proc.stderr
    assert "must be one of int8" in headlines[0]
    assert "no_such_function_in_it" in headlines[1] and "not found" in headlines[1]
    assert "nosuch" in headlines[2]
