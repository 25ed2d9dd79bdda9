"""Stopping under a flood, A/B: bench/run.py's stop cases (bench/phases.py stop_cases)
for this tree and a baseline tree (e.g. a `git archive` of main) in the same run,
rounds interleaved, order rotated; per case the median of each and of the same-round
ratios. Both trees run with the same interpreter and venv, chosen by PYTHONPATH alone,
from `/` (`python -m` would put the working directory first on sys.path).

    sudo .venv/bin/python bench/stop_ab.py --baseline /tmp/base [--rounds 5] [--now DIR]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

from harness import mono
from phases import Env, stop_cases
from run import build, cleanup, machine
from tools import write_plans

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PY = str(ROOT / ".venv" / "bin" / "python")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--baseline", required=True, help="the other planrunner tree")
    ap.add_argument("--now", default=str(ROOT), help="the planrunner tree to measure")
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    trees = {"now": a.now, "baseline": a.baseline}
    outdir = HERE / "out" / f"stop-ab-{int(mono())}"
    outdir.mkdir(parents=True, exist_ok=True)
    bins = build(HERE / "build" / "run")
    env = Env(bins, write_plans(outdir, bins), outdir,
              lambda m: print(m, file=sys.stderr, flush=True))
    late: dict[str, dict[str, list[float]]] = {k: {} for k in trees}
    ratios: dict[str, list[float]] = {}
    loads: list[str] = []
    try:
        for r in range(a.rounds):
            order = list(trees) if r % 2 == 0 else list(trees)[::-1]
            got: dict[str, dict[str, float]] = {}
            with open("/proc/loadavg") as fh:
                loads.append(fh.read().split()[0])
            for name in order:
                argv = ("env", "-C", "/", f"PYTHONPATH={trees[name]}", PY, "-m", "planrunner")
                for row in stop_cases(env, argv):
                    if row["late_s"] is not None and row["rc"] in (0, 4):
                        got.setdefault(name, {})[str(row["case"])] = float(row["late_s"])
                        late[name].setdefault(str(row["case"]), []).append(
                            float(row["late_s"]))
            for case, now in got.get("now", {}).items():
                base = got.get("baseline", {}).get(case)
                if base:
                    ratios.setdefault(case, []).append(now / base)
    finally:
        cleanup()
    print(f"Machine: {machine()}; load average at each round's start: {', '.join(loads)}\n")
    print(f"`bench/stop_ab.py --rounds {a.rounds}`: seconds from the request to the exit "
          "(--duration: past D), median (min..max)\n")
    print("| case | baseline | now | now/baseline, same round |")
    print("|---|---|---|---|")

    def cell(xs: list[float]) -> str:
        return f"{statistics.median(xs):.3f} ({min(xs):.3f}..{max(xs):.3f})" if xs else "-"

    for case in late["now"]:
        rs = ratios.get(case, [])
        print(f"| {case} | {cell(late['baseline'].get(case, []))} | {cell(late['now'][case])} "
              f"| {statistics.median(rs):.2f} |" if rs else "| - |")


if __name__ == "__main__":
    main()
