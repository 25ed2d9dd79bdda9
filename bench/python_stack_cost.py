"""Per-sample cost of Python-aware stacks (issue 26): planrunner's cpu-profile at 99 Hz
on a python3.11 program 30 Python frames deep, with its Python frames read in BPF
(`stack: {python: true}`, the default) and without (`python: false`: native frames
only), side by side with py-spy record at the same rate (blocking, its default, and
--nonblocking).

    sudo .venv/bin/python bench/python_stack_cost.py [--rounds 5] [--cpu-seconds 3]

Measures:
- in BPF, per event: a uprobe on libc's getppid, which the workload calls 30 Python
  frames deep over and over, counted by `ustack` with and without Python frames: the
  program's run time over its run count (the kernel's BPF statistics, enabled with
  BPF_ENABLE_STATS for the bench's lifetime only, read from /proc/PLANRUNNER/fdinfo):
  what each stack costs the thread that fired it;
- in BPF, per sample of the profile: the sampling program's run time over the
  workload's samples (an upper bound: runs that interrupted other tasks, on either
  CPU, return early but are counted in);
- on the traced program: the wall time the workload needs for a fixed amount of work,
  against the untraced run of the same round, divided by the samples taken
  ((traced - untraced) / samples: what each sample cost it, py-spy's pauses included),
  and planrunner's own CPU per sample (its unwinding and symbolizing in user space).
The workload is pinned to CPU 1; tools run in a rotated order each round; medians.
py-spy comes from PyPI into bench/build/pyspy-venv (a venv of its own) when it is not
on PATH; without it its rows are left out, with the reason printed.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
BUILD = HERE / "build"
PYTHON = "/usr/bin/python3.11"
PLANRUNNER = [str(ROOT / ".venv" / "bin" / "python"), "-m", "planrunner"]
DEPTH = 30
RATE = 99
WORKLOAD = """
import sys, time
import os
def work(n):
    if n < 0:  # the per-event mode: one call of libc's getppid, uprobed
        return os.getppid()
    t = 0
    for i in range(n):
        t += i
    return t
def deep(d, n):
    return deep(d - 1, n) if d else work(n)
def sched():  # this thread's time on a CPU and waiting for one (ns)
    run, wait, _ = open("/proc/thread-self/schedstat").read().split()
    return int(run), int(wait)
sys.stdin.readline()  # the tracer is attached
w0, c0, (r0, q0) = time.monotonic_ns(), time.thread_time_ns(), sched()
done = 0
while time.thread_time_ns() - c0 < float(sys.argv[1]) * 1e9:
    deep(DEPTH, -1 if sys.argv[2:] == ["calls"] else 20000)
    done += 1
w1, c1, (r1, q1) = time.monotonic_ns(), time.thread_time_ns(), sched()
# stopped: neither running nor runnable (a tracer's pause)
print(done, w1 - w0, c1 - c0, (w1 - w0) - (r1 - r0) - (q1 - q0), flush=True)
time.sleep(1.0)  # the bench reads the tracer's figures meanwhile
""".replace("DEPTH", str(DEPTH - 2))
PLAN = """planrunner: 1
name: bench-pystack
stack: {python: PYTHON}
probes:
  sample: {profile: {hz: RATE}}
outputs:
  - count: sample
    by: [comm, ustack]
"""
BPF_ENABLE_STATS, BPF_STATS_RUN_TIME, NR_BPF = 32, 0, 321
PERF_EVENT_PROG = 7  # BPF_PROG_TYPE_PERF_EVENT
KPROBE_PROG = 2  # BPF_PROG_TYPE_KPROBE: uprobes
CALLS_PLAN = """planrunner: 1
name: bench-pystack-calls
stack: {python: PYTHON}
targets: {libc: {binary: libc.so.6}}
probes:
  call: {uprobe: libc:getppid}
outputs:
  - count: call
    by: [ustack]
