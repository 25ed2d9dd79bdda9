"""A run with a new `--set` value (issue 28 item 2, "values are not code"): launch -> first
event, against one running 1000/s workload (bench/workload.c), each planrunner run with
a value of `min` it has never been given (the caches primed by one other value first),
interleaved with the same plan from a baseline tree (a `git archive` of an older
revision, where every new value compiles) and bpftrace with the value in its filter
(bpftrace compiles every run). Medians (min..max), same-run ratios, the CPU model.

    sudo .venv/bin/python bench/new_value_start.py --baseline /tmp/base [-n 9]

The plan prints bench:tick where `counter >= min`: min is 1, 2, 3... so every run's
first event passes the filter. Then `--new-pid` rounds: the workload is restarted (the
same command line, so a new pid) before each run, the value unchanged.
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

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import Child, cleanup, compile_bytecode  # noqa: E402
from run import build, machine  # noqa: E402
from startup_cache import launch  # noqa: E402
from tools import PR_READY, ROOT  # noqa: E402

PY = str(ROOT / ".venv" / "bin" / "python")
PLAN = """planrunner: 1
name: bench-new-value
params: {{min: {{type: int, default: 0}}}}
targets: {{w: {{binary: "{bin}"}}}}
probes:
  tick:
    usdt: w:bench:tick
    args: [{{name: counter, type: int64}}, {{name: word, type: string}}, {{name: len, type: int32}}]
    where: counter >= min
outputs:
  - print: tick
    fields: [counter, word, len]
"""
BT = 'usdt:{bin}:bench:tick /arg0 >= {min}/ {{ printf("%d %s %d\\n", arg0, str(arg1), arg2); }}'


def med(xs: list[float]) -> str:
    return f"{statistics.median(xs):.3f} ({min(xs):.3f}..{max(xs):.3f})" if xs else "n/a"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--baseline", required=True, help="a tree of an older revision")
    ap.add_argument("-n", type=int, default=9, help="rounds (default 9)")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="pr-newvalue-"))
    bins = build(ROOT / "bench" / "build" / "run")
    plan = work / "plan.yaml"
    plan.write_text(PLAN.format(bin=bins["plain"]))
    compile_bytecode(str(ROOT), PY, str(plan))
    wl = Child([bins["plain"], "rate", "1000", "3600"], stdout=subprocess.DEVNULL,
               stderr=subprocess.DEVNULL)
    time.sleep(0.2)
    trees = {"planrunner (this tree)": str(ROOT), "planrunner (baseline)": args.baseline}
    caches = {name: work / f"cache-{i}" for i, name in enumerate(trees)}
    firsts: dict[str, list[float]] = {name: [] for name in [*trees, "bpftrace"]}
    firsts.update({f"{name}, new --pid": [] for name in trees})
    value = 1

    def pr(name: str, v: int, pid: int | None = None
           ) -> tuple[float, float, float | None] | None:
        argv = [PY, "-m", "planrunner", "run", str(plan), "--pid", str(pid or wl.pid),
                "--set", f"min={v}"]
        env = {"PYTHONPATH": trees[name], "PLANRUNNER_CACHE_DIR": str(caches[name])}
        return launch(argv, PR_READY, env)

    os.chdir("/")  # `-m planrunner` looks in the current directory before PYTHONPATH
    try:
        for name, d in caches.items():
            d.mkdir(mode=0o700)
            pr(name, 0)  # primed with another value
        names = [*trees, "bpftrace"]
        for rnd in range(args.n):
            k = rnd % len(names)
            for name in names[k:] + names[:k]:
                value += 1
                if name == "bpftrace":
                    t = launch(["bpftrace", "-p", str(wl.pid), "-e",
                                BT.format(bin=bins["plain"], min=value)], r"^Attaching", {})
                else:
                    t = pr(name, value)
                if t is not None and t[2] is not None:
                    firsts[name].append(t[2])
                print(f"[{rnd}] {name} min={value}: {t}", file=sys.stderr, flush=True)
            for name in trees if rnd % 2 else list(trees)[::-1]:
                other = Child([bins["plain"], "rate", "1000", "3600"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                time.sleep(0.2)
                try:
                    t = pr(name, 1, other.pid)
                finally:
                    other.kill()
                if t is not None and t[2] is not None:
                    firsts[f"{name}, new --pid"].append(t[2])
                print(f"[{rnd}] {name} new pid: {t}", file=sys.stderr, flush=True)
    finally:
        wl.kill()
        cleanup()
        shutil.rmtree(work, ignore_errors=True)
    bt = statistics.median(firsts["bpftrace"]) if firsts["bpftrace"] else float("nan")
    print(f"machine: {machine()}; load average {os.getloadavg()[0]:.1f}")
    print("| tool | launch -> first event s, median (min..max) | / bpftrace |")
    print("|---|---|---|")
    for name, xs in firsts.items():
        ratio = statistics.median(xs) / bt if xs else float("nan")
        print(f"| {name} | {med(xs)} | {ratio:.2f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
