#!/usr/bin/python3
"""What one BPF helper call costs on this machine: the kernel's own run time per run
(kernel.bpf_stats_enabled) of an empty uprobe program on USDT bench:tick of
`workload loop`, against programs that call one helper 8 times (--calls). Issue 28 item 1: the
per-event cost of a printing plan beyond the uprobe floor is its helper calls.

    sudo /usr/bin/python3 bench/helper_cost.py bench/build/run/workload_plain [--rounds 3]
        [--rate HZ --calls 1]

With --rate the workload fires HZ events a second (busy-waiting between them, as
bench/run.py's paced case), so a call finds its code and data cold: with --calls 1 the
table says what the first call of each helper costs at that pace.

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

# keeps the calls: t never takes this value (1 it did: one bpf_get_current_task_btf
# call, counted, then cost a bpf_trace_printk every run)
_SINK = "if (t == 0x5eed5eed5eedULL) bpf_trace_printk(\"x\");"
# Each program: its declarations, then one call repeated (--calls times), then _SINK.
CALLS_OF = {
    "empty": ("", ""),
    "bpf_ktime_get_ns": ("u64 t = 0;", "t += bpf_ktime_get_ns();"),
    "bpf_get_current_pid_tgid": ("u64 t = 0;", "t += bpf_get_current_pid_tgid();"),
    "bpf_get_current_comm": ("char c[16]; u64 t = 0;",
                             "bpf_get_current_comm(c, 16); t += c[1];"),
    "bpf_probe_read_user (8 bytes)": ("u64 v = 0, t = 0;",
                                      "bpf_probe_read_user(&v, 8, (void *)ctx->sp); t += v;"),
    "per-CPU array lookup": ("u32 k = 0; u64 t = 0;",
                             "{ u64 *p = arr.lookup(&k); if (p) t += *p; }"),
    "bpf_get_current_task_btf": ("u64 t = 0;", "if (bpf_get_current_task_btf()) t++;"),
    # what runtime_helpers.h pr_current_comm does where the kernel has BTF
    "comm by task BTF (2 loads)": (
        "u64 t = 0;",
        "{ const char *k = (const char *)bpf_get_current_task_btf();"
        " t += *(const u64 *)(k + COMM_OFFSET) + *(const u64 *)(k + COMM_OFFSET + 8); }"),
    # what record_helpers.h pr_ring_full asks before a record's operand reads
    "bpf_ringbuf_query (AVAIL_DATA)": (
        "u64 t = 0;", "{ char c = 0; t += rb.ringbuf_output(&c, 1, BPF_RB_AVAIL_DATA); }"),
    # a print record's way into the ring (88 bytes, as the bench plan's smallest)
    "ringbuf reserve + submit (88 B)": (
        "u64 t = 0;",
        "{ u64 *r = rb.ringbuf_reserve(88); if (r) { r[0] = t; rb.ringbuf_submit(r, "
        "BPF_RB_NO_WAKEUP); } }"),
}


def body(name: str, calls: int) -> str:
    decl, call = CALLS_OF[name]
    return decl + call * calls + (_SINK if call else "")


def comm_offset() -> int:
    """task_struct.comm in the running kernel, by planrunner's BTF reader."""
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from planrunner.elf.btf import TASK_COMM, kernel_offset  # noqa: PLC0415
    return kernel_offset(TASK_COMM)


def run_ns(workload: str, body: str, secs: float, rate: float | None) -> float:
    pace = ["rate", str(rate)] if rate else ["loop"]
    wl = subprocess.Popen([workload, *pace, str(secs + 30)], stdout=subprocess.DEVNULL)
    try:
        time.sleep(0.05)
        usdt = USDT(path=workload, pid=wl.pid)
        usdt.enable_probe(probe="bench:tick", fn_name="on_hit")
        bpf = BPF(text="BPF_PERCPU_ARRAY(arr, u64, 1);\nBPF_RINGBUF_OUTPUT(rb, 16);\n"
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
    ap.add_argument("--calls", type=int, default=8, help="calls of the helper per run")
    ap.add_argument("--rate", type=float, help="events a second (default: back to back)")
    a = ap.parse_args()
    workload = os.path.abspath(a.workload)
    with open("/proc/sys/kernel/bpf_stats_enabled", "w") as fh:
        fh.write("1")
    got: dict[str, list[float]] = {}
    try:
        for _ in range(a.rounds):
            for name in CALLS_OF:
                got.setdefault(name, []).append(
                    run_ns(workload, body(name, a.calls), a.secs, a.rate))
    finally:
        with open("/proc/sys/kernel/bpf_stats_enabled", "w") as fh:
            fh.write("0")
    empty = statistics.median(got["empty"])
    pace = f"{a.rate:g} events a second" if a.rate else "back to back"
    print(f"{pace}, {a.calls} call(s) a run, {a.rounds} rounds of {a.secs:g} s\n")
    print("| program | BPF ns/run, median | ns per call beyond the empty program |")
    print("|---|---|---|")
    for name, runs in got.items():
        med = statistics.median(runs)
        per = "-" if name == "empty" else f"{(med - empty) / a.calls:.1f}"
        print(f"| {name}{'' if name == 'empty' else f' x{a.calls}'} | {med:.0f} | {per} |")


if __name__ == "__main__":
    main()
