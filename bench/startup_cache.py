"""Launch -> attached, with the compiled-program cache (issue 17, goal 1).

    sudo .venv/bin/python bench/startup_cache.py [-n 15] [--json OUT]

Against one running 1000/s workload (bench/workload.c), in interleaved rounds (the
order rotates each round), launch -> the tool's "attached" line (stdout on a pty,
stderr on a pipe, as bench/phases.py `startup`):
  planrunner-warm     the cache holds the program (primed once, before the rounds)
  planrunner-cold     an empty cache directory each run: compile, then store
  planrunner-nocache  --no-cache (what every run did before the cache)
  bpftrace, trace-bpfcc  the references
Beside the wall time, the CPU time the tool's process tree used by then (from
/proc, 10 ms ticks): on a machine shared with other work it moves much less.
Then where a planrunner run's time goes, in-process (fresh process per sample):
interpreter start (`python -c pass`), imports of `run`, load/resolve/render of the
plan, the backend's load (warm: cache; cold: bcc + clang) and the attach.
Medians (min..max) and same-run ratios; the machine line names the CPU. bench/.venv's
planrunner modules are byte-compiled first, as an installed package would be.
"""

from __future__ import annotations

import argparse
import json
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

from harness import Child, bounded, cleanup, compile_bytecode, mono  # noqa: E402
from phases import _close, _launch_pty  # noqa: E402
from run import build, machine  # noqa: E402
from tools import ROOT, TOOLS, write_plans  # noqa: E402

PY = str(ROOT / ".venv" / "bin" / "python")
BREAKDOWN = r"""
import io, sys, time
t0 = time.perf_counter()
from planrunner import dataclass_cache
dataclass_cache.install()  # as `run`'s entry (cli.run_and_exit) does
from planrunner.cli import build_parser
from planrunner.commands import run as run_cmd
from planrunner.runtime.attach import distinct_sites
from planrunner.runtime.bcc_backend import BccBackend
from planrunner.runtime.compile_cache import open_cache
from planrunner.runtime.compile_worker import CompileWorker
from planrunner.runtime.session import run_session  # noqa: F401 - what `run` imports
from planrunner.output.destination import open_view  # noqa: F401
t1 = time.perf_counter()
args = build_parser("run").parse_args(["run", sys.argv[1], "--pid", sys.argv[2]])
cache = open_cache(io.StringIO())
key, compiled, source = run_cmd._cached_run(args, [sys.argv[1]], io.StringIO(), cache,
                                            int(sys.argv[2]), True)
worker = None
if compiled is None:  # as `run` does: the worker starts, then the plan is compiled
    worker = CompileWorker()
    worker.start()
    compiled = run_cmd._compile(args, [sys.argv[1]], io.StringIO(), cache, key,
                                int(sys.argv[2]), None, source)
t2 = time.perf_counter()
b = BccBackend(cache=cache, worker=worker)
b.load(compiled.program)
t3 = time.perf_counter()
for s in distinct_sites(compiled.program.sites):
    b.attach(s, int(sys.argv[2]), True)
t4 = time.perf_counter()
b.close()
print(t1 - t0, t2 - t1, t3 - t2, t4 - t3, int(b.from_cache))
"""


def med(xs: list[float]) -> str:
    if not xs:
        return "n/a"
    return f"{statistics.median(xs):.3f} ({min(xs):.3f}..{max(xs):.3f})"


def mid(xs: list[float]) -> float:
    """The median; nan when a tool gave no figure (its ratios read nan)."""
    return statistics.median(xs) if xs else float("nan")


TICK = os.sysconf("SC_CLK_TCK")


def tree_cpu(pid: int) -> float:
    """CPU seconds (user + sys) used so far by `pid` and its descendants, those still
    running (children of any of its threads) and those it has reaped (planrunner's
    compile worker): less at the mercy of other load on the machine than wall time."""
    total = 0.0
    kids: list[int] = []
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        total += sum(int(f) for f in fields[11:15]) / TICK  # utime stime cutime cstime
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as fh:
                kids += [int(k) for k in fh.read().split()]
    except (OSError, ValueError, IndexError):
        return total
    return total + sum(tree_cpu(k) for k in kids)


EVENT = re.compile(rb"ev-(?:alpha|beta|gamma|delta)")