"""


def enable_bpf_stats() -> int:
    """An fd that keeps the kernel's BPF run-time statistics on while it is open."""
    libc = ctypes.CDLL(None, use_errno=True)
    attr = ctypes.create_string_buffer(8)  # union bpf_attr { u32 type; } enable_stats
    fd = libc.syscall(NR_BPF, BPF_ENABLE_STATS, attr, 8)
    if fd < 0:
        raise OSError(ctypes.get_errno(), "BPF_ENABLE_STATS")
    return int(fd)


def perf_prog_stats(pid: int, prog_type: int = PERF_EVENT_PROG) -> tuple[int, int]:
    """(run_time_ns, run_cnt) of the programs of `prog_type` process `pid` holds."""
    total = count = 0
    for fd in os.listdir(f"/proc/{pid}/fdinfo"):
        try:
            text = Path(f"/proc/{pid}/fdinfo/{fd}").read_text()
        except OSError:
            continue
        info = dict(line.split(":\t", 1) for line in text.splitlines() if ":\t" in line)
        if info.get("prog_type", "").strip() == str(prog_type):
            total += int(info.get("run_time_ns", 0))
            count += int(info.get("run_cnt", 0))
    return total, count


def py_spy() -> str | None:
    found = shutil.which("py-spy")
    if found:
        return found
    venv = BUILD / "pyspy-venv"
    exe = venv / "bin" / "py-spy"
    if not exe.exists():
        subprocess.run([PYTHON, "-m", "venv", str(venv)], check=True)
        got = subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "py-spy"],
                             capture_output=True, text=True)
        if got.returncode != 0:
            print(f"py-spy did not install from PyPI: {got.stderr.strip()[-300:]}")
            return None
    return str(exe)


