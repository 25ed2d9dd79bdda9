"""Per-event cost of the BPF side's "new process" notice (render/stacks.py
pid_notice_lines: a lookup in the pr_seen map at every event of a plan that copies user
stacks or names addresses with usym()), in the traced process: planrunner's own rendered
C on the uprobe floor's attach (bench/bare_floor.py), with and without the notice, for a
DWARF `count by ustack` and a `count by usym(...)`, in the same rounds.

    sudo .venv/bin/python bench/notice_cost.py [--rounds 7] [--iters 200000] [--only usym]

Both variants drop the prologue's pr_skip (its scope and self checks read config slots
nobody fills here): what differs between them is the notice alone. The machinery is
bench/agg_overhead.py's (probe bench:hit fired ITERS times back to back on CPU 1).
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import agg_overhead as A  # noqa: E402 - a sibling: the workload, run_one
from stack_cost import cpu_model, fp_source  # noqa: E402

PLANS = {
    "dwarf count by ustack": """planrunner: 1
name: bench-notice-dwarf
targets: {{w: {{binary: "{binary}"}}}}
stack: {{unwind: dwarf}}
probes: {{hit: {{usdt: "w:bench:hit"}}}}
outputs:
  - count: hit
    by: [ustack]
""",
    "count by usym": """planrunner: 1
name: bench-notice-usym
targets: {{w: {{binary: "{binary}"}}}}
probes: {{hit: {{usdt: "w:bench:hit", args: [{{name: k}}]}}}}
outputs:
  - count: hit
    by: [usym(k)]
""",
}
SKIP = "    if (pr_skip(PR_CFG_SCOPE_UPROBE))\n        return 0;\n"
NOTICE = re.compile(r"( *)\{  /\* a process seen for the first time.*?\n\1\}\n", re.S)


def tools() -> dict[str, list[str] | None]:
    floor = ["/usr/bin/python3", str(A.HERE / "bare_floor.py"), str(A.WORKLOAD), "{site}",
             "{pid}"]
    table: dict[str, list[str] | None] = {"none": None, "floor (empty bcc uprobe)": floor}
    for what, plan_text in PLANS.items():
        plan = A.WORKLOAD.parent / f"notice_{what.split()[-1]}.yaml"
        plan.write_text(plan_text.format(binary=A.WORKLOAD))
        got = fp_source(plan)
        if got is None:
            raise SystemExit(f"{what}: no site")
        text, fn = got
        text = text.replace(SKIP, "")
        without, n = NOTICE.subn("", text)
        if n == 0:
            raise SystemExit(f"{what}: the rendered C has no notice to take out")
        for variant, src in (("with the notice", text), ("without", without)):
            path = A.WORKLOAD.parent / f"notice_{what.split()[-1]}_{variant.split()[0]}.bpf.c"
            path.write_text(src)
            table[f"{what}, {variant}"] = [*floor, str(path), fn]
    return table


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--iters", type=int, default=200_000)
    ap.add_argument("--only", default="", help="measure only the plan whose name holds "
                    "this (dwarf, usym); the floor and the bare loop always run")
    a = ap.parse_args()
    site = A.build()
    table = {n: (None if v is None else [x.replace("{site}", hex(site)) for x in v])
             for n, v in tools().items() if n in ("none", "floor (empty bcc uprobe)")
             or a.only in n}
    plans = [p for p in PLANS if a.only in p]
    names = list(table)
    logdir = Path(os.environ.get("BENCH_OUT", A.WORKLOAD.parent / "logs"))
    logdir.mkdir(parents=True, exist_ok=True)
    ns: dict[str, list[float]] = {n: [] for n in names}
    for r in range(a.rounds):
        order = names[r % len(names):] + names[:r % len(names)]
        for name in order:
            got, _ = A.run_one(name, table[name], site, a.iters, 1, logdir)
            ns[name].append(got)
            time.sleep(0.3)
        print(f"round {r + 1}: " + ", ".join(f"{n}={ns[n][-1]:.0f}" for n in order),
              file=sys.stderr, flush=True)
    med = statistics.median
    print(f"CPU: {cpu_model()}; {os.cpu_count()} CPUs; kernel {os.uname().release}; "
          f"{a.iters} hits per run, {a.rounds} rounds")
    for n in names:
        print(f"  {n:42} median {med(ns[n]):7.0f} ns/hit")
    for what in plans:
        with_, without = ns[f"{what}, with the notice"], ns[f"{what}, without"]
        diff = med([x - y for x, y in zip(with_, without, strict=True)])
        ratio = med([x / y for x, y in zip(with_, without, strict=True)])
        print(f"{what}: the notice adds {diff:+.0f} ns/hit (same-round median), "
              f"ratio with/without {ratio:.3f}")


if __name__ == "__main__":
    main()
