"""Printing every event, A/B: the per-hit cost of planrunner's print path from this tree
and from a baseline tree (e.g. a `git archive` of main), beside the uprobe floor, in
the same run: rounds interleaved, order rotated, ratios taken within each round.

Modes: `rate` (workload `rate 10000 1.5`, every event printed; figure: busy wall ns per
event) and `loop` (back to back, `loop 1`; figure: the target's CPU ns per hit), both
against the uprobe floor as in bench/run.py's overhead phases; `flood` (`rate 1000000
--flood-secs`; figure: records printed per second) against bpftrace's printf. Beside
each: the BPF programs' own run time per run (BPF_ENABLE_STATS held by this driver), the
figure least disturbed by other jobs on the machine. Both planrunner trees run with the
same interpreter and venv, chosen by PYTHONPATH alone, from `/` (`python -m` would put
the working directory first on sys.path). `--now DIR` measures another tree than this
one (a variant cut by hand, say); `--baseline-env` sets the baseline's environment.

    sudo .venv/bin/python bench/print_ab.py --baseline /tmp/base [--rounds 9]
        [--modes rate,loop,flood] [--format text|json|csv] [--now DIR]
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
from scope_cost import enable_bpf_stats
from tools import PRINT_PLAN, TOOLS, Tool, write_plans

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PY = str(ROOT / ".venv" / "bin" / "python")


def planrunner_tool(name: str, tree: str, fmt: str, extra_env: tuple[str, ...] = ()) -> Tool:
    # from / : `python -m` puts the working directory first on sys.path
    argv = ("env", "-C", "/", f"PYTHONPATH={tree}", *extra_env, PY, "-m", "planrunner",
            "run", "{plan}", "--pid", "{pid}", "-f", fmt)
    return Tool(name, argv, "print", r"^Tracing ")


def descendants(pid: int) -> list[int]:
    """pid and every process below it (the tracer runs under timeout and env)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            with open(f"/proc/{p}/task/{p}/children") as fh:
                todo += [int(c) for c in fh.read().split()]
        except OSError:
            pass
    return out


def bpf_run_ns(pid: int, row: dict[str, object]) -> None:
    """The BPF programs' own run time per run in the tracer's processes (the kernel counts
    it while BPF_ENABLE_STATS is held): the program's cost without the uprobe trap and
    the scheduling noise of a shared machine. Only programs that ran count."""
    total_ns = total_cnt = 0
    for p in descendants(pid):
        try:
            fds = os.listdir(f"/proc/{p}/fdinfo")
        except OSError:
            continue
        for fd in fds:
            try:
                with open(f"/proc/{p}/fdinfo/{fd}") as fh:
                    info = dict(line.split(":", 1) for line in fh.read().splitlines()
                                if ":" in line)
            except OSError:
                continue
            if "run_cnt" in info and "prog_tag" in info:
                total_ns += int(info["run_time_ns"])
                total_cnt += int(info["run_cnt"])
    if total_cnt > 1000:
        row["bpf_ns_per_run"] = total_ns / total_cnt


