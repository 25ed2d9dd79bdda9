"""Cost per malloc of tracing allocations: planrunner's c-leaks (uprobes on malloc's
entry and return and on free, the open-allocation spans and their sums by stack) beside
bcc's memleak -p (uprobes too, for a process's user allocations), and untraced.

    sudo .venv/bin/python bench/leaks_cost.py [--rounds 5] [--iters 100000]

The workload (bench/leaks_workload.c, built here) waits until the tracer said it is
attached, then runs ITERS malloc(64) + free pairs back to back and prints the mean time
of one pair (each pair is 3 uprobe hits: malloc's entry and return, free). Rounds rotate
the tools' order, so the load of the moment spreads over all of them.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PLANRUNNER = [sys.executable, "-m", "planrunner"]
MEMLEAK = "/usr/sbin/memleak-bpfcc"
# what each tracer prints once its probes are attached (memleak says "Attaching to pid"
# before it attaches: its first report, a second later, comes after)
READY = {"planrunner": "Tracing", "memleak": "Top 10 stacks"}


def tools() -> dict[str, list[str] | None]:
    table: dict[str, list[str] | None] = {
        "none": None,
        "planrunner c-leaks --pid (unwind auto)": [*PLANRUNNER, "run", "c-leaks",
                                                   "--pid", "{pid}"],
        "planrunner c-leaks --pid (unwind fp)": [*PLANRUNNER, "run", "{fp_plan}",
                                                 "--pid", "{pid}"],
        "planrunner c-leaks --pid (unwind auto, bytes 4096)": [
            *PLANRUNNER, "run", "{small_plan}", "--pid", "{pid}"],
    }
    if Path(MEMLEAK).exists():
        table["memleak-bpfcc -p (bcc)"] = [MEMLEAK, "-p", "{pid}", "1"]
    return table


def run_one(argv: list[str] | None, work: Path, iters: int, tmp: Path,
            fp_plan: Path) -> float:
    go = tmp / "go"
    go.unlink(missing_ok=True)
    proc = subprocess.Popen([str(work), str(go), str(iters)], stdout=subprocess.PIPE,
                            text=True)
    tracer = None
    try:
        if argv is None:
            go.touch()
        else:
            args = [a.replace("{pid}", str(proc.pid)).replace("{fp_plan}", str(fp_plan))
                    .replace("{small_plan}", str(fp_plan.with_name("c-leaks-small.yaml")))
                    for a in argv]
            tracer = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True, cwd=ROOT, start_new_session=True,
                                      env={**os.environ, "PYTHONUNBUFFERED": "1"})
            ready = READY["memleak" if MEMLEAK in argv else "planrunner"]
            assert tracer.stdout is not None
            said = []
            for line in tracer.stdout:  # the tracer says when it is attached
                said.append(line)
                if ready in line:
                    break
            else:
                raise RuntimeError(f"{args[0]} ended before attaching: {''.join(said)}")
            go.touch()
        out, _ = proc.communicate(timeout=600)
    finally:
        if tracer is not None:
            if tracer.poll() is None:
                os.killpg(tracer.pid, signal.SIGINT)
            try:
                tracer.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(tracer.pid, signal.SIGKILL)
                tracer.wait()
        if proc.poll() is None:
            proc.kill()
    m = re.search(r"ns_per_pair=([0-9.]+)", out)
    if not m:
        raise RuntimeError(f"no timing from the workload: {out!r}")
    return float(m.group(1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--iters", type=int, default=100_000)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        work = tmp / "leaks_workload"
        subprocess.run(["gcc", "-O2", "-o", str(work), str(HERE / "leaks_workload.c")],
                       check=True)
        fp_plan = tmp / "c-leaks-fp.yaml"
        text = (ROOT / "plans" / "c-leaks.yaml").read_text()
        fp_plan.write_text(text.replace("stack: {unwind: auto}", "stack: {unwind: fp}"))
        fp_plan.with_name("c-leaks-small.yaml").write_text(
            text.replace("stack: {unwind: auto}", "stack: {unwind: auto, bytes: 4096}"))
        table = tools()
        names = list(table)
        ns: dict[str, list[float]] = {n: [] for n in names}
        for r in range(a.rounds):
            order = names[r % len(names):] + names[:r % len(names)]
            for name in order:
                ns[name].append(run_one(table[name], work, a.iters, tmp, fp_plan))
                time.sleep(0.5)
            print(f"round {r + 1}: " + ", ".join(f"{n.split()[0]}={ns[n][-1]:.0f}"
                                                  for n in order), file=sys.stderr)
    med = statistics.median
    base = med(ns["none"])
    print(f"{a.iters} malloc(64)+free pairs per run, {a.rounds} rounds, median ns per pair "
          f"(min..max), added over untraced:")
    for n in names:
        print(f"  {n}: {med(ns[n]):.0f} ({min(ns[n]):.0f}..{max(ns[n]):.0f}), "
              f"+{med(ns[n]) - base:.0f}")


if __name__ == "__main__":
    main()
