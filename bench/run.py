"""planrunner's benchmark suite: planrunner and the anchors side by side, one command.

    sudo .venv/bin/python bench/run.py [--quick] [--phases overhead,rate,throughput,...]
    (or `make bench`)

Builds bench/workload.c (plain, semaphore and nop5 builds) into bench/build/run/, writes
the plans it runs, then measures, in interleaved rounds, planrunner against the uprobe
floor (bench/floor.py: an empty BPF program via python3-bpfcc), bcc's trace-bpfcc and
argdist-bpfcc, and bpftrace (/usr/bin/bpftrace). Prints a Markdown report (medians,
same-round ratios, one line per goal of issue 7) and writes it with results.json and
every tool's raw output to bench/out/<stamp>/; with --write-benchmarks it also replaces
the bench/run.py section of BENCHMARKS.md.

Phases: overhead (loop, back to back), rate (paced 10k/s), throughput (100k/s and 1M/s),
startup, stop, listing, agg (bench/agg_overhead.py, count by key), list (bench/list_bench.py).
Safety: every tool runs under `timeout --foreground -s INT -k 5 BOUND` in its own process
group; it is stopped with SIGINT and killed by process group only if it outlives a grace
period; a `finally` kills, by PID, whatever this script started and is still alive.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import signal
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import phases  # noqa: E402
import report  # noqa: E402
from harness import Child, cleanup, compile_bytecode, mono  # noqa: E402
from tools import HERE, ROOT, write_plans  # noqa: E402

VARIANTS = {"plain": [], "sem": ["-DBENCH_SEM"], "nop5": ["-DBENCH_NOP5"]}
ALL_PHASES = "overhead,rate,throughput,startup,stop,listing,agg,list"


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def build(builddir: Path) -> dict[str, str]:
    builddir.mkdir(parents=True, exist_ok=True)
    src = HERE / "workload.c"
    bins = {}
    for variant, flags in VARIANTS.items():
        out = builddir / f"workload_{variant}"
        if not out.exists() or out.stat().st_mtime < src.stat().st_mtime:
            subprocess.run(["gcc", "-O2", "-Wall", "-o", str(out), str(src), *flags], check=True)
        bins[variant] = str(out)
    return bins


def machine() -> str:
    def first(argv: list[str]) -> str:
        try:
            r = subprocess.run(argv, capture_output=True, text=True, timeout=20)
            return (r.stdout or r.stderr).strip().splitlines()[0]
        except (OSError, IndexError, subprocess.SubprocessError):
            return "n/a"

    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo")
                if line.startswith("model name")), "?")
    bcc = first(["dpkg-query", "-W", "-f", "${Version}", "python3-bpfcc"])
    return (f"Linux {platform.release()}, {os.cpu_count()} CPUs ({cpu}), "
            f"{first(['bpftrace', '--version'])}, bcc {bcc}, Python {platform.python_version()}, "
            f"{datetime.datetime.now(datetime.UTC).strftime('%Y-%m-%d %H:%M UTC')}")


def external(script: str, args: list[str], bound: int) -> str:
    """Run another helper's bench script (bounded); its stdout is its table."""
    path = HERE / script
    if not path.exists():
        return f"({script} not present)"
    c = Child(["timeout", "--foreground", "-s", "INT", "-k", "5", str(bound),
               sys.executable, str(path), *args], group=True, stdout=subprocess.PIPE,
              stderr=subprocess.DEVNULL)
    assert c.p.stdout is not None
    out = c.p.stdout.read()  # to EOF: the script ended (or its timeout did)
    c.p.stdout.close()
    c.wait(15)
    return out.decode(errors="replace").strip() + ("" if c.rc == 0 else f"\n(rc={c.rc})")


