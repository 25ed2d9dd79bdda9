"""What the maps timeline (planrunner/stacks/timeline.py) pays for a fork storm: a
parent seeded with MAPS executable mappings forks a child RATE times a second for the
timeline's 60 s (each child exits 0.5 us after its fork), as a postmaster's backends or
a shell's commands would. Reports the time per fork record and the memory the timeline
holds then (tracemalloc, in a second pass), for this checkout and, with --baseline,
another one, in interleaved rounds (each in a fresh python: `-c`, from `/`).

    .venv/bin/python bench/timeline_fork.py [--baseline OTHER_CHECKOUT] [--rounds 5]
        [--rate 1000] [--maps 100]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

PASS = """
import os, sys, time, tracemalloc
sys.path.insert(0, {tree!r})
from planrunner.stacks.timeline import KEEP_NS, MapsTimeline, Mmap
maps = [Mmap(0x1000 * i, 0x1000 * i + 0x800, 0, 5, os.makedev(8, 1), i, f"/lib{{i}}.so")
        for i in range(1, {maps} + 1)]
def storm():
    tl = MapsTimeline()
    tl.seed(1, maps)
    step = 1_000_000_000 // {rate}
    n = KEEP_NS // step
    t0 = time.perf_counter()
    for k in range(n):
        tl.fork(100_000 + k, 1, k * step)
        tl.exit(100_000 + k, k * step + 500)
    return n, time.perf_counter() - t0, tl
n, took, tl = storm()
del tl
tracemalloc.start()
_, _, tl = storm()
held = tracemalloc.get_traced_memory()[0]
print(n, took / n * 1e9, held)
"""


def one(tree: str, rate: int, maps: int) -> tuple[float, float]:
    out = subprocess.run([sys.executable, "-c", PASS.format(tree=tree, rate=rate, maps=maps)],
                         capture_output=True, text=True, check=True, cwd="/").stdout.split()
    return float(out[1]), float(out[2])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--baseline", default="")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--rate", type=int, default=1000)
    ap.add_argument("--maps", type=int, default=100)
    a = ap.parse_args()
    trees = {"this": str(ROOT)} | ({"baseline": a.baseline} if a.baseline else {})
    got: dict[str, list[tuple[float, float]]] = {n: [] for n in trees}
    for r in range(a.rounds):
        for name in (list(trees) if r % 2 == 0 else list(trees)[::-1]):
            got[name].append(one(trees[name], a.rate, a.maps))
    cpu = next((line.split(":", 1)[1].strip() for line in
                Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), "unknown")
    print(f"CPU: {cpu}; {os.cpu_count()} CPUs; kernel {os.uname().release}; "
          f"{a.rate} forks/s for 60 s, parent with {a.maps} mappings; {a.rounds} rounds")
    med = statistics.median
    for name, rows in got.items():
        print(f"  {name:8} {med(r[0] for r in rows) / 1000:7.1f} us/fork, "
              f"{med(r[1] for r in rows) / 1e6:7.1f} MB held")
    if a.baseline:
        pairs = zip(got["baseline"], got["this"], strict=True)
        ratios = [(b[0] / t[0], b[1] / t[1]) for b, t in pairs]
        print(f"baseline/this, same round (median): time {med(x for x, _ in ratios):.1f}x, "
              f"memory {med(y for _, y in ratios):.1f}x")


if __name__ == "__main__":
    main()
