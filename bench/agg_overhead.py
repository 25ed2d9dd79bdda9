"""Per-event overhead, in the traced process, of counting a USDT probe by one integer key
in the kernel: planrunner's `count ... by [arg1]` against `argdist-bpfcc -C` and
bpftrace `@[arg0] = count()`, with the uprobe floor (an empty BPF program) and the
untraced loop in every round.

    sudo .venv/bin/python bench/agg_overhead.py [--rounds 7] [--iters 2000000] [--keys 16]

Builds bench/workload.c (its `ADDR ITERS KEYS` mode, probe bench:hit(long key), key =
i % KEYS) into bench/build/agg/ (-O2 -no-pie: the note's address is the run-time one),
then per round, in a rotated order, for each tool: starts the workload pinned to CPU 1
(it waits until the probe site holds int3, then settles 300 ms), starts the tracer with
`-p PID` in its own process group, lets the workload fire ITERS hits back to back, then
stops the tracer with SIGINT (SIGKILL to its group after 15 s). Reports medians over
rounds of ns/hit; "over the floor" and "x floor" are taken within each round (tool -
floor, and (tool - untraced) / (floor - untraced)), then their median. Checks each
counting tool saw every hit where its output says so (argdist prints nothing at exit).

While planrunner's prologue reads the clock for every event (a count does not need it),
a what-if row attaches planrunner's rendered C with that one line removed (loaded by
bench/bare_floor.py, so without planrunner's runtime, which is idle during the loop).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
BUILD = HERE / "build"
WORKLOAD = BUILD / "agg" / "workload"
PLANRUNNER = str(ROOT / ".venv" / "bin" / "planrunner")
PLAN = """planrunner: 1
name: bench-count
targets: {w: {binary: "%s"}}
probes: {hit: {usdt: "w:bench:hit"}}
outputs:
  - count: hit
    by: [arg1]
"""


def build() -> int:
    """Compile the workload; return the probe's address (non-PIE: run-time address)."""
    WORKLOAD.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["gcc", "-O2", "-no-pie", "-o", str(WORKLOAD), str(HERE / "workload.c")],
                   check=True)
    sys.path.insert(0, str(ROOT))
    from planrunner.usdt.listing import probe_details

    (probe,) = probe_details([str(WORKLOAD)], "bench:hit")
    return probe.sites[0].pc


def loadable_c(program: Any) -> str:
    """The rendered C as the run's loader compiles it: with the running kernel's
    constants (struct offsets from BTF, `RuntimeConstant`) defined, which planrunner
    passes as -D flags and bcc's BPF(text=...) in a bench loader would not get."""
    from planrunner.elf.btf import runtime_cflags

    flags = runtime_cflags(program.runtime_constants)
    defines = "".join("#define {} {}\n".format(*f[2:].split("=", 1)) for f in flags)
    return defines + str(program.c_source)


def what_if_source(plan: str) -> tuple[str, str] | None:
    """planrunner's rendered C for the plan without the prologue's clock read, which a
    count does not use (None when the renderer already leaves it out)."""
    from planrunner.pipeline import compile_plan

    program = compile_plan(plan, {})[2]
    line = "__u64 pr_ts = bpf_ktime_get_ns();"
    if line not in program.c_source:
        return None
    text = loadable_c(program).replace(line, "")
    if "pr_ts" in text:
        return None
    path = WORKLOAD.parent / "agg_count_no_ts.bpf.c"
    path.write_text(text)
    return str(path), program.sites[0].fn_name


def tools(plan: str, site: int) -> dict[str, list[str] | None]:
    binary = str(WORKLOAD)
    floor = ["/usr/bin/python3", str(HERE / "bare_floor.py"), binary, hex(site), "{pid}"]
    table: dict[str, list[str] | None] = {
        "none": None,
        "floor (empty bcc uprobe)": floor,
        "planrunner count by arg1": [PLANRUNNER, "run", plan, "--pid", "{pid}", "-f", "json"],
        "argdist -C arg1": ["argdist-bpfcc", "-p", "{pid}", "-C",
                            f"u:{binary}:hit():long:arg1"],
        "bpftrace @[arg0] = count()": ["bpftrace", "-p", "{pid}", "-e",
                                       f"usdt:{binary}:bench:hit {{ @[arg0] = count(); }}"],
    }
    what_if = what_if_source(plan)
    if what_if:
        table["what-if: planrunner's C without bpf_ktime_get_ns"] = [
            *floor, *what_if]
    return table


