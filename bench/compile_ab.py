"""Load, resolve and render (`pipeline.compile_plan`: everything before bcc) of a plan of
N uprobes, each counted, on the many_funcs fixture's N functions, from this tree and
optionally a baseline tree (e.g. a `git archive` of main unpacked in /tmp) in the same
run. A fresh process per measure, timed inside it around compile_plan only (imports
excluded); rounds interleaved, so drift in the machine's load hits both trees alike.
Reported: median and min..max seconds per tree, and the median of the per-round ratios
now/baseline. No root needed: nothing is loaded.

    make -C tests/fixtures/elf
    .venv/bin/python bench/compile_ab.py [--probes 1000] [--rounds 15] [--baseline DIR]
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from harness import cpu_model  # a sibling: bench/ is sys.path[0]

ROOT = Path(__file__).resolve().parent.parent
PY = str(ROOT / ".venv" / "bin" / "python")
FIXTURE = ROOT / "tests" / "fixtures" / "elf" / "build" / "many_funcs"
ONCE = ("import sys, time\n"
        "from planrunner.pipeline import compile_plan\n"
        "t = time.perf_counter()\n"
        "compile_plan(sys.argv[1], {})\n"
        "print(time.perf_counter() - t)\n")


def write_plan(directory: str, n: int) -> str:
    probes = "".join(f"  f{i}: {{uprobe: m:mf_{i:03d}}}\n" for i in range(n))
    outputs = "".join(f"  - {{count: f{i}, name: f{i}}}\n" for i in range(n))
    path = os.path.join(directory, f"p{n}.yaml")
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(f"planrunner: 1\nname: many\nsettings: {{max_sites: {max(n, 1)}}}\n"
                 f"targets:\n  m: {{binary: {FIXTURE}}}\nprobes:\n{probes}"
                 f"outputs:\n{outputs}")
    return path


def once(tree: Path, plan: str) -> float:
    env = dict(os.environ, PYTHONPATH=str(tree))
    out = subprocess.run([PY, "-c", ONCE, plan], env=env, check=True, text=True,
                         stdout=subprocess.PIPE, cwd="/")
    return float(out.stdout)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--probes", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--baseline", type=Path)
    args = ap.parse_args()
    trees = {"now": ROOT, **({"baseline": args.baseline} if args.baseline else {})}
    times: dict[str, list[float]] = {label: [] for label in trees}
    with tempfile.TemporaryDirectory() as tmp:
        plan = write_plan(tmp, args.probes)
        for r in range(args.rounds):
            order = list(trees.items())
            for label, tree in order[r % 2:] + order[:r % 2]:  # alternate who goes first
                times[label].append(once(tree, plan))
    print(f"Command: `{shlex.join(['.venv/bin/python', *sys.argv])}`  ")
    print(f"CPU: {cpu_model()}, {os.cpu_count()} CPUs, load average "
          f"{os.getloadavg()[0]:.1f} at the end\n")
    print("| tree | median s | min..max s |\n|---|---:|---:|")
    for label, got in times.items():
        print(f"| {label} | {statistics.median(got):.3f} | {min(got):.3f}..{max(got):.3f} |")
    if args.baseline:
        ratios = [a / b for a, b in zip(times["now"], times["baseline"], strict=True)]
        print(f"\nnow/baseline, median of the per-round ratios: {statistics.median(ratios):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
