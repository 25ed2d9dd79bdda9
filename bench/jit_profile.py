"""JIT frames from perf maps (issue 26 item 2): a Node 20 profile before and after.

    sudo .venv/bin/python bench/jit_profile.py [--rounds 3] [--cpu-seconds 4]
        [--before /path/to/a/main/checkout]

Each round runs tests/e2e/workloads/js_spin.js (hotFunction and coldFunction share the
CPU 3:1, measured by the workload itself) under `node --perf-basic-prof
--interpreted-frames-native-stack --no-turbo-inlining`, profiled by planrunner's
cpu-profile plan (`unwind: auto`) and by the same plan with `unwind: dwarf`, with this
tree and, given `--before`, with another checkout (its own .venv), and reports per tree
and mode (medians over rounds):
- the sampled hot:cold ratio against the workload's own, and their quotient;
- the share of node's samples that name a JS function of the workload (a JIT frame);
- the share of node's samples whose stack reaches `_start`;
- the share whose innermost frame is code in no file (`[unknown]`/`[anon]`).
And the time to read perf maps with planrunner/stacks/perfmap.py: the map the last Node
run wrote (its size and lines), synthetic maps of 500k lines and of 1.2M (past the
caps), the re-read of 1000 appended lines, and the time of a lookup.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

from harness import cpu_model  # noqa: E402 - a sibling: bench/ is sys.path[0]

from planrunner.stacks.perfmap import PerfMap  # noqa: E402

WORKLOAD = ROOT / "tests" / "e2e" / "workloads" / "js_spin.js"
NODE = "/usr/bin/node"
DWARF_PLAN = """planrunner: 1
stack: {unwind: dwarf}
probes:
  sample:
    profile: {hz: 99}
    where: pid != 0
outputs:
  - count: sample
    by: [comm, ustack]
