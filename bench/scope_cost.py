"""Per-event cost of the scope filters (issue 18 item 7, issue 15 items 6-7): planrunner's
rendered C for `count ... by [arg1]`, loaded by bench/scope_loader.py with the config and
scope maps of each case, against the same C with the self-filter of before the scope
work (c7ecaba: one config array lookup), the uprobe floor and the untraced loop.

    sudo .venv/bin/python bench/scope_cost.py [--rounds 7] [--iters 2000000]

The figure is the BPF program's own run time per hit, as the kernel counts it while
this driver holds BPF_ENABLE_STATS (run_time_ns / run_cnt from the program's fdinfo):
the uprobe's trap and the scheduling of a busy 2-CPU VM, which made wall time per hit
vary 3x between rounds, are left out. Workload, pinning and rotation as in
bench/agg_overhead.py (whose functions it reuses); differences and ratios against
"before" are taken within each round, then their median. Every case attaches with the
workload's pid, as one --pid does; "--pid A,B" sets the pid-map filter as several pids
do (uprobes then attach system-wide: the kernel's own filter is what the one-pid case
keeps).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import re
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import agg_overhead as agg  # a sibling: bench/ is sys.path[0]

HERE = Path(__file__).resolve().parent

# pr_skip as it was before the scope work (templates/runtime_helpers.h at c7ecaba).
BEFORE = """static __always_inline int pr_skip(__u32 check_pid)
{
    __u32 tgid = bpf_get_current_pid_tgid() >> 32;
    __u32 key = 1;
    __u32 *self = pr_config.lookup(&key);
    if (self && *self == tgid)
        return 1;
    if (check_pid) {
        key = 0;
        __u32 *want = pr_config.lookup(&key);
        if (want && *want && *want != tgid)
            return 1;
    }
    return 0;
}
"""


def variants(plan: str) -> tuple[str, str, str]:
    """(C now, C before, function name)."""
    sys.path.insert(0, str(agg.ROOT))
    from planrunner.pipeline import compile_plan

    program = compile_plan(plan, {})[2]
    now = agg.loadable_c(program)
    start = now.index("static __always_inline int pr_skip(")
    end = now.index("\n}\n", start) + 3
    before = now[:start] + BEFORE + now[end:]
    # the registry scan and the check of planrunner processes seen starting (pr_born)
    registry = "    if (pr_is_tracer(tgid) || pr_is_born(tgid))\n        return 1;\n"
    assert registry in now
    out = agg.WORKLOAD.parent
    (out / "scope_now.bpf.c").write_text(now)
    (out / "scope_before.bpf.c").write_text(before)
    (out / "scope_no_registry.bpf.c").write_text(now.replace(registry, ""))
    return str(out / "scope_now.bpf.c"), str(out / "scope_before.bpf.c"), \
        program.sites[0].fn_name


def own_cgroup_key() -> list[int]:
    """(cgroup id, level) of this process's cgroup, as the runtime fills pr_scope_cgroups."""
    from planrunner.runtime.scope import cgroup_key

    return list(cgroup_key(own_cgroup()))


