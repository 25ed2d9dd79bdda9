"""A first run of every bundled plan, launch -> `Tracing`, split (issue 28 item 3).

    sudo .venv/bin/python bench/first_run.py [-n 3] [--plans a,b] [--baseline TREE ...]
                                             [--json OUT]

Each run is a new user's first: `planrunner run plans/NAME.yaml` (system-wide, the
plan's defaults; mysql-slow-usdt against the stand-in mysqld of
tests/e2e/test_plans_databases.py, built here) with PLANRUNNER_CACHE_DIR an empty
directory of its own, so neither the run cache nor the compiled-program cache has
anything. stdout goes to /dev/null; the run is stopped (SIGINT) at its `Tracing` line.

The split comes from the run's own marks (PLANRUNNER_TIMING=1, planrunner/timing.py:
CLOCK_MONOTONIC, the same clock as this script's launch time):

  python     launch -> the first line of planrunner/__main__.py (interpreter start)
  imports    -> `run` begins (the CLI's imports, argparse)
  setup      -> the plan is read (cache dir, run key, the compile worker spawned)
  load+resolve  plan/ and resolve/ (ELF: notes, symbols, DWARF where asked)
  render     render/ (jinja2, the C)
  to-compile -> the C is handed to the compile worker (session set-up, registration)
  clang      the worker's bcc compile (BPF(text=...): clang + LLVM), as the parent waits
  wait       the rest of the parent's wait for the worker (its start and bcc import,
             when they were not done by the time the C was ready; the reply)
  kernel     -> loaded (maps created, programs loaded by our bpf() calls, verifier)
  attach     -> attached (config, scope, uprobe links / perf events)
  after      -> the `Tracing` line (ring, stacks: /proc maps of running processes)

The worker's own start (spawn -> its first line, then importing bcc) runs beside the
parent's work and is shown apart. Rounds are interleaved (each round every plan once,
in a rotated order) with bpftrace's one-liner start in each round for reference
(launch -> its BEGIN probe's line: bpftrace runs BEGIN once every probe is attached).
With --baseline TREE (a checkout of another commit), each plan also runs from that
tree in the same rounds (launch -> `Tracing` only: an older tree has no marks).
Beside the wall time, the CPU time of the run and of its compile worker (reaped by
then) by the `Tracing` line, from /proc: on a machine other jobs share it moves far
less. Medians over rounds (min..max); the machine line names the CPU and the load
average.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import compile_bytecode, cpu_model  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
PY = str(ROOT / ".venv" / "bin" / "python")
BOUND_S = 60.0
SEGMENTS = (  # (name, from mark, to mark); "launch" is this script's time of launch
    ("python", "launch", "main"),
    ("imports", "main", "command"),
    ("setup", "command", "worker-spawned"),
    ("load+resolve", "worker-spawned", "resolved"),
    ("render", "resolved", "rendered"),
    ("to-compile", "rendered", "compile-request"),
    ("clang", "worker-request", "worker-compiled"),
    ("wait", None, None),  # compile-request -> compile-reply, less clang
    ("kernel", "compile-reply", "loaded"),
    ("attach", "loaded", "attached"),
    ("after", "attached", "tracing"),
)
WORKER = (("worker start", "worker-spawned", "worker-main"),
          ("bcc import", "worker-main", "worker-bcc"))
BPFTRACE = ["bpftrace", "-e", 'uprobe:/usr/bin/python3.11:_PyEval_EvalFrameDefault '
            '{ @[pid] = count(); } BEGIN { printf("READY\\n"); }']


def plan_args(name: str, tree: Path, extra: dict[str, list[str]]) -> list[str]:
    return [str(tree / "plans" / f"{name}.yaml"), *extra.get(name, [])]


def fake_mysqld(workdir: Path) -> list[str]:
    """mysql-slow-usdt's target: Debian's MariaDB has no mysql: USDT probes."""
    sys.path.insert(0, str(ROOT))
    from tests.e2e.test_plans_databases import FAKE_MYSQLD  # noqa: PLC0415

    src, binary = workdir / "mysqld.c", workdir / "mysqld"
    src.write_text(FAKE_MYSQLD)
    subprocess.run(["gcc", "-O2", "-o", str(binary), str(src)], check=True)
    return ["--set", f"mysqld={binary}"]


def first_run(tree: Path, argv: list[str], cache_root: Path) -> dict[str, float]:
    """One run from launch to its `Tracing` line: the marks, relative to the launch."""
    cache = tempfile.mkdtemp(dir=cache_root)
    env = {**os.environ, "PLANRUNNER_TIMING": "1", "PLANRUNNER_CACHE_DIR": cache,
           "PYTHONPATH": str(tree)}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    marks: dict[str, float] = {}
    launch = time.monotonic()
    proc = subprocess.Popen([PY, "-m", "planrunner", "run", *argv], cwd=tree, env=env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    assert proc.stderr is not None
    try:
        for raw in proc.stderr:
            line = raw.decode(errors="replace")
            if line.startswith("planrunner-timing "):
                _, phase, at, _pid = line.split()
                marks[phase] = float(at) - launch
            elif line.startswith("Tracing "):
                marks.setdefault("tracing", time.monotonic() - launch)
                marks["line"] = time.monotonic() - launch
                marks["cpu"] = tree_cpu(proc.pid)
                break
            if time.monotonic() - launch > BOUND_S:
                break
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)  # ours, by PID
        try:
            proc.communicate(timeout=BOUND_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
        shutil.rmtree(cache, ignore_errors=True)
    if "line" not in marks:
        raise RuntimeError(f"no Tracing line from {argv} (exit {proc.returncode})")
    return marks


def tree_cpu(pid: int) -> float:
    """CPU s of `pid` and its reaped children (the compile worker, waited for once it
    answered): user + system, 10 ms ticks. Moves far less than wall time on a machine
    other jobs share."""
    with open(f"/proc/{pid}/stat", "rb") as fh:
        fields = fh.read().rsplit(b")", 1)[1].split()
    return sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def bpftrace_start() -> float:
    launch = time.monotonic()
    proc = subprocess.Popen(BPFTRACE, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL)
    assert proc.stdout is not None
    took = float("nan")
    for raw in proc.stdout:
        if raw.startswith(b"READY"):
            took = time.monotonic() - launch
            break
    proc.send_signal(signal.SIGINT)  # ours, by PID
    try:
        proc.communicate(timeout=BOUND_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
    return took


def split(marks: dict[str, float]) -> dict[str, float]:
    row: dict[str, float] = {}
    at = {"launch": 0.0, **marks}
    for name, a, b in SEGMENTS + WORKER:
        if a is not None and b is not None and a in at and b in at:
            row[name] = at[b] - at[a]
    if "compile-request" in at and "compile-reply" in at:
        row["wait"] = at["compile-reply"] - at["compile-request"] - row.get("clang", 0.0)
    row["total"] = at["line"]
    row["cpu"] = marks.get("cpu", float("nan"))
    return row


def med(xs: list[float]) -> str:
    xs = [x for x in xs if x == x]
    if not xs:
        return "-"
    return f"{statistics.median(xs):.3f} ({min(xs):.3f}..{max(xs):.3f})"


def mid(xs: list[float]) -> float:
    xs = [x for x in xs if x == x]
    return statistics.median(xs) if xs else float("nan")


def machine() -> str:
    return (f"Linux {os.uname().release}, {os.cpu_count()} CPUs ({cpu_model()}), Python "
            f"{sys.version.split()[0]}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")


def load_average() -> str:
    return " ".join(open("/proc/loadavg").read().split()[:3])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", "--rounds", type=int, default=3)
    ap.add_argument("--plans", help="comma-separated plan names (default: every bundled plan)")
    ap.add_argument("--baseline", action="append", default=[], metavar="TREE",
                    help="another checkout whose runs are timed in the same rounds")
    ap.add_argument("--json", metavar="OUT")
    args = ap.parse_args()
    names = (args.plans.split(",") if args.plans
             else sorted(p.stem for p in (ROOT / "plans").glob("*.yaml")))
    trees = [("this tree", ROOT)] + [(f"baseline {b}", Path(b).resolve())
                                     for b in args.baseline]
    for _, tree in trees:
        compile_bytecode(str(tree), PY, str(tree / "plans" / "python-calls.yaml"))
    work = Path(tempfile.mkdtemp(prefix="planrunner-first-run-"))
    extra = {"mysql-slow-usdt": fake_mysqld(work)} if "mysql-slow-usdt" in names else {}
    loads = [load_average()]
    rows: dict[str, dict[str, list[dict[str, float]]]] = {
        label: {n: [] for n in names} for label, _ in trees}
    ref: list[float] = []
    try:
        for r in range(args.rounds):
            order = names[r % len(names):] + names[:r % len(names)]
            ref.append(bpftrace_start())
            for name in order:
                for label, tree in trees[r % len(trees):] + trees[:r % len(trees)]:
                    marks = first_run(tree, plan_args(name, tree, extra), work)
                    rows[label][name].append(split(marks))
            loads.append(load_average())
            print(f"round {r + 1}/{args.rounds} done, load {loads[-1]}", file=sys.stderr)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    ref_mid = mid(ref)
    print(f"Machine: {machine()}; load average (1/5/15 min) at each round's end: "
          f"{'; '.join(loads)}\n")
    print(f"Command: `sudo .venv/bin/python bench/first_run.py -n {args.rounds}"
          f"{' --baseline ...' if args.baseline else ''}` (medians of {args.rounds} "
          f"interleaved rounds, min..max)\n")
    print(f"bpftrace one-liner (uprobe on python3.11, launch -> BEGIN's line): "
          f"{med(ref)} s\n")
    cols = [s[0] for s in SEGMENTS]
    print("| plan | launch -> Tracing s | vs bpftrace | CPU s | " + " | ".join(cols)
          + " | worker start | bcc import |")
    print("|---|---|---|---|" + "---|" * (len(cols) + 2))
    for name in names:
        runs = rows["this tree"][name]
        total = [x["total"] for x in runs]
        cells = [f"{mid([x.get(c, float('nan')) for x in runs]):.3f}" for c in cols]
        cells += [f"{mid([x.get(c, float('nan')) for x in runs]):.3f}"
                  for c, _, _ in WORKER]
        cpu = mid([x.get("cpu", float("nan")) for x in runs])
        print(f"| {name} | {med(total)} | {mid(total) / ref_mid:.1f}x | {cpu:.2f} | "
              + " | ".join(cells) + " |")
    if args.baseline:
        for what, title in (("total", "launch -> Tracing s"), ("cpu", "CPU s by Tracing")):
            print(f"\nA/B, {title} (same rounds; ratios against the first baseline):\n")
            print("| plan | " + " | ".join(label for label, _ in trees)
                  + " | this / baseline |")
            print("|---|" + "---|" * (len(trees) + 1))
            ratios = []
            for name in names:
                mids = [mid([x[what] for x in rows[label][name]]) for label, _ in trees]
                ratios.append(mids[0] / mids[1])
                print(f"| {name} | " + " | ".join(f"{m:.3f}" for m in mids)
                      + f" | {mids[0] / mids[1]:.2f} |")
            print(f"\nMedian of the per-plan ratios: {statistics.median(ratios):.3f}")
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows, "bpftrace": ref,
                                               "loads": loads}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