def cpu_ticks(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime (children not counted)


def _wait_for(stream: IO[str], word: str, timeout: float) -> None:
    """Read `stream` until a line holds `word` (then drain it in the background)."""
    found = threading.Event()

    def reader() -> None:
        for line in stream:
            if word in line:
                found.set()
    threading.Thread(target=reader, daemon=True).start()
    if not found.wait(timeout):
        raise RuntimeError(f"no {word!r} within {timeout:g} s")


def one(tool: str, cpu_seconds: float, spy: str | None) -> dict[str, float]:
    """Run the workload under `tool`: its figures and the tool's."""
    calls = tool.startswith("uprobe")
    script = str(BUILD / "pystack_workload.py")
    proc = subprocess.Popen(["taskset", "-c", "1", PYTHON, script, str(cpu_seconds),
                             *(["calls"] if calls else [])],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    tracer = None
    folded = BUILD / "pystack.folded"
    folded.unlink(missing_ok=True)
    try:
        if tool.startswith(("planrunner", "uprobe")):
            plan = BUILD / f"pystack_{'calls_' if calls else ''}{tool.split()[-1]}.yaml"
            tracer = subprocess.Popen([*PLANRUNNER, "run", str(plan), "--pid", str(proc.pid),
                                       "-f", "folded", "-o", str(folded)],
                                      stderr=subprocess.PIPE, text=True,
                                      start_new_session=True)
            assert tracer.stderr is not None
            _wait_for(tracer.stderr, "Tracing", 120)
        elif tool.startswith("py-spy"):
            assert spy is not None
            extra = ["--nonblocking"] if "nonblocking" in tool else []
            tracer = subprocess.Popen([spy, "record", "--rate", str(RATE), "--pid",
                                       str(proc.pid), "--format", "raw", "-o", str(folded),
                                       *extra], stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL, text=True,
                                      start_new_session=True)
            time.sleep(2.0)  # it attaches within milliseconds
        assert proc.stdin is not None and proc.stdout is not None
        ticks0 = cpu_ticks(tracer.pid) if tracer is not None else 0
        proc.stdin.write("go\n")
        proc.stdin.flush()
        done, wall_ns, cpu_ns, stopped_ns = (int(x) for x in proc.stdout.readline().split())
        row: dict[str, float] = {"wall_s": wall_ns / 1e9, "cpu_s": cpu_ns / 1e9,
                                 "work_per_cpu_s": done / (cpu_ns / 1e9),
                                 "stopped_ms": stopped_ns / 1e6}
        if tracer is None:
            return row
        tick = os.sysconf("SC_CLK_TCK")
        row["tool_cpu_s"] = (cpu_ticks(tracer.pid) - ticks0) / tick
        if tool.startswith(("planrunner", "uprobe")):
            run_ns, runs = perf_prog_stats(tracer.pid, KPROBE_PROG if calls else PERF_EVENT_PROG)
            row.update(bpf_run_ns=run_ns / max(runs, 1), runs=runs)
        proc.wait(timeout=60)
        if tool.startswith("py-spy"):
            tracer.send_signal(signal.SIGINT)
        tracer.wait(timeout=60)
        counts = [line.rsplit(" ", 1)[-1] for line in
                  (folded.read_text(errors="replace").splitlines() if folded.exists() else [])]
        samples = sum(int(c) for c in counts if c.isdigit())
        row["samples"] = samples
        if tool.startswith("planrunner"):
            # every run of the program over the workload's samples: the runs on the
            # other CPU, or for another task, return early but are counted in
            row["bpf_ns_per_sample"] = run_ns / max(samples, 1)
        row["stopped_us_per_sample"] = stopped_ns / 1e3 / max(samples, 1)
        return row
    finally:
        for p in (tracer, proc):
            if p is not None and p.poll() is None:
                p.kill()  # ours, by its pid
                p.wait()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--cpu-seconds", type=float, default=3.0)
    args = ap.parse_args()
    BUILD.mkdir(parents=True, exist_ok=True)
    (BUILD / "pystack_workload.py").write_text(WORKLOAD)
    for on in ("true", "false"):
        (BUILD / f"pystack_{on}.yaml").write_text(
            PLAN.replace("PYTHON", on).replace("RATE", str(RATE)))
        (BUILD / f"pystack_calls_{on}.yaml").write_text(CALLS_PLAN.replace("PYTHON", on))
    stats_fd = enable_bpf_stats()
    spy = py_spy()
    tools = ["none", "planrunner python: true", "planrunner python: false",
             "uprobe per call python: true", "uprobe per call python: false"]
    if spy:
        tools += ["py-spy record", "py-spy record --nonblocking"]
    rows: dict[str, list[dict[str, float]]] = {t: [] for t in tools}
    for plan in ("true", "false", "calls_true", "calls_false"):  # compiled once (cache)
        subprocess.run([*PLANRUNNER, "run", str(BUILD / f"pystack_{plan}.yaml"), "-d", "1s",
                        "-o", os.devnull], capture_output=True, check=False)
    for r in range(args.rounds):
        order = tools[r % len(tools):] + tools[:r % len(tools)]
        for tool in order:
            rows[tool].append(one(tool, args.cpu_seconds, spy))
        print(f"round {r + 1}: " + json.dumps({t: rows[t][-1] for t in tools}), flush=True)
    os.close(stats_fd)
    print(f"\n{DEPTH} Python frames deep, {RATE} Hz, {args.cpu_seconds:g} CPU s of work "
          f"per run, medians of {args.rounds} rounds")
    cols = [("samples", "samples", ".0f"), ("BPF ns/sample", "bpf_ns_per_sample", ".0f"),
            ("BPF ns/run", "bpf_run_ns", ".0f"),
            ("stopped us/sample", "stopped_us_per_sample", ".1f"),
            ("work/CPU s", "work_per_cpu_s", ".0f"), ("tool CPU s", "tool_cpu_s", ".2f")]
    print(f"{'tool':30}" + "".join(f" {c[0]:>18}" for c in cols))
    for tool in tools:
        line = f"{tool:30}"
        for _, key, fmt in cols:
            vals = [g[key] for g in rows[tool] if key in g]
            line += f" {format(statistics.median(vals), fmt) if vals else '-':>18}"
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