def own_cgroup() -> str:
    with open("/proc/self/cgroup") as fh:
        rel = next(line.split("::", 1)[1].strip() for line in fh if line.startswith("0::"))
    with open("/proc/self/mounts") as fh:
        mount = next(line.split()[1] for line in fh if line.split()[2] == "cgroup2")
    return mount + rel


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--iters", type=int, default=2_000_000)
    a = ap.parse_args()
    site = agg.build()
    plan = agg.WORKLOAD.parent / "agg_count.yaml"
    plan.write_text(agg.PLAN % agg.WORKLOAD)
    now, before, fn = variants(str(plan))
    from planrunner.render.model import ConfigSlot as S
    from planrunner.render.model import ScopeFlag as F

    st = os.stat("/proc/self/ns/pid")
    ns = {S.NS_DEV: (os.major(st.st_dev) << 20) | os.minor(st.st_dev), S.NS_INO: st.st_ino}
    every = F.PIDS | F.COMM | F.CGROUP
    cases: dict[str, tuple[str, dict[str, Any]]] = {
        "before: self filter only (c7ecaba)": (before, {"config": {S.SELF: 1}}),
        "now: no scope (registry scan + self)": (now, {"config": {S.SELF: 1}}),
        "what-if: now without the registry scan": (
            str(agg.WORKLOAD.parent / "scope_no_registry.bpf.c"), {"config": {S.SELF: 1}}),
        "now: --pid A,B (pid map)": (now, {"config": {S.SELF: 1, S.SCOPE_UPROBE: F.PIDS},
                                           "pids": ["{pid}", 1]}),
        "now: --comm": (now, {"config": {S.SELF: 1, S.SCOPE_UPROBE: F.COMM},
                              "comms": ["workload"]}),
        "now: --cgroup": (now, {"config": {S.SELF: 1, S.SCOPE_UPROBE: F.CGROUP,
                                           S.CGROUPS: 1}, "cgroups": [own_cgroup_key()]}),
        "now: all three": (now, {"config": {S.SELF: 1, S.SCOPE_UPROBE: every, S.CGROUPS: 1},
                                 "pids": ["{pid}"], "comms": ["workload"],
                                 "cgroups": [own_cgroup_key()]}),
        "now: in a pid namespace (ns helper)": (now, {"config": {S.SELF: 1, **ns}}),
    }
    empty = agg.WORKLOAD.parent / "scope_empty.bpf.c"
    empty.write_text("int on_hit(void *ctx) { return 0; }\n")
    binary = str(agg.WORKLOAD)
    table: dict[str, list[str]] = {}
    for name, (c_file, fn_name, setup) in {
            "empty program (the floor)": (str(empty), "on_hit", {}),
            **{n: (c, fn, st) for n, (c, st) in cases.items()}}.items():
        text = json.dumps({k: ({int(s): int(v) for s, v in val.items()}
                               if k == "config" else val) for k, val in setup.items()})
        table[name] = ["/usr/bin/python3", str(HERE / "scope_loader.py"), binary, hex(site),
                       "{pid}", c_file, fn_name, text.replace('"{pid}"', "{pid}")]
    names = list(table)
    logdir = Path(os.environ.get("BENCH_OUT", agg.WORKLOAD.parent / "logs"))
    logdir.mkdir(parents=True, exist_ok=True)
    run_ns: dict[str, list[float]] = {n: [] for n in names}
    hit_ns: dict[str, list[float]] = {n: [] for n in names}
    stats_fd = enable_bpf_stats()
    try:
        for r in range(a.rounds):
            order = names[r % len(names):] + names[:r % len(names)]
            for name in order:
                got, _ = agg.run_one(name, table[name], site, a.iters, 16, logdir)
                log = (logdir / (re.sub(r"\W+", "_", name) + ".out")).read_text()
                m = re.search(r"run_time_ns=(\d+) run_cnt=(\d+)", log)
                if not m or int(m[2]) < a.iters:
                    raise RuntimeError(f"{name}: no BPF run stats for every hit ({log})")
                run_ns[name].append(int(m[1]) / int(m[2]))
                hit_ns[name].append(got)
                time.sleep(0.3)
            print(f"round {r + 1} done", file=sys.stderr, flush=True)
    finally:
        os.close(stats_fd)
    report(names, run_ns, hit_ns)


def enable_bpf_stats() -> int:
    """BPF_ENABLE_STATS(BPF_STATS_RUN_TIME): the kernel times every BPF program run while
    the returned fd is open (it ends with this process, unlike the sysctl)."""
    libc = ctypes.CDLL(None, use_errno=True)
    attr = ctypes.c_uint32(0)  # enable_stats.type = BPF_STATS_RUN_TIME
    nr = {"x86_64": 321, "aarch64": 280}[os.uname().machine]
    fd = libc.syscall(nr, 32, ctypes.byref(attr), ctypes.sizeof(attr))  # BPF_ENABLE_STATS
    if fd < 0:
        raise OSError(ctypes.get_errno(), "BPF_ENABLE_STATS")
    return int(fd)


def report(names: list[str], run_ns: dict[str, list[float]],
           hit_ns: dict[str, list[float]]) -> None:
    """Medians over rounds; differences and ratios against 'before' within each round."""
    med = statistics.median
    base = run_ns[names[1]]
    print("| case | BPF program ns/run median (min..max) | vs before, same round | "
          "x before | workload ns/hit median |\n|---|---|---|---|---|")
    for name in names:
        t = run_ns[name]
        diff = [x - b for x, b in zip(t, base, strict=True)]
        ratio = [x / b for x, b in zip(t, base, strict=True)]
        print(f"| {name} | {med(t):.1f} ({min(t):.1f}..{max(t):.1f}) | {med(diff):+.1f} | "
              f"{med(ratio):.3f} | {med(hit_ns[name]):.0f} |")

if __name__ == "__main__":
    main()
