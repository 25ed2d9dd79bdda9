"""How a plan's cost grows with its number of probes (issue 15 item 18).

Writes plans of N uprobes on N distinct exported functions of PostgreSQL's server
binary (each probe counted by a `count` output, the cheapest body), then measures per
N: `validate` wall time, the size of the rendered C, and `run` from launch to the
"Tracing" line (compile, load, attach) and from SIGINT to exit (detach), each a fresh
process. Nothing is traced: no postgres runs. One line per N, medians of --reps runs.

    sudo .venv/bin/python bench/many_probes.py [--counts 100,300,1000] [--reps 3]
"""

from __future__ import annotations

import argparse
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PLANRUNNER = [sys.executable, "-m", "planrunner"]
POSTGRES = "/usr/lib/postgresql/15/bin/postgres"


def functions(binary: str, n: int) -> list[str]:
    out = subprocess.run(["nm", "-D", "--defined-only", binary], capture_output=True,
                         text=True, check=True).stdout
    names = sorted({line.split()[-1] for line in out.splitlines()
                    if line.split()[1:2] == ["T"] and "@" not in line})
    if len(names) < n:
        sys.exit(f"{binary} exports only {len(names)} functions")
    return names[:n]


def write_plan(directory: str, n: int, strings: bool = False) -> str:
    """N uprobes on N exported functions of PostgreSQL, each counted; with `strings`,
    each printing its first argument read as a string instead (a sleepable site)."""
    names = functions(POSTGRES, n)
    probes = "".join(f"  p{i}: {{uprobe: pg:{name}}}\n" for i, name in enumerate(names))
    outputs = "".join(f"  - {{print: p{i}, fields: [{{s: \"str(arg1)\"}}]}}\n" if strings
                      else f"  - {{count: p{i}}}\n" for i in range(n))
    path = os.path.join(directory, f"many-{n}.yaml")
    Path(path).write_text(f"planrunner: 1\nname: many-{n}\ntargets:\n  pg: {{binary: {POSTGRES}}}\n"
                          f"probes:\n{probes}outputs:\n{outputs}")
    return path


def timed(argv: list[str]) -> float:
    t0 = time.monotonic()
    subprocess.run(argv, cwd=ROOT, capture_output=True, check=True)
    return time.monotonic() - t0


def run_once(plan: str, timeout: float) -> tuple[float, float]:
    """(launch -> "Tracing", SIGINT -> exit) of one `run`."""
    t0 = time.monotonic()
    proc = subprocess.Popen([*PLANRUNNER, "run", plan], cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    try:
        line = proc.stderr.readline()
        ready = time.monotonic() - t0
        if not line.startswith("Tracing"):
            raise RuntimeError(f"run did not start: {line}{proc.stderr.read()}")
        t1 = time.monotonic()
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=timeout)
        return ready, time.monotonic() - t1
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--counts", default="100,300,1000")
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    cpu = next((line.split(":", 1)[1].strip() for line in
                Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())
    print(f"machine: {cpu}, {os.cpu_count()} CPUs, Linux {platform.release()}; "
          f"load average {os.getloadavg()[0]:.1f}")
    print("| probes | validate s | C bytes | launch -> Tracing s | SIGINT -> exit s |")
    print("|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for n in (int(x) for x in a.counts.split(",")):
            plan = write_plan(tmp, n)
            val = statistics.median(timed([*PLANRUNNER, "validate", plan])
                                    for _ in range(a.reps))
            size = len(subprocess.run([*PLANRUNNER, "render", plan], cwd=ROOT,
                                      capture_output=True, check=True).stdout)
            runs = [run_once(plan, 600) for _ in range(a.reps)]
            print(f"| {n} | {val:.2f} | {size} | {statistics.median(r[0] for r in runs):.2f} "
                  f"| {statistics.median(r[1] for r in runs):.2f} |", flush=True)


if __name__ == "__main__":
    main()
