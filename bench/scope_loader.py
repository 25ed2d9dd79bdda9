#!/usr/bin/python3
"""bench/scope_cost.py's loader: attach FUNCTION of a rendered planrunner C file at ADDR
of BINARY for PID, with its config slots and scope maps filled as SETUP (JSON) says,
until SIGINT/SIGTERM; then prints the program's run_time_ns and run_cnt (the kernel
counts them while BPF stats are enabled). Planrunner's runtime is idle while the
workload loops, so the C and its filters are what the benchmark measures.

    /usr/bin/python3 bench/scope_loader.py BINARY ADDR PID C_FILE FUNCTION SETUP

SETUP: {"config": {slot: value}, "pids": [..], "comms": [..], "cgroups": [[id, level]..]}.
"""

from __future__ import annotations

import ctypes as ct
import json
import sys

from bcc import BPF  # the system python3-bpfcc; this is a bench tool, not planrunner
from harness import serve_until_stopped  # a sibling: bench/ is sys.path[0]


def main() -> None:
    binary, addr, pid = sys.argv[1], int(sys.argv[2], 0), int(sys.argv[3])
    with open(sys.argv[4]) as fh:
        text = fh.read()
    fn, setup = sys.argv[5], json.loads(sys.argv[6])
    bpf = BPF(text=text, cflags=["-Wno-macro-redefined", "-Wno-unused-function"])
    for slot, value in setup.get("config", {}).items():
        bpf["pr_config"][ct.c_int(int(slot))] = ct.c_uint32(value)
    for p in setup.get("pids", []):
        bpf["pr_scope_pids"][ct.c_uint32(p)] = ct.c_uint32(1)
    for c in setup.get("comms", []):
        comms = bpf["pr_scope_comms"]
        key = comms.Key()
        key.c = c.encode()
        comms[key] = ct.c_uint32(1)
    for i, (cgroup_id, level) in enumerate(setup.get("cgroups", [])):  # struct pr_cgroup
        table = bpf["pr_scope_cgroups"]
        leaf = table.Leaf()
        leaf.id, leaf.level = cgroup_id, level
        table[ct.c_int(i)] = leaf
    bpf.attach_uprobe(name=binary, addr=addr, fn_name=fn, pid=pid)
    serve_until_stopped()
    # The program's own run time, counted by the kernel while the driver holds
    # BPF_ENABLE_STATS: what the filters cost, without the uprobe's trap and scheduling.
    prog = bpf.funcs.get(fn.encode()) or bpf.funcs.get(fn)
    with open(f"/proc/self/fdinfo/{prog.fd}") as fh:
        stats = dict(line.split(":\t") for line in fh.read().splitlines() if ":\t" in line)
    print(f"run_time_ns={stats.get('run_time_ns', '0').strip()} "
          f"run_cnt={stats.get('run_cnt', '0').strip()}", flush=True)
    bpf.cleanup()


if __name__ == "__main__":
    main()
