"""Benchmark `planrunner list` against bcc's tplist and bpftrace -l on real binaries.

Each command runs as a fresh process (startup is part of what users wait for), output to
/dev/null. Rounds are interleaved (every command once per round, order rotated) so drift
in machine load hits all of them alike. Reported per command: median and min..max wall
time, and the median of the per-round ratio to the matching tplist command
(`list` vs `tplist -l`, `list -vv` vs `tplist -vv -l`).

    .venv/bin/python bench/list_bench.py [--rounds 11]
"""

from __future__ import annotations

import argparse
import glob
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from harness import compile_bytecode  # noqa: E402

PLANRUNNER = str(ROOT / ".venv" / "bin" / "planrunner")


def binaries() -> dict[str, str]:
    jvm = sorted(glob.glob("/usr/lib/jvm/*17*/lib/server/libjvm.so"))
    found = {
        "libjvm.so": os.path.realpath(jvm[0]) if jvm else "",
        "postgres": "/usr/lib/postgresql/15/bin/postgres",
        "python3.11": "/usr/bin/python3.11",
    }
    return {k: v for k, v in found.items() if v and os.path.exists(v)}


def commands(path: str) -> dict[str, tuple[list[str], str | None]]:
    """label -> (argv, label of the tplist command it is compared with)."""
    tplist = shutil.which("tplist-bpfcc") or shutil.which("tplist")
    cmds: dict[str, tuple[list[str], str | None]] = {
        "planrunner list": ([PLANRUNNER, "list", path], "tplist -l"),
        "planrunner list -vv": ([PLANRUNNER, "list", "-vv", path], "tplist -vv -l"),
    }
    if tplist:
        cmds["tplist -l"] = ([tplist, "-l", path], None)
        cmds["tplist -vv -l"] = ([tplist, "-vv", "-l", path], None)
    if shutil.which("bpftrace"):
        cmds["bpftrace -l"] = (["bpftrace", "-l", f"usdt:{path}:*"], "tplist -l")
    return cmds


def time_once(argv: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - start


def bench(path: str, rounds: int) -> list[tuple[str, str, float, float, float, float | None]]:
    cmds = commands(path)
    labels = list(cmds)
    for label in labels:  # warm the page cache and check every command works
        time_once(cmds[label][0])
    times: dict[str, list[float]] = {label: [] for label in labels}
    for r in range(rounds):
        for label in labels[r % len(labels):] + labels[:r % len(labels)]:
            times[label].append(time_once(cmds[label][0]))
    rows = []
    for label in labels:
        t = times[label]
        base = cmds[label][1]
        ratio = None
        if base in times:
            ratio = statistics.median(a / b for a, b in zip(t, times[base], strict=True))
        rows.append((label, shlex.join(cmds[label][0]), statistics.median(t), min(t), max(t),
                     ratio))
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=11)
    args = parser.parse_args()
    compile_bytecode(str(ROOT), sys.executable)  # tplist's bcc modules ship compiled
    print(f"`{shlex.join([sys.executable, *sys.argv])}`, {args.rounds} interleaved rounds, "
          "fresh process per run, output to /dev/null, planrunner's .pyc compiled first; "
          "ratio = median of per-round ratios to the matching tplist command.\n")
    print("| binary | command | median ms | min..max ms | ratio vs tplist |")
    print("|---|---|---:|---:|---:|")
    exact: list[str] = []
    for name, path in binaries().items():
        for label, argv, med, lo, hi, ratio in bench(path, args.rounds):
            shown = f"{ratio:.2f}" if ratio is not None else "-"
            print(f"| {name} | {label} | {med * 1000:.1f} | {lo * 1000:.1f}..{hi * 1000:.1f} "
                  f"| {shown} |", flush=True)
            exact.append(argv)
    print("\nExact commands:\n")
    for argv in dict.fromkeys(exact):
        print(f"    {argv}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