def counted(name: str, out: str) -> int | None:
    """Hits the tool reports having counted (None when its output does not say)."""
    if name.startswith("planrunner"):
        rows = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
        return sum(r.get("count", 0) for r in rows)
    if name.startswith("bpftrace"):
        return sum(int(n) for n in re.findall(r"^@\[\d+\]: (\d+)$", out, re.M)) or None
    return None  # argdist prints per interval only, nothing at exit


def run_one(name: str, argv: list[str] | None, site: int, iters: int, keys: int,
            logdir: Path) -> tuple[float, int | None]:
    work = subprocess.Popen(["taskset", "-c", "1", str(WORKLOAD),
                             hex(site) if argv else "0", str(iters), str(keys)],
                            stdout=subprocess.PIPE, text=True)
    tracer = None
    log = logdir / (re.sub(r"\W+", "_", name) + ".out")
    try:
        if argv:
            with open(log, "w") as out:
                tracer = subprocess.Popen([a.replace("{pid}", str(work.pid)) for a in argv],
                                          stdout=out, stderr=subprocess.STDOUT,
                                          start_new_session=True)
        stdout, _ = work.communicate(timeout=120)
    finally:
        if tracer is not None:
            _stop(tracer)
        if work.poll() is None:
            work.kill()
    fields = dict(kv.split("=") for kv in stdout.split())
    if argv and fields["attached"] != "1":
        raise RuntimeError(f"{name}: the tracer never attached (see {log})")
    got = counted(name, log.read_text()) if argv else None
    return float(fields["ns_per_iter"]), got


def _stop(proc: subprocess.Popen) -> None:
    """SIGINT the tracer (it prints its counts), SIGKILL its own group if it hangs."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--iters", type=int, default=2_000_000)
    ap.add_argument("--keys", type=int, default=16, help="distinct keys (a power of two)")
    a = ap.parse_args()
    site = build()
    plan = WORKLOAD.parent / "agg_count.yaml"
    plan.write_text(PLAN % WORKLOAD)
    table = tools(str(plan), site)
    names = list(table)
    logdir = Path(os.environ.get("BENCH_OUT", WORKLOAD.parent / "logs"))
    logdir.mkdir(parents=True, exist_ok=True)
    ns: dict[str, list[float]] = {n: [] for n in names}
    checks: dict[str, list[int | None]] = {n: [] for n in names}
    for r in range(a.rounds):
        order = names[r % len(names):] + names[:r % len(names)]
        for name in order:
            got, seen = run_one(name, table[name], site, a.iters, a.keys, logdir)
            ns[name].append(got)
            checks[name].append(seen)
            time.sleep(0.5)
        print(f"round {r + 1}: " + ", ".join(f"{n.split()[0]}={ns[n][-1]:.0f}" for n in order),
              file=sys.stderr, flush=True)
    report(names, ns, checks, a.iters)


def report(names: list[str], ns: dict[str, list[float]],
           checks: dict[str, list[int | None]], iters: int) -> None:
    """Medians over rounds; differences and ratios are taken within each round."""
    med = statistics.median
    none, floor = ns[names[0]], ns[names[1]]
    print("| tool | ns/hit median (min..max) | added over untraced | over the floor "
          "| x floor (added) | hits counted / fired |\n|---|---|---|---|---|---|")
    for name in names:
        t = ns[name]
        over = [x - f for x, f in zip(t, floor, strict=True)]
        ratio = [(x - n) / (f - n) for x, n, f in zip(t, none, floor, strict=True)]
        seen = [c for c in checks[name] if c is not None]
        fired = f"{min(seen)}..{max(seen)} / {iters}" if seen else "n/a"
        cells = [f"{med(t):.1f} ({min(t):.1f}..{max(t):.1f})",
                 f"{med([x - n for x, n in zip(t, none, strict=True)]):.1f}"]
        cells += ["-", "-"] if name == names[0] else [f"{med(over):+.1f}", f"{med(ratio):.3f}"]
        print(f"| {name} | " + " | ".join(cells) + f" | {fired} |")


if __name__ == "__main__":
    main()
