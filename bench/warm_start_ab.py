"""A warm run's start, A/B: CPU time and in-process wall time to "Tracing" of a second
run of the bench print plan (both caches hold it) from this tree and from a baseline
tree (e.g. a `git archive` of main), rounds interleaved (order alternating), against one
running 1000/s workload (`--pid`). Each run is the real entry point (`planrunner.cli
.run_and_exit`) behind a small wrapper that, when "Tracing" is written, prints the process's CPU
time (user + sys since exec, interpreter start included), the wall time since the
wrapper began, and how many modules are imported, then exits. CPU time moves much less
than wall time with other work on the machine. Both trees run with the same interpreter
and venv, chosen by PYTHONPATH alone, from `/`; each has its own cache directory, filled
by a first run that is not counted. Modules are byte-compiled first.

    sudo .venv/bin/python bench/warm_start_ab.py --baseline /tmp/base [-n 21] [--now DIR]
                                                 [--plan NAME]

--plan NAME: a bundled plan (plans/NAME.yaml, its defaults) instead, run system-wide
(no workload, no --pid): e.g. cpu-profile, whose warm start reads the kernel offsets
its stack copies need.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness import Child, cleanup, compile_bytecode
from run import build, machine
from tools import write_plans

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PY = str(ROOT / ".venv" / "bin" / "python")
WRAPPER = r"""
import os, sys, time
T0 = time.perf_counter()
_write = sys.stderr.write
def write(text):
    if text.startswith("Tracing"):
        _write(f"AT-TRACING {time.process_time()} {time.perf_counter() - T0} "
               f"{len(sys.modules)}\n")
        sys.stderr.flush()
        os._exit(0)
    return _write(text)
sys.stderr.write = write
from planrunner.cli import run_and_exit  # the entry: it installs the dataclass cache
run_and_exit(sys.argv[1:])
"""


def one(tree: str, cache: Path, plan: str, pid: int | None
        ) -> tuple[float, float, int] | None:
    env = {**os.environ, "PYTHONPATH": tree, "PLANRUNNER_CACHE_DIR": str(cache)}
    scope = ["--pid", str(pid)] if pid is not None else []
    r = subprocess.run([PY, "-c", WRAPPER, "run", plan, *scope], cwd="/",
                       env=env, capture_output=True, text=True, timeout=120)
    for line in r.stderr.splitlines():
        if line.startswith("AT-TRACING "):
            cpu, wall, mods = line.split()[1:]
            return float(cpu), float(wall), int(mods)
    print(f"{tree}: no Tracing line: {r.stderr[-500:]}", file=sys.stderr)
    return None


def _in(tree: str, plan: str, bundled: str | None) -> str:
    """The plan a tree runs: its own copy of a bundled plan (the run is from `/`)."""
    return str(Path(tree) / plan) if bundled else plan


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--baseline", required=True, help="the baseline tree (holds planrunner/)")
    ap.add_argument("--now", default=str(ROOT), help="the tree measured (default: this one)")
    ap.add_argument("-n", type=int, default=21, help="rounds (default 21)")
    ap.add_argument("--plan", help="a bundled plan, run system-wide, instead of the print plan")
    args = ap.parse_args()
    trees = {"baseline": args.baseline, "now": args.now}
    work = Path(tempfile.mkdtemp(prefix="pr-warm-ab-"))
    bins = build(ROOT / "bench" / "build" / "run")
    plan = write_plans(work, bins)["plain"]["plan"]
    if args.plan:  # each tree's own copy of the plan
        plan = f"plans/{args.plan}.yaml"
    for tree in trees.values():
        compile_bytecode(tree, PY, str(Path(tree) / plan) if args.plan else plan)
    caches = {name: work / f"cache-{name}" for name in trees}
    for d in caches.values():
        d.mkdir(mode=0o700)
    wl = Child([bins["plain"], "rate", "1000", "3600"], stdout=subprocess.DEVNULL,
               stderr=subprocess.DEVNULL)
    time.sleep(0.2)
    pid = None if args.plan else wl.pid
    got: dict[str, list[tuple[float, float, int]]] = {name: [] for name in trees}
    try:
        for name, tree in trees.items():  # fill both caches
            one(tree, caches[name], _in(tree, plan, args.plan), pid)
        for rnd in range(args.n):
            order = list(trees) if rnd % 2 == 0 else list(trees)[::-1]
            for name in order:
                t = one(trees[name], caches[name], _in(trees[name], plan, args.plan), pid)
                if t is not None:
                    got[name].append(t)
    finally:
        wl.kill()
        cleanup()
        shutil.rmtree(work, ignore_errors=True)
    print(f"Machine: {machine()}\n")
    named = f" --plan {args.plan}" if args.plan else ""
    print(f"Command: `sudo .venv/bin/python bench/warm_start_ab.py --baseline BASE -n {args.n}"
          f"{named}` (medians, min..max, of {args.n} interleaved rounds)\n")
    print("| tree | CPU s to Tracing | wall s to Tracing (in-process) | modules imported |")
    print("|---|---|---|---|")
    for name, rows in got.items():
        cpu, wall, mods = zip(*rows, strict=True)
        print(f"| {name} | {statistics.median(cpu):.4f} ({min(cpu):.4f}..{max(cpu):.4f}) "
              f"| {statistics.median(wall):.4f} ({min(wall):.4f}..{max(wall):.4f}) "
              f"| {statistics.median(mods):.0f} |")
    base = statistics.median(r[0] for r in got["baseline"])
    now = statistics.median(r[0] for r in got["now"])
    print(f"\nCPU to Tracing, now / baseline: {now / base:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
