#!/usr/bin/python3
"""What one BPF helper call costs on this machine: the kernel's own run time per run
(kernel.bpf_stats_enabled) of an empty uprobe program on USDT bench:tick of
`workload loop`, against programs that call one helper 8 times. Issue 28 item 1: the
per-event cost of a printing plan beyond the uprobe floor is its helper calls.

    sudo /usr/bin/python3 bench/helper_cost.py bench/build/run/workload_plain [--rounds 3]

Uses the system python3-bpfcc (a bench tool, not planrunner). Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

from bcc import BPF, USDT

CALLS = 8
_SINK = "if (t == 1) bpf_trace_printk(\"x\");"  # keeps the calls: t is never 1
BODIES = {
    "empty": "",
    "bpf_ktime_get_ns": "u64 t = 0;" + "t += bpf_ktime_get_ns();" * CALLS + _SINK,
    "bpf_get_current_pid_tgid": "u64 t = 0;" + "t += bpf_get_current_pid_tgid();" * CALLS
    + _SINK,
    "bpf_get_current_comm": "char c[16]; u64 t = 0;"
    + "bpf_get_current_comm(c, 16); t += c[1];" * CALLS + _SINK,
    "bpf_probe_read_user (8 bytes)": "u64 v = 0, t = 0;"
    + "bpf_probe_read_user(&v, 8, (void *)ctx->sp); t += v;" * CALLS + _SINK,
    "per-CPU array lookup": "u32 k = 0; u64 t = 0;"
    + "{ u64 *p = arr.lookup(&k); if (p) t += *p; }" * CALLS + _SINK,
    "bpf_get_current_task_btf": "u64 t = 0;"
    + "if (bpf_get_current_task_btf()) t++;" * CALLS + _SINK,
    # what runtime_helpers.h pr_current_comm does where the kernel has BTF
    "comm by task BTF (2 loads)": "u64 t = 0;"
    + "{ const char *k = (const char *)bpf_get_current_task_btf();"
      " t += *(const u64 *)(k + COMM_OFFSET) + *(const u64 *)(k + COMM_OFFSET + 8); }"
    * CALLS + _SINK,
    # what record_helpers.h pr_ring_full asks before a record's operand reads
    "bpf_ringbuf_query (AVAIL_DATA)": "u64 t = 0;"
    + "{ char c = 0; t += rb.ringbuf_output(&c, 1, BPF_RB_AVAIL_DATA); }" * CALLS + _SINK,
}


def comm_offset() -> int:
    """task_struct.comm in the running kernel, by planrunner's BTF reader."""
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from planrunner.elf.btf import TASK_COMM, kernel_offset  # noqa: PLC0415
    return kernel_offset(TASK_COMM)


def run_ns(workload: str, body: str, secs: float) -> float:
    wl = subprocess.Popen([workload, "loop", str(secs + 30)], stdout=subprocess.DEVNULL)
    try:
        time.sleep(0.05)
        usdt = USDT(path=workload, pid=wl.pid)
        usdt.enable_probe(probe="bench:tick", fn_name="on_hit")
        bpf = BPF(text="BPF_PERCPU_ARRAY(arr, u64, 1);\nBPF_RINGBUF_OUTPUT(rb, 1);\n"
                       # bcc hands a map to a helper only through its member calls
                       "#define bpf_ringbuf_output(m, d, n, f) bpf_ringbuf_query(m, f)\n"
                       f"int on_hit(struct pt_regs *ctx) {{ {body} return 0; }}",
                  usdt_contexts=[usdt], cflags=[f"-DCOMM_OFFSET={comm_offset()}"])
        fd = bpf.funcs[b"on_hit"].fd
        time.sleep(secs)
        with open(f"/proc/self/fdinfo/{fd}") as fh:
            info = dict(line.split(":", 1) for line in fh.read().splitlines() if ":" in line)
        bpf.cleanup()
        return int(info["run_time_ns"]) / max(1, int(info["run_cnt"]))
    finally:
        wl.kill()  # by PID: the workload this script started
        wl.wait()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("workload", help="bench/workload.c built (bench/run.py builds it)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--secs", type=float, default=1.0)
    a = ap.parse_args()
    workload = os.path.abspath(a.workload)
    with open("/proc/sys/kernel/bpf_stats_enabled", "w") as fh:
        fh.write("1")
    got: dict[str, list[float]] = {}
    try:
        for _ in range(a.rounds):
            for name, body in BODIES.items():
                got.setdefault(name, []).append(run_ns(workload, body, a.secs))
    finally:
        with open("/proc/sys/kernel/bpf_stats_enabled", "w") as fh:
            fh.write("0")
    empty = statistics.median(got["empty"])
    print("| program | BPF ns/run, median | ns per call beyond the empty program |")
    print("|---|---|---|")
    for name, runs in got.items():
        med = statistics.median(runs)
        per = "-" if name == "empty" else f"{(med - empty) / CALLS:.1f}"
        print(f"| {name}{'' if name == 'empty' else f' x{CALLS}'} | {med:.0f} | {per} |")


if __name__ == "__main__":
    main()