"""


def profile(tree: Path, plan: str, seconds: float, workdir: Path) -> dict[str, float]:
    cmd = (f"env -C {workdir} {NODE} --perf-basic-prof --interpreted-frames-native-stack "
           f"--no-turbo-inlining {WORKLOAD} {seconds}")
    python = tree / ".venv" / "bin" / "python"
    res = subprocess.run([str(python), "-m", "planrunner", "run", plan, "-f", "folded",
                          "-c", cmd], cwd=tree, capture_output=True, text=True, timeout=600)
    said_line = [ln.split() for ln in res.stdout.splitlines() if ln.startswith("hot_ns ")]
    if res.returncode != 0 or not said_line:
        raise SystemExit(f"run failed ({res.returncode}): {res.stderr[-2000:]}")
    said = {said_line[0][i]: int(said_line[0][i + 1]) for i in range(0, 6, 2)}
    total = hot = cold = named = whole = anon = 0
    for line in res.stdout.splitlines():
        if ";" not in line:
            continue
        stack, count_text = line.rsplit(" ", 1)
        frames, count = stack.split(";"), int(count_text)
        if frames[0] != "node":
            continue
        total += count
        js = [f for f in frames if "js_spin.js" in f and f.endswith("_[j]")]
        named += count if js else 0
        hot += count if any("hotFunction " in f for f in js) else 0
        cold += count if any("coldFunction " in f for f in js) else 0
        whole += count if len(frames) > 1 and frames[1] == "_start" else 0
        user = [f for f in frames[1:] if not f.endswith("_[k]")]
        anon += count if user and user[-1] in ("[unknown]", "[anon]") else 0
    measured = said["hot_ns"] / said["cold_ns"]
    sampled = hot / cold if cold else float("nan")
    return {"samples": total, "measured": measured, "sampled": sampled,
            "quotient": sampled / measured, "named": named / max(total, 1),
            "start": whole / max(total, 1), "anon_leaf": anon / max(total, 1),
            "pid": said["pid"]}


def time_map(path: Path, lookups: int = 100_000) -> dict[str, float]:
    t0 = time.perf_counter()
    pmap = PerfMap.open(str(path), min_reread=3600)
    assert pmap is not None
    pmap.find(0)  # the first lookup sorts what was read
    read_s = time.perf_counter() - t0
    starts = [int(line.split()[0], 16) for line in path.read_text().splitlines()[:5000]]
    addrs = [random.choice(starts) + 1 for _ in range(lookups)]
    t0 = time.perf_counter()
    for a in addrs:
        pmap.find(a)
    per_lookup = (time.perf_counter() - t0) / lookups
    lines, capped = pmap.lines, pmap.truncated
    with path.open("a") as fh:
        base = 0x7F0000000000
        fh.writelines(f"{base + i * 64:x} 40 JS:*appended{i} /app/x.js:1:1\n"
                      for i in range(1000))
    t0 = time.perf_counter()
    pmap.reread()
    pmap.find(0)
    reread_s = time.perf_counter() - t0
    pmap.close()
    return {"bytes": path.stat().st_size, "lines": lines, "read_ms": read_s * 1e3,
            "lookup_us": per_lookup * 1e6, "reread_ms": reread_s * 1e3,
            "capped": float(capped)}


def synthetic(lines: int, where: Path) -> Path:
    path = where / "perf-synthetic.map"
    rng = random.Random(1)
    with path.open("w") as fh:
        for i in range(lines):
            start = 0x7F0000000000 + i * 256 + rng.randrange(64)
            fh.write(f"{start:x} {rng.randrange(16, 192):x} "
                     f"JS:*function{i} /srv/app/lib/module{i % 500}.js:{i % 900}:7\n")
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--cpu-seconds", type=float, default=4)
    ap.add_argument("--before", type=Path, help="another checkout (with its .venv)")
    args = ap.parse_args()
    if os.geteuid() != 0 or not os.path.exists(NODE):
        raise SystemExit(f"needs root and {NODE}")
    trees = [("after", ROOT)] + ([("before", args.before.resolve())] if args.before else [])
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        dwarf = workdir / "dwarf.yaml"
        dwarf.write_text(DWARF_PLAN)
        results: dict[tuple[str, str], list[dict[str, float]]] = {}
        last_pid = 0
        for r in range(args.rounds):
            order = [(t, m) for t in trees for m in ("auto", "dwarf")]
            order = order[r % len(order):] + order[:r % len(order)]  # rotate
            for (label, tree), mode in order:
                plan = "cpu-profile" if mode == "auto" else str(dwarf)
                got = profile(tree, plan, args.cpu_seconds, workdir)
                results.setdefault((label, mode), []).append(got)
                if last_pid:
                    Path(f"/tmp/perf-{last_pid}.map").unlink(missing_ok=True)
                last_pid = int(got["pid"])
                print(f"round {r + 1} {label} {mode}: " + ", ".join(
                    f"{k} {v:.3g}" for k, v in got.items() if k != "pid"), file=sys.stderr)
        node_map = Path(f"/tmp/perf-{last_pid}.map")
        copy = workdir / "node.map"
        copy.write_bytes(node_map.read_bytes())
        node_map.unlink(missing_ok=True)
        maps = [("the last Node run's map", time_map(copy)),
                ("synthetic, 500k lines", time_map(synthetic(500_000, workdir))),
                ("synthetic, 1.2M lines (past the caps: 1M lines, 64 MiB)",
                 time_map(synthetic(1_200_000, workdir)))]

    print(f"CPU: {cpu_model()}, {os.cpu_count()} CPUs, load average "
          f"{os.getloadavg()[0]:.1f}; {args.rounds} rounds of {args.cpu_seconds:g} CPU s; "
          "medians\n")
    print("| tree | unwind | samples | hot:cold sampled / measured | JS function named "
          "| reach _start | innermost in no file |")
    print("|---|---|---|---|---|---|---|")
    for (label, mode), runs in sorted(results.items()):
        def med(key: str, runs: list[dict[str, float]] = runs) -> float:
            return statistics.median(x[key] for x in runs)
        sampled = med("sampled")
        ratio = ("no JS function named" if sampled != sampled  # nan: none named
                 else f"{sampled:.2f} / {med('measured'):.2f} ({med('quotient'):.2f})")
        print(f"| {label} | {mode} | {med('samples'):.0f} | {ratio} | {med('named'):.0%} | "
              f"{med('start'):.0%} | {med('anon_leaf'):.0%} |")
    print("\n| perf map | size | lines | first read | re-read of 1000 appended lines "
          "| lookup |")
    print("|---|---|---|---|---|---|")
    for name, m in maps:
        reread = "capped: not read" if m["capped"] else f"{m['reread_ms']:.1f} ms"
        print(f"| {name} | {m['bytes'] / 1e6:.1f} MB | {m['lines']:.0f} | "
              f"{m['read_ms']:.1f} ms | {reread} | {m['lookup_us']:.2f} us |")


if __name__ == "__main__":
    main()
