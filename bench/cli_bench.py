"""Wall time of short planrunner commands (validate, list, render) in fresh processes,
beside the reference tools and, optionally, a baseline checkout, in the same run.

Each command runs as a fresh process (start-up is what the user waits for), output to
/dev/null, rounds interleaved with the order rotated so drift in machine load hits every
command alike. Reported: median and min..max wall ms per command, and the median of the
per-round ratios to the reference command (`tplist -l` on the same binary). With
`--baseline DIR` (e.g. a `git archive` of main unpacked in /tmp) every planrunner
command also runs from that tree (same interpreter and venv, PYTHONPATH=DIR), and its
per-round ratio baseline/current is reported: a before/after from one run.

    .venv/bin/python bench/cli_bench.py [--rounds 15] [--baseline /tmp/base]
"""

from __future__ import annotations

import argparse
import glob
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PY = str(ROOT / ".venv" / "bin" / "python")
sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import compile_bytecode, cpu_model  # noqa: E402
from tools import VALIDATE_PLAN  # noqa: E402


def jvm() -> str:
    found = sorted(glob.glob("/usr/lib/jvm/*17*/lib/server/libjvm.so"))
    return os.path.realpath(found[0]) if found else ""


def commands(tmp: Path) -> dict[str, tuple[list[str], bool]]:
    """label -> (argv, is a planrunner command). planrunner runs as `python -m planrunner`
    so that the baseline tree can be chosen by PYTHONPATH alone."""
    lib = jvm()
    plan = tmp / "validate-jvm.yaml"
    plan.write_text(VALIDATE_PLAN.format(jvm=lib))
    pr = [PY, "-m", "planrunner"]
    cmds: dict[str, tuple[list[str], bool]] = {
        "validate bench plan (libjvm)": ([*pr, "validate", str(plan)], True),
        "validate plans/java-gc.yaml": ([*pr, "validate", str(ROOT / "plans/java-gc.yaml")],
                                        True),
        "list libjvm.so": ([*pr, "list", lib], True),
        "render plans/python-calls.yaml": (
            [*pr, "render", str(ROOT / "plans/python-calls.yaml")], True),
        "tplist -l libjvm.so": (["tplist-bpfcc", "-l", lib], False),
        "bpftrace -l libjvm.so": (["bpftrace", "-l", f"usdt:{lib}:*"], False),
    }
    return cmds


def time_once(argv: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True,
                   env=env, cwd="/")
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--baseline", help="a checkout to compare with (PYTHONPATH)")
    args = parser.parse_args()
    trees = {"now": str(ROOT)}
    if args.baseline:
        trees["baseline"] = os.path.abspath(args.baseline)
    with tempfile.TemporaryDirectory() as tmp:
        cmds = commands(Path(tmp))
        for tree in trees.values():  # as an installed package has them
            compile_bytecode(tree, PY, str(Path(tmp) / "validate-jvm.yaml"))
        runs: dict[str, tuple[list[str], dict[str, str]]] = {}
        for label, (argv, ours) in cmds.items():
            if not ours:
                runs[label] = (argv, dict(os.environ))
                continue
            for tree, path in trees.items():
                env = {**os.environ, "PYTHONPATH": path}
                runs[f"{label} [{tree}]" if len(trees) > 1 else label] = (argv, env)
        labels = list(runs)
        for label in labels:  # warm the page cache; check every command works
            time_once(*runs[label])
        times: dict[str, list[float]] = {label: [] for label in labels}
        for r in range(args.rounds):
            for label in labels[r % len(labels):] + labels[:r % len(labels)]:
                times[label].append(time_once(*runs[label]))
    ref = "tplist -l libjvm.so"
    print(f"Command: `{shlex.join(['.venv/bin/python', *sys.argv])}`  ")
    print(f"Machine: Linux {platform.release()}, {os.cpu_count()} CPUs ({cpu_model()}), "
          f"Python {platform.python_version()}, "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {args.rounds} interleaved "
          "rounds, fresh process per run, output to /dev/null\n")
    extra = " | baseline/now (same round)" if len(trees) > 1 else ""
    print(f"| command | median ms | min..max ms | x tplist -l (same round){extra} |")
    print("|---|---:|---:|---:" + ("|---:" if extra else "") + "|")
    for label in labels:
        t = times[label]
        ratio = statistics.median(a / b for a, b in zip(t, times[ref], strict=True))
        row = (f"| {label} | {statistics.median(t) * 1000:.1f} | "
               f"{min(t) * 1000:.1f}..{max(t) * 1000:.1f} | {ratio:.2f} |")
        if extra:
            if label.endswith(" [now]"):
                base = times[label.replace(" [now]", " [baseline]")]
                row += f" {statistics.median(b / a for a, b in zip(t, base, strict=True)):.2f} |"
            else:
                row += " - |"
        print(row)
    print("\nExact commands (planrunner ones with PYTHONPATH=<tree>):\n")
    for argv, _ in cmds.values():
        print(f"    {shlex.join(argv)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
