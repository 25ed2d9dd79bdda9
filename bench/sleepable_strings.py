"""Per-event cost of a sleepable string probe against today's non-sleepable one (issue 16
item 3), in the traced process, same run, interleaved rounds.

    sudo .venv/bin/python bench/sleepable_strings.py [--rounds 5] [--seconds 2]

The print plan of bench/run.py (bench:tick with a `word` string argument, JSON out) on
workload_plain `loop SECONDS` (back to back), three ways per round, rotated: untraced;
planrunner as it loads by default here (the probe reads a string, so BPF_F_SLEEPABLE
with -DPR_SLEEPABLE: task-storage scratch, faulting readers); and planrunner with
PLANRUNNER_SLEEPABLE=0 (per-CPU scratch, non-faulting readers: the program before issue
16). The words are in pages the workload has touched, so both read them in the kernel
(checked: no record may carry `reread`). Prints a Markdown table: medians of wall ns and
CPU ns per hit, the per-hit cost over untraced, and the ratio sleepable / non-sleepable.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import phases  # noqa: E402
from run import build, machine  # noqa: E402
from tools import PLANRUNNER, PR_READY, Tool, write_plans  # noqa: E402

CONFIGS = {
    "untraced": None,
    "sleepable": Tool("sleepable", (PLANRUNNER, "run", "{plan}", "--pid", "{pid}", "-f",
                                    "json"), "print", PR_READY),
    "non-sleepable": Tool("non-sleepable", ("env", "PLANRUNNER_SLEEPABLE=0", PLANRUNNER, "run",
                                            "{plan}", "--pid", "{pid}", "-f", "json"),
                          "print", PR_READY),
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--hz", type=int, default=20000)
    a = ap.parse_args()
    out = Path(tempfile.mkdtemp(prefix="pr-sleepable-bench-"))
    bins = build(Path(__file__).resolve().parent / "build" / "run")
    env = phases.Env(bins, write_plans(out, bins), out,
                     lambda msg: print(msg, file=sys.stderr, flush=True))
    modes = {"loop": ["loop", f"{a.seconds:g}"], "rate": ["rate", str(a.hz), f"{a.seconds:g}"]}
    names = list(CONFIGS)
    rows: dict[tuple[str, str], list[dict[str, object]]] = {
        (m, n): [] for m in modes for n in names}
    for rnd in range(a.rounds):
        k = rnd % len(names)
        for mode, wl_args in modes.items():
            for name in names[k:] + names[:k]:  # rotated: no fixed position
                tag = f"r{rnd}-{mode}-{name}"
                row = phases.traced_run(env, CONFIGS[name], "plain", wl_args, tag)
                if CONFIGS[name] is not None:
                    row["reread"] = (out / f"{tag}.out").read_bytes().count(b'"reread"')
                env.log(f"round {rnd + 1} {mode} {name}: ns={row.get('ns_per_iter')} "
                        f"cpu={row.get('cpu_ns_per_hit')} busy={row.get('busy_ns_per_fire')} "
                        f"delivered={row.get('delivered')} lost={row.get('lost')} "
                        f"reread={row.get('reread')} {row.get('error', '')}")
                rows[(mode, name)].append(row)

    def med(mode: str, name: str, key: str) -> float:
        return statistics.median(float(r[key]) for r in rows[(mode, name)])  # type: ignore[arg-type]

    metrics = [("loop", "cpu_ns_per_hit", "loop: CPU ns/hit"),
               ("loop", "ns_per_iter", "loop: wall ns/hit"),
               ("rate", "busy_ns_per_fire", f"{a.hz // 1000}k/s: busy ns/hit")]
    print(f"{machine()}; medians of {a.rounds} interleaved rounds, {a.seconds:g} s each\n")
    print("| config | " + " | ".join(m[2] for m in metrics) + " | lost (loop) | reread |")
    print("|---|" + "---:|" * (len(metrics) + 2))
    for name in names:
        cells = [f"{med(mode, name, key):.0f}" for mode, key, _ in metrics]
        lost = "" if CONFIGS[name] is None else str(sum(
            int(r.get("lost") or 0) for r in rows[("loop", name)]))  # type: ignore[call-overload]
        rr = "" if CONFIGS[name] is None else str(sum(
            int(r.get("reread") or 0) for m in modes for r in rows[(m, name)]))  # type: ignore[call-overload]
        print(f"| {name} | " + " | ".join(cells) + f" | {lost} | {rr} |")
    print()
    for mode, key, label in metrics:
        base = med(mode, "untraced", key)
        s_cost = med(mode, "sleepable", key) - base
        n_cost = med(mode, "non-sleepable", key) - base
        print(f"- {label} over untraced: sleepable {s_cost:.0f}, non-sleepable {n_cost:.0f}, "
              f"ratio {s_cost / n_cost:.2f}x")
    print(f"\n(raw output in {out})")


if __name__ == "__main__":
    main()