def launch(argv: list[str], ready: str,
           env: dict[str, str]) -> tuple[float, float, float | None] | None:
    """(launch -> ready line, CPU by then, launch -> first event printed). The first
    event is when a tool is certainly attached: bpftrace writes its "Attaching" line
    before it loads its program and attaches (strace: ~10-30 ms before
    PERF_EVENT_IOC_SET_BPF), the others theirs after."""
    t0 = mono()
    old = dict(os.environ)
    os.environ.update(env)
    try:
        c, lines, _m = _launch_pty(bounded(argv, 60))
    finally:
        os.environ.clear()
        os.environ.update(old)
    at = lines.wait_for(re.compile(ready.encode(), re.M), 45, c)
    cpu = tree_cpu(c.p.pid)  # a few ms after the line: it waits in the loop by then
    first = lines.wait_for(EVENT, 10, c) if at is not None else None
    c.stop()
    lines.drain(0.05)
    _close(lines)
    return None if at is None else (at - t0, cpu, None if first is None else first - t0)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=15, help="rounds (default 15)")
    ap.add_argument("--json", help="also write the raw figures here")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="pr-startup-"))
    bins = build(ROOT / "bench" / "build" / "run")
    plans = write_plans(work, bins)
    compile_bytecode(str(ROOT), PY, plans["plain"]["plan"])
    warm_dir = work / "warm"
    warm_dir.mkdir(mode=0o700)
    wl = Child([bins["plain"], "rate", "1000", "3600"], stdout=subprocess.DEVNULL,
               stderr=subprocess.DEVNULL)
    time.sleep(0.2)
    subst = {"bin": bins["plain"], "pid": str(wl.pid), **plans["plain"]}
    pr = TOOLS["planrunner"].command(subst)
    tools: dict[str, tuple[list[str], str, dict[str, str] | None]] = {
        "planrunner-warm": (pr, TOOLS["planrunner"].ready, {"PLANRUNNER_CACHE_DIR":
                                                            str(warm_dir)}),
        "planrunner-cold": (pr, TOOLS["planrunner"].ready, None),
        "planrunner-nocache": ([*pr, "--no-cache"], TOOLS["planrunner"].ready, {}),
        "bpftrace": (TOOLS["bpftrace-printf"].command(subst), TOOLS["bpftrace-printf"].ready,
                     {}),
        "trace-bpfcc": (TOOLS["trace-bpfcc"].command(subst), TOOLS["trace-bpfcc"].ready, {}),
    }
    results: dict[str, list[float]] = {k: [] for k in tools}
    cpus: dict[str, list[float]] = {k: [] for k in tools}
    firsts: dict[str, list[float]] = {k: [] for k in tools}
    breakdown: dict[str, list[list[float]]] = {"warm": [], "cold": []}
    try:
        # prime the warm cache once
        launch(pr, TOOLS["planrunner"].ready, {"PLANRUNNER_CACHE_DIR": str(warm_dir)})
        names = list(tools)
        for rnd in range(args.n):
            k = rnd % len(names)
            for name in names[k:] + names[:k]:
                argv, ready, env = tools[name]
                if env is None:  # cold: a new, empty cache directory each run
                    cold = Path(tempfile.mkdtemp(prefix="cold-", dir=work))
                    env = {"PLANRUNNER_CACHE_DIR": str(cold)}
                t = launch(argv, ready, env)
                if t is not None:
                    results[name].append(t[0])
                    cpus[name].append(t[1])
                    if t[2] is not None:
                        firsts[name].append(t[2])
                print(f"[{rnd}] {name}: {t}", file=sys.stderr, flush=True)
            for kind in ("warm", "cold"):
                d = warm_dir if kind == "warm" else Path(tempfile.mkdtemp(dir=work))
                r = subprocess.run([PY, "-c", BREAKDOWN, plans["plain"]["plan"], str(wl.pid)],
                                   capture_output=True, text=True, timeout=120,
                                   env={**os.environ, "PLANRUNNER_CACHE_DIR": str(d)})
                if r.returncode == 0:
                    t0 = mono()
                    subprocess.run([PY, "-c", "pass"], check=True)
                    py = mono() - t0
                    breakdown[kind].append([py, *map(float, r.stdout.split())])
    finally:
        wl.kill()
        cleanup()
        shutil.rmtree(work, ignore_errors=True)

    bt = mid(results["bpftrace"])
    tr = mid(results["trace-bpfcc"])
    print(f"Machine: {machine()}\n")
    print(f"Command: `sudo .venv/bin/python bench/startup_cache.py -n {args.n}` "
          f"(medians of {args.n} interleaved rounds)\n")
    cbt = mid(cpus["bpftrace"])
    ctr = mid(cpus["trace-bpfcc"])
    print("| tool | launch -> attached s | vs bpftrace | vs trace-bpfcc | CPU s to attached "
          "| CPU vs bpftrace | CPU vs trace-bpfcc |")
    print("|---|---|---|---|---|---|---|")
    for name, xs in results.items():
        m = mid(xs)
        c = mid(cpus[name])
        print(f"| {name} | {med(xs)} | {m / bt:.2f}x | {m / tr:.2f}x | {med(cpus[name])} "
              f"| {c / cbt:.2f}x | {c / ctr:.2f}x |")
    fbt = mid(firsts["bpftrace"])
    ftr = mid(firsts["trace-bpfcc"])
    print("\nLaunch -> first event printed (every tool surely attached; bpftrace's "
          "`Attaching` line comes before its load and attach):\n")
    print("| tool | launch -> first event s | vs bpftrace | vs trace-bpfcc |")
    print("|---|---|---|---|")
    for name, xs in firsts.items():
        m = mid(xs)
        print(f"| {name} | {med(xs)} | {m / fbt:.2f}x | {m / ftr:.2f}x |")
    print("\nWhere a planrunner run's time goes (s, medians; in-process, fresh process each):\n")
    print("| run | python start | imports | plan (run cache, else load+resolve+render) "
          "| backend load | attach | from cache |")
    print("|---|---|---|---|---|---|---|")
    for kind, rows in breakdown.items():
        if rows:
            cols = list(zip(*rows, strict=True))
            print(f"| {kind} | " + " | ".join(f"{statistics.median(c):.3f}" for c in cols[:5])
                  + f" | {int(min(cols[5]))}..{int(max(cols[5]))} |")
    if args.json:
        Path(args.json).write_text(json.dumps({"launch": results, "cpu": cpus,
                                               "first_event": firsts,
                                               "breakdown": breakdown},
                                              indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