def figure(row: dict[str, object], mode: str) -> float | None:
    if mode == "flood":  # records printed per second of the workload's run
        got, el = row.get("delivered"), row.get("elapsed_ns")
        ok = isinstance(got, (int, float)) and isinstance(el, (int, float)) and el
        return float(got) / (float(el) / 1e9) if ok else None  # type: ignore[arg-type]
    key = "busy_ns_per_fire" if mode == "rate" else "cpu_ns_per_hit"
    value = row.get(key)
    return float(value) if isinstance(value, (int, float)) else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--baseline", required=True, help="the other planrunner tree")
    ap.add_argument("--now", default=str(ROOT), help="the planrunner tree to measure "
                    "(default: this one)")
    ap.add_argument("--baseline-env", action="append", default=[], metavar="NAME=VALUE",
                    help="environment of the baseline's runs (e.g. PLANRUNNER_SLEEPABLE=0)")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--flood-secs", type=float, default=5.0)
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
             "now": planrunner_tool("now", a.now, a.format),
             "baseline": planrunner_tool("baseline", a.baseline, a.format,
                                         tuple(a.baseline_env))}
    wl = {"rate": ["rate", "10000", "1.5"], "loop": ["loop", "1"],
          "flood": ["rate", "1000000", str(a.flood_secs)]}
    t0 = mono()
    print(f"Machine: {machine()}\n")
    stats_fd = enable_bpf_stats()
    try:
        for mode in a.modes.split(","):
            # the flood's reference is bpftrace's printf (records per second printed)
            ref = "bpftrace-printf" if mode == "flood" else "floor"
            tools = {ref: TOOLS[ref], "now": tools["now"], "baseline": tools["baseline"]}
            rows: dict[str, list[float]] = {k: [] for k in tools}
            ratios: dict[str, list[float]] = {"now": [], "baseline": [], "now/baseline": []}
            delivered: dict[str, list[str]] = {"now": [], "baseline": []}
            bpf: dict[str, list[float]] = {k: [] for k in tools}
            bpf_diff: list[float] = []  # now - baseline, BPF ns/run, within a round
            # flood: the tracer's CPU per printed record, steadier than records per
            # second where other jobs take the consumer's CPU
            cpu_per: dict[str, list[float]] = {"now": [], "baseline": [], "now/baseline": []}
            names = list(tools)
            for rnd in range(a.rounds):
                k = rnd % len(names)
                got: dict[str, float] = {}
                got_bpf: dict[str, float] = {}
                per_rec: dict[str, float] = {}
                for name in names[k:] + names[:k]:
                    row = traced_run(env, tools[name], "plain", wl[mode], f"{mode}-{rnd}-{name}",
                                     before_stop=bpf_run_ns)
                    if "bpf_ns_per_run" in row:
                        bpf[name].append(float(row["bpf_ns_per_run"]))  # type: ignore[arg-type]
                        got_bpf[name] = bpf[name][-1]
                    value = figure(row, mode)
                    env.log(f"[{mode}] round {rnd + 1} {name}: {value} delivered="
                            f"{row.get('delivered')}/{row.get('fired')} lost={row.get('lost')}"
                            f" {row.get('error', '')}")
                    if value is not None and "error" not in row:
                        got[name] = value
                        rows[name].append(value)
                    if name in delivered:
                        delivered[name].append(f"{row.get('delivered')}/{row.get('fired')}")
                    cpu_s, n = row.get("tracer_cpu_s"), row.get("delivered")
                    if (mode == "flood" and name in cpu_per and isinstance(cpu_s, float)
                            and isinstance(n, int) and n):
                        per_rec[name] = cpu_s * 1e6 / n
                        cpu_per[name].append(per_rec[name])
                if ref in got:
                    for name in ("now", "baseline"):
                        if name in got:
                            ratios[name].append(got[name] / got[ref])
                if "now" in got and "baseline" in got:
                    ratios["now/baseline"].append(got["now"] / got["baseline"])
                if "now" in got_bpf and "baseline" in got_bpf:
                    bpf_diff.append(got_bpf["now"] - got_bpf["baseline"])
                if "now" in per_rec and "baseline" in per_rec:
                    cpu_per["now/baseline"].append(per_rec["now"] / per_rec["baseline"])
            what = {"rate": "busy wall ns/event, paced 10k/s",
                    "loop": "target CPU ns/hit, back to back",
                    "flood": f"records printed/s at 1M/s offered for {a.flood_secs} s"}[mode]
            print(f"### {mode}: {what}, {a.rounds} rounds, -f {a.format}\n")
            print(f"| tool | median (min..max) | x {ref}, same round: median (min..max) |"
                  " BPF program ns/run median (min..max) | delivered/fired per round |")
            print("|---|---|---|---|---|")
            for name, vals in rows.items():
                if not vals:
                    continue
                rs = ratios.get(name, [])
                rtxt = (f"{statistics.median(rs):.2f} ({min(rs):.2f}..{max(rs):.2f})"
                        if rs else "-")
                b = bpf[name]
                btxt = (f"{statistics.median(b):.0f} ({min(b):.0f}..{max(b):.0f})" if b else "-")
                print(f"| {name} | {statistics.median(vals):.0f} ({min(vals):.0f}.."
                      f"{max(vals):.0f}) | {rtxt} | {btxt} | "
                      f"{' '.join(delivered.get(name, [])) or '-'} |")
            nb = ratios["now/baseline"]
            if nb:
                print(f"\nnow/baseline, same round: median {statistics.median(nb):.3f} "
                      f"({min(nb):.3f}..{max(nb):.3f})\n")
            if cpu_per["now"] and cpu_per["baseline"]:
                print("tracer CPU us per printed record, median (min..max): now "
                      + "; baseline ".join(
                          f"{statistics.median(v):.2f} ({min(v):.2f}..{max(v):.2f})"
                          for v in (cpu_per["now"], cpu_per["baseline"])))
                if cpu_per["now/baseline"]:
                    v = cpu_per["now/baseline"]
                    print(f"now/baseline, same round: median {statistics.median(v):.3f} "
                          f"({min(v):.3f}..{max(v):.3f})\n")
            if bpf_diff:
                print(f"now - baseline, BPF program ns/run, same round: median "
                      f"{statistics.median(bpf_diff):+.0f} ({min(bpf_diff):+.0f}.."
                      f"{max(bpf_diff):+.0f}), now lower in "
                      f"{sum(d < 0 for d in bpf_diff)}/{len(bpf_diff)} rounds\n")
    finally:
        os.close(stats_fd)
        cleanup()
        print(f"({mono() - t0:.0f} s; raw outputs in {outdir})")


if __name__ == "__main__":
    main()
