"""Reading a plan is bounded in time and memory whatever the file holds (issue 15
item 16): YAML alias bombs (also through `<<` merge keys), deep nesting (YAML and TOML)
and huge files each end in a located PlanSyntaxError, not a traceback, a RecursionError
or a machine out of memory.

Each case loads in a fresh interpreter (address space capped at 2 GiB, 60 s timeout, so
an unbounded loader fails the test instead of the machine) that reports the error and
its growth in peak RSS. The bounds asserted are loose on purpose: 100 MB, 30 s.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from planrunner.plan import load_source
from planrunner.plan.limits import MAX_ALIAS_NODES, MAX_DEPTH, MAX_PLAN_BYTES

ROOT = Path(__file__).resolve().parents[2]

CHILD = r"""
import json, resource, sys, time
resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
import tomllib, yaml  # noqa: imported before measuring
import planrunner.plan.load_toml, planrunner.plan.load_yaml
from planrunner.errors import PlanError
from planrunner.plan import load_source
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t0 = time.monotonic()
try:
    load_source(sys.argv[1])
    error = None
except PlanError as exc:
    d = exc.diagnostics[0]
    error = [type(exc).__name__, d.message, d.span.line, d.span.column]
print(json.dumps({"error": error, "seconds": time.monotonic() - t0,
                  "rss_mb": (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before)
                  / 1024}))
"""


def load_bounded(path: Path) -> dict:
    proc = subprocess.run([sys.executable, "-c", CHILD, str(path)], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout)
    assert result["rss_mb"] < 100, result
    assert result["seconds"] < 30, result
    return result


def laughs(levels: int = 9, width: int = 9) -> str:
    lines = ["planrunner: 1", "name: lol", "l0: &l0 [lol]"]
    for i in range(1, levels):
        lines.append(f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * width) + "]")
    return "\n".join(lines) + "\n"


def merge_laughs(levels: int = 9, width: int = 9) -> str:
    lines = ["planrunner: 1", "name: lol", "l0: &l0 {a: lol}"]
    for i in range(1, levels):
        inner = ", ".join(f"k{j}: *l{i - 1}" for j in range(width))
        lines.append(f"l{i}: &l{i} {{<<: *l{i - 1}, {inner}}}")
    return "\n".join(lines) + "\n"


def test_yaml_alias_bomb_is_refused_located(tmp_path: Path) -> None:
    plan = tmp_path / "bomb.yaml"
    plan.write_text(laughs())
    error = load_bounded(plan)["error"]
    assert error[:2] == ["PlanSyntaxError", f"YAML aliases expand to more than "
                                            f"{MAX_ALIAS_NODES} repeated nodes"]
    assert error[2] >= 4  # at an alias use, past the first anchor


def test_yaml_alias_bomb_through_merge_keys_is_refused(tmp_path: Path) -> None:
    plan = tmp_path / "merge-bomb.yaml"
    plan.write_text(merge_laughs())
    error = load_bounded(plan)["error"]
    assert error[1].startswith("YAML aliases expand to more than")


def test_yaml_deep_flow_nesting_is_refused_located(tmp_path: Path) -> None:
    plan = tmp_path / "deep.yaml"
    depth = 100_000
    plan.write_text("planrunner: 1\nprobes: " + "[" * depth + "]" * depth + "\n")
    error = load_bounded(plan)["error"]
    msg = f"lists and mappings nested more than {MAX_DEPTH} levels deep"
    # the key `probes:` is level 1, its value's brackets the next ones
    assert error == ["PlanSyntaxError", msg, 2, 9 + MAX_DEPTH - 1]


def test_yaml_deep_block_nesting_is_refused(tmp_path: Path) -> None:
    plan = tmp_path / "deep-block.yaml"
    plan.write_text("".join(f"{' ' * i}k{i}:\n" for i in range(2000)))
    error = load_bounded(plan)["error"]
    assert error[1].endswith(f"nested more than {MAX_DEPTH} levels deep")


@pytest.mark.parametrize("merge", [False, True])
def test_yaml_alias_chain_nesting_is_refused(tmp_path: Path, merge: bool) -> None:
    """Each anchor nests the previous one: shallow text, deep data."""
    lines = ["planrunner: 1", "a0: &a0 {x: 1}"]
    for i in range(1, 3000):
        lines.append(f"a{i}: &a{i} {{<<: *a{i - 1}}}" if merge else f"a{i}: &a{i} [*a{i - 1}]")
    plan = tmp_path / "chain.yaml"
    plan.write_text("\n".join(lines) + "\n")
    error = load_bounded(plan)["error"]
    assert error[0] == "PlanSyntaxError"
    assert "nested more than" in error[1] or "aliases expand" in error[1]


def test_toml_deep_nesting_is_refused_located(tmp_path: Path) -> None:
    plan = tmp_path / "deep.toml"
    depth = 100_000
    plan.write_text('planrunner = 1\nname = "[[[ not counted"  # [[[ nor this\n'
                    "x = " + "[" * depth + "]" * depth + "\n")
    error = load_bounded(plan)["error"]
    assert error == ["PlanSyntaxError",
                     f"lists and mappings nested more than {MAX_DEPTH} levels deep",
                     3, 5 + MAX_DEPTH]


@pytest.mark.parametrize("suffix", [".yaml", ".toml"])
def test_huge_plan_file_is_refused_unread(tmp_path: Path, suffix: str) -> None:
    plan = tmp_path / f"huge{suffix}"
    line = "# padding padding padding padding padding padding padding padding\n"
    with open(plan, "w") as fh:
        fh.write("planrunner: 1\n" if suffix == ".yaml" else "planrunner = 1\n")
        fh.write(line * (50 * 1024 * 1024 // len(line)))
    result = load_bounded(plan)
    assert result["error"] == ["PlanSyntaxError", "plan file is larger than "
                               f"{MAX_PLAN_BYTES >> 20} MiB: refused unread", 1, 1]
    assert result["rss_mb"] < MAX_PLAN_BYTES * 4 / 2**20


def test_ordinary_aliases_depth_and_size_still_load(tmp_path: Path) -> None:
    plan = tmp_path / "ok.yaml"
    nested = "[" * (MAX_DEPTH - 2) + "1" + "]" * (MAX_DEPTH - 2)
    plan.write_text(f"planrunner: 1\nbase: &b {{x: 1, y: [1, 2]}}\nm: {{<<: *b, z: 3}}\n"
                    f"n: [*b, *b]\nd: {nested}\n")
    data = load_source(plan).data
    assert data["m"] == {"z": 3, "x": 1, "y": [1, 2]} and data["n"][1]["y"] == [1, 2]
    toml = tmp_path / "ok.toml"
    toml.write_text(f'planrunner = 1\ns = "]]]"\nd = {nested}\n')
    assert load_source(toml).data["s"] == "]]]"
