"""What `cpu-profile` costs the traced machine in planrunner's own process (issue 28
item 5; the OpenTelemetry eBPF profiler states 1% of one CPU as its limit): the bundled
plan at 99 Hz and a copy at 19 Hz, sampling every CPU of a busy machine (two CPU-bound
Python workers with deep stacks, plus whatever else runs), for D seconds. The CPU time
(user + sys, /proc/PID/stat, the run's process and its threads) is read when "Tracing"
is printed and again just before SIGINT, so start-up and the exit's symbolization are
apart; the exit's time is reported too, and the run's CPU per CPU-second the workers
ran (the samples taken follow it: on a machine shared with other jobs the workers get
less than two CPUs, and fewer samples). --workers-only samples only the workers
(--pid): the cost of a known workload, without every other process's stacks. (The
BPF program's run time per sample, which the sampled tasks pay, is in BENCHMARKS.md's
Python frames section: 6.2 us at 99 Hz.)

    sudo .venv/bin/python bench/profile_budget.py [-d 30] [--rounds 3] [--tree DIR ...]

(--tree: measure the planrunner package of another tree, e.g. a `git archive` of an
older revision, by PYTHONPATH; given twice or more, the trees take turns within every
round, in alternating order, so that an A/B shares the machine's load.)
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import Child, cleanup, compile_bytecode  # noqa: E402
from run import machine  # noqa: E402
from tools import ROOT  # noqa: E402

PY = str(ROOT / ".venv" / "bin" / "python")
TICK = os.sysconf("SC_CLK_TCK")
SPIN = """
import sys
sys.setrecursionlimit(10000)
def leaf(n):
    return n if n < 2 else leaf(n - 1) + leaf(n - 2)
def deep(d):
    return leaf(18) if d == 0 else deep(d - 1)
while True:
    deep(40)