def run_phases(a: argparse.Namespace, env: phases.Env, res: dict) -> None:
    want = set(a.phases.split(","))
    loop_cfg = [(None, "plain"), ("floor", "plain"), ("planrunner", "plain"),
                ("planrunner-count", "plain"), ("trace-bpfcc", "plain"),
                ("bpftrace-printf", "plain"), ("argdist-C", "plain"),
                ("bpftrace-count", "plain"), ("floor", "sem"), ("planrunner", "sem"),
                ("floor", "nop5"), ("planrunner", "nop5")]
    if "overhead" in want:
        res["overhead"] = phases.overhead(env, loop_cfg, ["loop", str(a.loop_secs)],
                                          a.rounds, "loop")
    if "rate" in want:
        cfg = [(None, "plain"), ("floor", "plain"), ("planrunner", "plain"),
               ("trace-bpfcc", "plain"), ("bpftrace-printf", "plain")]
        res["rate"] = phases.overhead(env, cfg, ["rate", "10000", "1.5"], a.rounds, "rate")
    if "throughput" in want:
        cases = [("planrunner", 100_000, a.sustain_secs),
                 ("planrunner-json", 100_000, a.sustain_secs)]
        cases += [(n, 1_000_000, a.flood_secs) for n in
                  ("planrunner", "bpftrace-printf", "planrunner-json", "trace-bpfcc")]
        res["throughput"] = phases.throughput(env, cases)
    if "startup" in want:
        res["startup"] = phases.startup(env, ["planrunner", "trace-bpfcc", "bpftrace-printf"],
                                        a.reps)
    if "stop" in want:
        res["stop"] = phases.stop_cases(env)
    if "listing" in want:
        res["listing"] = phases.listing(env, a.list_runs)
    if "agg" in want:
        log("[agg] bench/agg_overhead.py")
        res["agg"] = external("agg_overhead.py", ["--rounds", str(max(3, a.rounds))], 600)
    if "list" in want:
        log("[list] bench/list_bench.py")
        res["list"] = external("list_bench.py", ["--rounds", str(a.list_runs)], 300)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true",
                    help="1 round, 3 startup reps, 4 s floods (about 4 min)")
    ap.add_argument("--phases", default=ALL_PHASES)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--loop-secs", type=float, default=1.0)
    ap.add_argument("--sustain-secs", type=float, default=10.0)
    ap.add_argument("--flood-secs", type=float, default=10.0)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--list-runs", type=int, default=10)
    ap.add_argument("--budget", type=int, default=1500, help="hard bound on the run, s")
    ap.add_argument("--write-benchmarks", action="store_true",
                    help="replace the bench/run.py section of BENCHMARKS.md")
    a = ap.parse_args()
    if a.quick:
        a.rounds, a.reps, a.flood_secs, a.list_runs = 1, 3, 4.0, 5
    if os.geteuid() != 0:
        sys.exit("bench/run.py needs root (BPF): sudo .venv/bin/python bench/run.py")

    def on_alarm(*_: object) -> None:
        raise TimeoutError(f"bench/run.py: budget of {a.budget} s spent")

    signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(a.budget)
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    outdir = HERE / "out" / stamp
    outdir.mkdir(parents=True, exist_ok=True)
    res: dict = {"machine": machine(), "command": " ".join(["bench/run.py", *sys.argv[1:]]),
                 "args": vars(a)}
    t0 = mono()
    finished = False
    try:
        bins = build(HERE / "build" / "run")
        env = phases.Env(bins, write_plans(outdir, bins), outdir, log)
        compile_bytecode(str(ROOT), str(ROOT / ".venv" / "bin" / "python"),
                         env.plans["plain"]["plan"])
        run_phases(a, env, res)
        finished = True
    finally:
        signal.alarm(0)
        cleanup()
        res["elapsed_s"] = round(mono() - t0, 1)
        (outdir / "results.json").write_text(json.dumps(res, indent=1, default=str))
        md = report.markdown(res)
        (outdir / "results.md").write_text(md)
        print(md)
        log(f"raw outputs and results.json in {outdir}")
        if a.write_benchmarks and finished:
            report.write_benchmarks(ROOT / "BENCHMARKS.md", md)
        elif a.write_benchmarks:  # a partial table would pass for a whole run
            log("BENCHMARKS.md left as it was: the run did not finish")


if __name__ == "__main__":
    main()
