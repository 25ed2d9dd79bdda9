"""Printing every event, A/B: the per-hit cost of planrunner's print path from this tree
and from a baseline tree (e.g. a `git archive` of main), beside the uprobe floor, in
the same run: rounds interleaved, order rotated, ratios taken within each round.

Two modes, as bench/run.py's overhead phases: `rate` (workload `rate 10000 1.5`, every
event printed; figure: busy wall ns per event) and `loop` (back to back, `loop 1`;
figure: the target's CPU ns per hit). Both planrunner trees run with the same
interpreter and venv, chosen by PYTHONPATH alone.

    sudo .venv/bin/python bench/print_ab.py --baseline /tmp/base [--rounds 9]
        [--modes rate,loop] [--format text]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

from harness import mono
from phases import Env, traced_run
from run import build, cleanup, machine
from tools import PRINT_PLAN, TOOLS, Tool, write_plans

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PY = str(ROOT / ".venv" / "bin" / "python")


def planrunner_tool(name: str, tree: str, fmt: str) -> Tool:
    argv = ("env", f"PYTHONPATH={tree}", PY, "-m", "planrunner", "run", "{plan}", "--pid",
            "{pid}", "-f", fmt)
    return Tool(name, argv, "print", r"^Tracing ")


def figure(row: dict[str, object], mode: str) -> float | None:
    key = "busy_ns_per_fire" if mode == "rate" else "cpu_ns_per_hit"
    value = row.get(key)
    return float(value) if isinstance(value, (int, float)) else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--baseline", required=True, help="the other planrunner tree")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--modes", default="rate,loop")
    ap.add_argument("--format", default="text", help="planrunner's -f (text, json, csv)")
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench/print_ab.py needs root (BPF)")
    outdir = HERE / "out" / f"print-ab-{os.getpid()}"
    outdir.mkdir(parents=True, exist_ok=True)
    bins = build(HERE / "build" / "run")
    plans = write_plans(outdir, {"plain": bins["plain"]})
    assert PRINT_PLAN  # the plan both trees run: tools.PRINT_PLAN
    env = Env(bins, plans, outdir, lambda msg: print(msg, file=sys.stderr, flush=True))
    tools = {"floor": TOOLS["floor"],
             "now": planrunner_tool("now", str(ROOT), a.format),
             "baseline": planrunner_tool("baseline", a.baseline, a.format)}
    wl = {"rate": ["rate", "10000", "1.5"], "loop": ["loop", "1"]}
    t0 = mono()
    print(f"Machine: {machine()}\n")
    try:
        for mode in a.modes.split(","):
            rows: dict[str, list[float]] = {k: [] for k in tools}
            ratios: dict[str, list[float]] = {"now": [], "baseline": [], "now/baseline": []}
            delivered: dict[str, list[str]] = {"now": [], "baseline": []}
            names = list(tools)
            for rnd in range(a.rounds):
                k = rnd % len(names)
                got: dict[str, float] = {}
                for name in names[k:] + names[:k]:
                    row = traced_run(env, tools[name], "plain", wl[mode], f"{mode}-{rnd}-{name}")
                    value = figure(row, mode)
                    env.log(f"[{mode}] round {rnd + 1} {name}: {value} delivered="
                            f"{row.get('delivered')}/{row.get('fired')} lost={row.get('lost')}"
                            f" {row.get('error', '')}")
                    if value is not None and "error" not in row:
                        got[name] = value
                        rows[name].append(value)
                    if name in delivered:
                        delivered[name].append(f"{row.get('delivered')}/{row.get('fired')}")
                if "floor" in got:
                    for name in ("now", "baseline"):
                        if name in got:
                            ratios[name].append(got[name] / got["floor"])
                if "now" in got and "baseline" in got:
                    ratios["now/baseline"].append(got["now"] / got["baseline"])
            what = ("busy wall ns/event, paced 10k/s" if mode == "rate"
                    else "target CPU ns/hit, back to back")
            print(f"### {mode}: {what}, {a.rounds} rounds, -f {a.format}\n")
            print("| tool | median (min..max) | x floor, same round: median (min..max) |"
                  " delivered/fired per round |")
            print("|---|---|---|---|")
            for name, vals in rows.items():
                if not vals:
                    continue
                rs = ratios.get(name, [])
                rtxt = (f"{statistics.median(rs):.2f} ({min(rs):.2f}..{max(rs):.2f})"
                        if rs else "-")
                print(f"| {name} | {statistics.median(vals):.0f} ({min(vals):.0f}.."
                      f"{max(vals):.0f}) | {rtxt} | {' '.join(delivered.get(name, [])) or '-'} |")
            nb = ratios["now/baseline"]
            if nb:
                print(f"\nnow/baseline, same round: median {statistics.median(nb):.3f} "
                      f"({min(nb):.3f}..{max(nb):.3f})\n")
    finally:
        cleanup()
        print(f"({mono() - t0:.0f} s; raw outputs in {outdir})")


if __name__ == "__main__":
    main()
