"""A burst from a short Python run, traced as a new user would: what is printed, what is
lost, with planrunner's default ring (sized from the record), the old fixed 1 MiB ring
(`settings: {ringbuf_pages: 256}`, same code) and bpftrace's printf, in the same run.

The workload: python3.11 runs a script that calls a function 10,000 times back to back
(`-c`, so every return from interpreter start-up on is traced too: ~12,250 records);
each tool prints file, function and line of every `python:function__return`. Rounds are
interleaved (order rotated). Reported per tool: median (min..max) of the burst's own
records printed, of the records reported lost, and wall time.

    sudo .venv/bin/python bench/burst_bench.py [--rounds 5] [--calls 10000]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from cli_bench import cpu_model  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
PLANRUNNER = str(ROOT / ".venv" / "bin" / "planrunner")
PYTHON = "/usr/bin/python3.11"
PLAN = """planrunner: 1
name: burst
targets: {{py: {{binary: {python}}}}}
probes:
  ret:
    usdt: py:python:function__return
    args: [{{name: file, type: string}}, {{name: func, type: string}}, {{name: line, type: int32}}]
{settings}outputs:
  - print: ret
    fields: [file, func, line]
"""
BT = ('usdt:{python}:python:function__return '
      '{{ printf("%s %s %d\\n", str(arg0), str(arg1), arg2); }}')
LOST = re.compile(r"(\d+) events lost|Lost (\d+) events")


def run_one(argv: list[str], script: str) -> tuple[int, int, float]:
    """(burst records printed, lost reported, wall s)."""
    start = time.perf_counter()
    proc = subprocess.run(["timeout", "--foreground", "-s", "INT", "-k", "5", "120", *argv],
                          capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    printed = sum(1 for line in proc.stdout.splitlines()
                  if script in line and re.search(r"\sf\s+\d+\s*$", line))
    # planrunner reports its losses on stderr and in the output stream: count one of them
    lost = max(sum(int(a or b) for a, b in LOST.findall(text))
               for text in (proc.stdout, proc.stderr))
    return printed, lost, wall


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--calls", type=int, default=10_000)
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench/burst_bench.py needs root (BPF)")
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "burst.py"
        script.write_text(f"def f():\n    pass\n\n\nfor _ in range({a.calls}):\n    f()\n")
        default = Path(tmp) / "default.yaml"
        default.write_text(PLAN.format(python=PYTHON, settings=""))
        old = Path(tmp) / "ring1mib.yaml"
        old.write_text(PLAN.format(python=PYTHON, settings="settings: {ringbuf_pages: 256}\n"))
        cmd = f"{PYTHON} {script}"
        tools = {
            "planrunner, default ring": [PLANRUNNER, "run", str(default), "-c", cmd],
            "planrunner, ringbuf_pages: 256 (old default)": [PLANRUNNER, "run", str(old),
                                                             "-c", cmd],
            "bpftrace printf": ["bpftrace", "-e", BT.format(python=PYTHON), "-c", cmd],
        }
        pages = subprocess.run([PLANRUNNER, "render", str(default)], capture_output=True,
                               text=True, check=True).stdout
        ring = re.search(r"#define PR_RINGBUF_PAGES (\d+)", pages)
        names = list(tools)
        res: dict[str, list[tuple[int, int, float]]] = {n: [] for n in names}
        for r in range(a.rounds):
            for name in names[r % len(names):] + names[:r % len(names)]:
                res[name].append(run_one(tools[name], str(script)))
    print(f"Command: `.venv/bin/python bench/burst_bench.py --rounds {a.rounds} "
          f"--calls {a.calls}`  ")
    print(f"Machine: Linux {os.uname().release}, {os.cpu_count()} CPUs ({cpu_model()}), "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; default ring of this plan: "
          f"{ring.group(1) if ring else '?'} pages\n")
    print(f"| tool | f() returns printed of {a.calls} median (min..max) | lost reported "
          "median (min..max) | wall s median | runs with loss |")
    print("|---|---|---|---|---|")
    for name in names:
        rows = res[name]
        p = [x[0] for x in rows]
        lost = [x[1] for x in rows]
        print(f"| {name} | {statistics.median(p):.0f} ({min(p)}..{max(p)}) | "
              f"{statistics.median(lost):.0f} ({min(lost)}..{max(lost)}) | "
              f"{statistics.median(x[2] for x in rows):.2f} | "
              f"{sum(1 for x in rows if x[1] or x[0] < a.calls)}/{len(rows)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
