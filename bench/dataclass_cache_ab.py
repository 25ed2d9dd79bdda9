"""What the dataclass cache (planrunner/dataclass_cache.py) is worth, now that the CLI's
entry installs it instead of `import planrunner` (issue 24 item 6): wall and CPU time of
fresh processes, rounds interleaved with the order rotated.

    cli        python -m planrunner validate PLAN   (the entry: cache installed)
    no-cache   python -c 'planrunner.cli.main()' validate PLAN   (same code, no cache)
    baseline   python -m planrunner validate PLAN   from --baseline (a tree where the
               package installed it on import), when given
    import     python -c 'import planrunner'   (now, and from the baseline)

CPU time (user + sys, from wait4) is less hurt by other load than wall time.

    .venv/bin/python bench/dataclass_cache_ab.py [--rounds 25] [--baseline /tmp/base]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PY = str(ROOT / ".venv" / "bin" / "python")
sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import compile_bytecode  # noqa: E402

PLAN = str(ROOT / "plans" / "java-gc.yaml")
NO_CACHE = "import sys; from planrunner.cli import main; sys.exit(main())"


def timed(argv: list[str], tree: str) -> tuple[float, float]:
    """(wall s, CPU s) of one run of `argv` with `tree` first on PYTHONPATH."""
    env = {**os.environ, "PYTHONPATH": tree}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    start = time.monotonic()
    proc = subprocess.Popen(argv, cwd="/", env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    _, status, ru = os.wait4(proc.pid, 0)
    wall = time.monotonic() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{argv} exited {proc.returncode}")
    return wall, ru.ru_utime + ru.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=25)
    parser.add_argument("--baseline", help="a tree whose package installs the cache on import")
    parser.add_argument("--plan", default=PLAN)
    args = parser.parse_args()
    now = str(ROOT)
    compile_bytecode(now, PY, args.plan)
    commands: dict[str, tuple[list[str], str]] = {
        "validate, CLI entry (cache)": ([PY, "-m", "planrunner", "validate", args.plan], now),
        "validate, main() alone (no cache)": ([PY, "-c", NO_CACHE, "validate", args.plan],
                                              now),
        "import planrunner": ([PY, "-c", "import planrunner"], now),
    }
    if args.baseline:
        compile_bytecode(args.baseline, PY, args.plan)
        commands["validate, baseline (cache on import)"] = (
            [PY, "-m", "planrunner", "validate", args.plan], args.baseline)
        commands["import planrunner, baseline"] = ([PY, "-c", "import planrunner"],
                                                   args.baseline)
    names = list(commands)
    got: dict[str, list[tuple[float, float]]] = {n: [] for n in names}
    for r in range(args.rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            got[name].append(timed(*commands[name]))
    print(f"Command: `.venv/bin/python bench/dataclass_cache_ab.py --rounds {args.rounds}"
          f"{' --baseline ' + args.baseline if args.baseline else ''}`  ")
    print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} CPUs, "
          f"load {os.getloadavg()[0]:.2f}, plan {args.plan}\n")
    print("| command | median wall ms | min..max wall ms | median CPU ms |")
    print("|---|---:|---:|---:|")
    for name in names:
        walls = [w * 1000 for w, _ in got[name]]
        cpus = [c * 1000 for _, c in got[name]]
        print(f"| {name} | {statistics.median(walls):.1f} | {min(walls):.1f}..{max(walls):.1f}"
              f" | {statistics.median(cpus):.1f} |")


if __name__ == "__main__":
    main()
