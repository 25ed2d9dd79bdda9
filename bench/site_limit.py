"""What a plan's number of probe sites costs to start: the figures behind
settings.max_sites and the estimate its error gives (issue 23 item 11).

Per N: a plan of N uprobes on N distinct exported functions of PostgreSQL's server
binary (bench/many_probes.py writes it; each probe counted, the cheapest body) with
`max_sites` raised past N, run with --no-cache (a first run: clang compiles every site)
from launch to its "Tracing" line, then SIGINT. Nothing is traced: no postgres runs.
Peak RSS is the largest of the `run` process and its compile worker, CPU seconds those
of both (user + system), by getrusage RUSAGE_CHILDREN of a fresh wrapper process per run
(so runs do not mix). On a shared machine the wall time grows with the load; the CPU
time is what a run would take alone (the compile is one thread).

    sudo .venv/bin/python bench/site_limit.py [--counts 300,1000,2000,3000] [--timeout 1800]
                                              [--strings]

--strings: each probe prints its first argument read as a string (a sleepable site,
which compiled with debug info until issue 28's fifteenth session) instead of a count.

The machine is shared (other jobs on its CPUs): the load average is printed with each
row, and a figure is one run, not a median.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

from many_probes import ROOT, write_plan

# A wrapper per run: RUSAGE_CHILDREN then holds that run's processes only.
WRAPPER = r"""
import json, resource, signal, subprocess, sys, time
t0 = time.monotonic()
proc = subprocess.Popen(sys.argv[2:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                        text=True)
line = proc.stderr.readline()
ready = time.monotonic() - t0
if line.startswith("Tracing"):
    proc.send_signal(signal.SIGINT)
rest = proc.stderr.read()
proc.wait(timeout=float(sys.argv[1]))
ru = resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({"ready_s": ready, "started": line.startswith("Tracing"),
                  "error": "" if line.startswith("Tracing") else (line + rest)[-2000:],
                  "cpu_s": ru.ru_utime + ru.ru_stime, "peak_rss_mb": ru.ru_maxrss / 1024}))
"""


def measure(plan: str, timeout: float) -> dict[str, object]:
    argv = [sys.executable, "-m", "planrunner", "run", "--no-cache", plan]
    proc = subprocess.run([sys.executable, "-c", WRAPPER, str(timeout), *argv], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout + 60)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-2000:])
    result: dict[str, object] = json.loads(proc.stdout)
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--counts", default="300,1000,2000,3000")
    ap.add_argument("--timeout", type=float, default=1800)
    ap.add_argument("--strings", action="store_true", help="sites that read strings")
    a = ap.parse_args()
    cpu = next((line.split(":", 1)[1].strip() for line in
                Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())
    print(f"machine: {cpu}, {os.cpu_count()} CPUs, Linux {platform.release()}")
    print("| sites | launch -> Tracing s | CPU s | CPU ms per site | peak RSS MB | load avg |")
    print("|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for n in (int(x) for x in a.counts.split(",")):
            plan = write_plan(tmp, n, a.strings)
            with open(plan, "a") as fh:
                fh.write(f"settings:\n  max_sites: {n}\n")
            load = os.getloadavg()[0]
            r = measure(plan, a.timeout)
            if not r["started"]:
                print(f"| {n} | did not start: {r['error']!r} | | | | {load:.1f} |",
                      flush=True)
                continue
            cpu = float(str(r["cpu_s"]))
            print(f"| {n} | {float(str(r['ready_s'])):.1f} | {cpu:.1f} | "
                  f"{cpu / n * 1000:.0f} | {float(str(r['peak_rss_mb'])):.0f} | "
                  f"{load:.1f} |", flush=True)


if __name__ == "__main__":
    main()
