"""Per-event cost, in the traced process, of capturing a user stack: planrunner counting
a USDT probe by `ustack` with frame pointers (a stack id: the kernel's walk) and with a
DWARF copy (registers + 16 KiB of stack, hashed into the key, each distinct copy stored
once), side by side with bpftrace `@[ustack] = count()` and bcc's `trace -U` (a stack id
per event, printed), with the untraced loop and the uprobe floor in every round.

    sudo .venv/bin/python bench/stack_cost.py [--rounds 5] [--iters 200000] [--only RE]
        [--baseline OTHER_CHECKOUT]

The machinery is bench/agg_overhead.py's (its workload mode: probe bench:hit fired
ITERS times back to back on CPU 1, the tracer attached with -p PID first, stopped with
SIGINT); only the tools differ. The workload's stack is shallow (main -> agg_mode), so
the kernel's frame-pointer walk is short: a deeper stack costs fp more per frame, while a
DWARF copy costs the same whatever the depth (it always copies `bytes`). The report
names the CPU model (from /proc/cpuinfo).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import agg_overhead as A  # noqa: E402 - a sibling: the workload, run_one, _stop

PLAN = """planrunner: 1
name: bench-stack-{mode}
targets: {{w: {{binary: "{binary}"}}}}
stack: {{unwind: {mode}}}
probes: {{hit: {{usdt: "w:bench:hit"}}}}
outputs:
  - count: hit
    by: [ustack]