"""


def cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK  # utime stime: every thread


def one(plan: str, seconds: float, env: dict[str, str], workers: list[int],
        extra: list[str] | None = None) -> dict[str, float] | None:
    err = tempfile.TemporaryFile()
    c = Child([PY, "-m", "planrunner", "run", plan, "-o", os.devnull, *(extra or [])], cwd="/",
              stdout=subprocess.DEVNULL, stderr=err, env=env)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        err.seek(0)
        if re.search(rb"^Tracing", err.read(), re.M):
            break
        time.sleep(0.02)
    else:
        c.kill()
        return None
    # the workers' CPU time meanwhile: what was sampled (the samples taken are
    # hz x that, whatever share of the CPUs the machine's other jobs left them)
    start, t0, busy0 = cpu_s(c.pid), time.monotonic(), sum(map(cpu_s, workers))
    time.sleep(seconds / 2)
    mid, tm = cpu_s(c.pid), time.monotonic()
    time.sleep(seconds / 2)
    traced, wall = cpu_s(c.pid) - start, time.monotonic() - t0
    sampled = sum(map(cpu_s, workers)) - busy0
    late = 100 * (cpu_s(c.pid) - mid) / (time.monotonic() - tm)
    t1 = time.monotonic()
    c.p.send_signal(2)
    c.p.wait(60)
    exit_s = time.monotonic() - t1
    if c.p.returncode not in (0, 4):  # 4: some update lost (a full map): still a run
        err.seek(0)
        print(f"run failed ({c.p.returncode}): {err.read()[-2000:].decode(errors='replace')}",
              file=sys.stderr)
        return None
    return {"traced_cpu_s": traced, "wall_s": wall, "pct_of_one_cpu": 100 * traced / wall,
            "pct_second_half": late, "workers_cpu_s": sampled,
            # per CPU-second the workers ran: at 2 busy CPUs, 2x this is the % of one CPU
            "ms_per_sampled_cpu_s": 1000 * traced / sampled if sampled else 0.0,
            "exit_s": exit_s, "rc": c.p.returncode}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("-d", type=float, default=30, help="seconds traced per run")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--workers-only", action="store_true",
                    help="sample only the two workers (--pid): the cost of a known "
                         "workload's samples, without the other processes' stacks")
    ap.add_argument("--tree", action="append",
                    help="a planrunner tree to measure (default: this one); given twice "
                         "or more, the trees take turns in every round (an A/B in one run)")
    args = ap.parse_args()
    # absolute: the runs start in / (`-m` looks in the working directory first), where a
    # relative "." would name no tree and the installed planrunner would be measured
    trees = [os.path.abspath(t) for t in (args.tree or [str(ROOT)])]
    for tree in trees:
        where = subprocess.run([PY, "-c", "import planrunner; print(planrunner.__file__)"],
                               cwd="/", env={**os.environ, "PYTHONPATH": tree},
                               capture_output=True, text=True, check=True).stdout.strip()
        if not where.startswith(tree.rstrip("/") + "/"):
            sys.exit(f"--tree {tree}: its planrunner is not the one imported ({where})")
    work = Path(tempfile.mkdtemp(prefix="pr-budget-"))
    plans = {"99 Hz": str(ROOT / "plans" / "cpu-profile.yaml")}
    low = work / "cpu-profile-19.yaml"
    low.write_text((ROOT / "plans" / "cpu-profile.yaml").read_text()
                   .replace("profile: {hz: 99}", "profile: {hz: 19}"))
    plans["19 Hz"] = str(low)
    for tree in trees:
        compile_bytecode(tree, PY, plans["99 Hz"])
    spins = [Child([sys.executable, "-c", SPIN], stdout=subprocess.DEVNULL)
             for _ in range(2)]
    runs = [(tree, name) for name in plans for tree in trees]
    rows: dict[tuple[str, str], list[dict[str, float]]] = {k: [] for k in runs}
    try:
        for tree in trees:
            env = {**os.environ, "PYTHONPATH": tree}
            for plan in plans.values():  # the caches, once
                subprocess.run([PY, "-m", "planrunner", "run", plan, "-d", "1", "-o",
                                os.devnull], cwd="/", capture_output=True, timeout=120,
                               env=env)
        for rnd in range(args.rounds):
            for tree, name in (runs if rnd % 2 == 0 else runs[::-1]):
                r = one(plans[name], args.d, {**os.environ, "PYTHONPATH": tree},
                        [w.pid for w in spins],
                        ["--pid", ",".join(str(s.pid) for s in spins)]
                        if args.workers_only else None)
                print(f"[{rnd}] {name} {tree}: {r} load {os.getloadavg()[0]:.1f}",
                      file=sys.stderr, flush=True)
                if r is not None:
                    rows[(tree, name)].append(r)
    finally:
        for s in spins:
            s.kill()
        cleanup()
        shutil.rmtree(work, ignore_errors=True)
    print(f"machine: {machine()}; load average {os.getloadavg()[0]:.1f}"
          f"{'; only the workers sampled' if args.workers_only else ''}")
    print(f"| rate | tree | planrunner's process while tracing, % of one CPU, median "
          f"(min..max) | second half only | ms per CPU-second of the workers "
          f"| exit (SIGINT -> end) s | runs of {args.d:g} s |")
    print("|---|---|---|---|---|---|---|")
    for (tree, name), rs in rows.items():
        pct = [r["pct_of_one_cpu"] for r in rs]
        ex = [r["exit_s"] for r in rs]
        late = [r["pct_second_half"] for r in rs]
        per = [r["ms_per_sampled_cpu_s"] for r in rs]
        if pct:
            print(f"| {name} | {tree} | {statistics.median(pct):.2f}% "
                  f"({min(pct):.2f}..{max(pct):.2f}) "
                  f"| {statistics.median(late):.2f}% ({min(late):.2f}..{max(late):.2f}) "
                  f"| {statistics.median(per):.1f} ({min(per):.1f}..{max(per):.1f}) "
                  f"| {statistics.median(ex):.2f} | {len(rs)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