"""


def cpu_model() -> str:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return "unknown"
    m = re.search(r"^model name\s*:\s*(.+)$", text, re.M)
    return m.group(1).strip() if m else "unknown"


def tools(site: int) -> dict[str, list[str] | None]:
    binary = str(A.WORKLOAD)
    table: dict[str, list[str] | None] = {
        "none": None,
        "floor (empty bcc uprobe)": ["/usr/bin/python3", str(A.HERE / "bare_floor.py"),
                                     binary, hex(site), "{pid}"],
    }
    for mode in ("fp", "dwarf"):
        plan = A.WORKLOAD.parent / f"stack_{mode}.yaml"
        plan.write_text(PLAN.format(mode=mode, binary=binary))
        table[f"planrunner count by ustack ({mode})"] = [
            A.PLANRUNNER, "run", str(plan), "--pid", "{pid}", "-f", "json"]
    # what-ifs on the floor's attach (bare_floor.py): the kernel's walk alone, into a
    # stack map of addresses (bpftrace's, trace's, planrunner's) and of build-id frames
    # (planrunner's before issue 17: no maps needed, but a build-id lookup per frame)
    for what, flags in (("addresses", ", 0"), ("build-id frames", ", BPF_F_STACK_BUILD_ID")):
        path = A.WORKLOAD.parent / f"stackid_{what[0]}.bpf.c"
        elem = "__u64" if flags == ", 0" else "struct bpf_stack_build_id"
        path.write_text(
            "#include <asm/ptrace.h>\n"
            f"struct v {{ {elem} f[64]; }};\n"
            f'BPF_F_TABLE("stacktrace", int, struct v, st, 4096{flags});\n'
            "int on_hit(struct pt_regs *ctx) { st.get_stackid(ctx, BPF_F_USER_STACK); "
            "return 0; }\n")
        table[f"what-if: get_stackid alone, {what}"] = [
            *table["floor (empty bcc uprobe)"], str(path), "on_hit"]  # type: ignore[misc]
    # what-ifs: planrunner's own fp program on the floor's attach (a perf-event uprobe,
    # as bpftrace's), as rendered and without its prologue (pr_skip: the self and scope
    # checks), to tell the program's cost from the attach's
    fp_c = fp_source(A.WORKLOAD.parent / "stack_fp.yaml")
    if fp_c is not None:
        text, fn = fp_c
        skip = "    if (pr_skip(PR_CFG_SCOPE_UPROBE))\n        return 0;\n"
        for what, src in (("as rendered", text), ("without pr_skip", text.replace(skip, ""))):
            path = A.WORKLOAD.parent / f"stack_fp_{what.split()[0]}.bpf.c"
            path.write_text(src)
            table[f"what-if: planrunner's fp C {what}"] = [
                *table["floor (empty bcc uprobe)"], str(path), fn]  # type: ignore[misc]
    table["bpftrace @[ustack] = count()"] = [
        "bpftrace", "-p", "{pid}", "-e", f"usdt:{binary}:bench:hit {{ @[ustack] = count(); }}"]
    table["trace-bpfcc -U (prints each)"] = ["trace-bpfcc", "-U", "-p", "{pid}",
                                             f"u:{binary}:hit"]
    return table


def fp_source(plan: Path) -> tuple[str, str] | None:
    """planrunner's rendered C of the fp plan and its probe's function."""
    from planrunner.pipeline import compile_plan

    program = compile_plan(str(plan), {})[2]
    if not program.sites:
        return None
    return A.loadable_c(program), program.sites[0].fn_name


def counted(name: str, out: str) -> int | None:
    if name.startswith("planrunner"):
        rows = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
        return sum(r.get("count", 0) for r in rows)
    if name.startswith("bpftrace"):
        return sum(int(n) for n in re.findall(r"^\]: (\d+)$", out, re.M)) or None
    return None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--iters", type=int, default=200_000)
    ap.add_argument("--only", default="", help="a regex: run only the tools it matches "
                    "(none and the floor always run)")
    ap.add_argument("--baseline", default="", help="another planrunner checkout (an A/B): "
                    "its fp plan runs as one more tool, with this venv's python")
    a = ap.parse_args()
    site = A.build()
    table = tools(site)
    if a.baseline:
        plan = A.WORKLOAD.parent / "stack_fp.yaml"
        table["planrunner baseline count by ustack (fp)"] = [
            "sh", "-c", f"cd {a.baseline} && exec {sys.executable} -m planrunner run {plan} "
            "--pid {pid} -f json"]
    if a.only:
        keep = list(table)[:2]
        table = {n: v for n, v in table.items() if n in keep or re.search(a.only, n)}
    names = list(table)
    logdir = Path(os.environ.get("BENCH_OUT", A.WORKLOAD.parent / "logs"))
    logdir.mkdir(parents=True, exist_ok=True)
    ns: dict[str, list[float]] = {n: [] for n in names}
    checks: dict[str, list[int | None]] = {n: [] for n in names}
    for r in range(a.rounds):
        order = names[r % len(names):] + names[:r % len(names)]
        for name in order:
            got, _ = A.run_one(name, table[name], site, a.iters, 1, logdir)
            ns[name].append(got)
            log = logdir / (re.sub(r"\W+", "_", name) + ".out")
            checks[name].append(counted(name, log.read_text()) if table[name] else None)
            time.sleep(0.5)
        print(f"round {r + 1}: " + ", ".join(f"{n.split()[0]}={ns[n][-1]:.0f}" for n in order),
              file=sys.stderr, flush=True)
    print(f"CPU: {cpu_model()}; {os.cpu_count()} CPUs; kernel {os.uname().release}; "
          f"{a.iters} hits per run, {a.rounds} rounds\n")
    A.report(names, ns, checks, a.iters)
    med = statistics.median
    print("\nadded ns/hit over the floor, the stack capture alone: " + ", ".join(
        f"{n}: {med([x - f for x, f in zip(ns[n], ns[names[1]], strict=True)]):+.0f}"
        for n in names[2:]))
    ref = next((n for n in names if n.startswith("bpftrace")), None)
    if ref is None:
        return
    floor = ns[names[1]]

    def ratio(n: str) -> str:  # paired within each round: the load of the moment cancels
        hit = med([x / b for x, b in zip(ns[n], ns[ref], strict=True)])
        added = med([(x - f) / (b - f) for x, b, f in zip(ns[n], ns[ref], floor, strict=True)])
        return f"{n}: {hit:.2f}, {added:.2f}"

    print("same-run ratio to bpftrace (median of the rounds' ratios), ns/hit and added "
          "over the floor: " + "; ".join(ratio(n) for n in names[2:] if n != ref))


if __name__ == "__main__":
    main()
