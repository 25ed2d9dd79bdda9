"""The measurements of bench/run.py. Each phase returns plain rows (dicts) for the report.

overhead    per-hit cost in the traced process: workload `loop` (back to back) or `rate`
            (paced), one traced run per (tool, variant), rounds rotated; ratios against
            the floor of the same round and variant.
throughput  offered rate for N s, tracer stdout to a file: fired, printed, lost, printed
            per second of the run, tracer CPU and peak RSS.
startup     launch -> attached line and -> first event (stdout on a pty) against a
            1000/s target.
stop        planrunner's --max-events / --duration / SIGINT against 1k/s and floods.
listing     `planrunner list` vs tplist/bpftrace -l on libjvm.so, `validate` of a plan
            against libjvm.so (fresh processes, interleaved).
"""

from __future__ import annotations

import os
import pty
import re
import signal
import subprocess
import time
from pathlib import Path

from harness import Child, Lines, bounded, count_events, mono, parse_kv, time_cmd, wait_stable
from tools import JVM, PLANRUNNER, TOOLS, Tool, lost

READY_ANY = re.compile(rb"^(?:Tracing |READY|PID\s+TID|Attaching|\[)")


class Env:
    def __init__(self, bins: dict[str, str], plans: dict[str, dict[str, str]],
                 outdir: Path, log) -> None:  # type: ignore[no-untyped-def]
        self.bins, self.plans, self.outdir, self.log = bins, plans, outdir, log

    def subst(self, variant: str, pid: int) -> dict[str, str]:
        return {"bin": self.bins[variant], "pid": str(pid), **self.plans[variant]}


def _cpu(row: dict[str, object]) -> None:
    """CPU ns per hit in the target (user + sys): what the probe costs the traced program,
    unlike wall time, free of the target being preempted on a busy 2-CPU machine."""
    if "user_ns_per_iter" in row and "sys_ns_per_iter" in row:
        row["cpu_ns_per_hit"] = row["user_ns_per_iter"] + row["sys_ns_per_iter"]  # type: ignore[operator]


def traced_run(env: Env, tool: Tool | None, variant: str, wl_args: list[str], tag: str,
               bound: float = 90, before_stop=None) -> dict[str, object]:  # type: ignore[no-untyped-def]
    """One workload run (it waits for the attach), traced by `tool` (None: untraced).
    `before_stop(tracer_pid, row)`, when given, runs once the workload has ended and
    before the tracer is stopped (bench/print_ab.py reads the tracer's BPF stats)."""
    binary = env.bins[variant]
    row: dict[str, object] = {"tool": tool.name if tool else "none", "variant": variant}
    if tool is None:
        r = subprocess.run([binary, *wl_args], capture_output=True, timeout=bound)
        row.update(parse_kv(r.stdout))
        _cpu(row)
        return row
    outp, errp = env.outdir / f"{tag}.out", env.outdir / f"{tag}.err"
    wl = Child([binary, "-w", "30", *wl_args], stdout=subprocess.PIPE,
               stderr=subprocess.DEVNULL)
    argv = tool.command(env.subst(variant, wl.pid))
    row["cmd"] = " ".join(argv)
    t0 = mono()
    with open(outp, "wb") as fo, open(errp, "wb") as fe:
        tr = Child(bounded(argv, bound), group=True, stdout=fo, stderr=fe,
                   stdin=subprocess.DEVNULL)
    while wl.alive():
        if not tr.alive() or mono() - t0 > bound:
            row["error"] = f"tracer ended (rc={tr.rc}) or bound reached before the workload"
            wl.kill()
            break
        time.sleep(0.02)
    assert wl.p.stdout is not None
    row.update(parse_kv(wl.p.stdout.read()))
    wl.p.stdout.close()
    _cpu(row)
    if row.get("attach_ok") != 1.0:
        row.setdefault("error", "tracer did not attach within 30 s")
    if before_stop is not None:
        before_stop(tr.pid, row)
    if tool.kind == "print":
        row["drain_s"] = round(wait_stable(str(outp)), 2)
    else:
        time.sleep(0.3)
    row["stop_s"], row["killed"] = tr.stop()
    row.update(tracer_rc=tr.rc, tracer_cpu_s=tr.cpu_s(), rss_mib=tr.maxrss_mib())
    out, err = outp.read_bytes() if tool.kind != "print" else b"", errp.read_bytes()
    # planrunner reports its losses on stderr and in its output: count them once
    row["lost"] = max(lost(err), lost(out if out else _tail(outp)))
    row["delivered"] = count_events(str(outp)) if tool.kind == "print" else tool.count(out)
    if tool.kind == "print" and outp.stat().st_size > (1 << 20):
        _shrink(outp)
    return row


def _tail(path: Path, size: int = 1 << 16) -> bytes:
    with open(path, "rb") as fh:
        fh.seek(max(0, path.stat().st_size - size))
        return fh.read()


def _shrink(path: Path) -> None:
    """Event dumps are counted already: keep 20 KiB of head and tail."""
    with open(path, "rb") as fh:
        head = fh.read(20480)
    tail = _tail(path, 20480)
    path.write_bytes(head + b"\n... [bench/run.py: cut after counting] ...\n" + tail)


def overhead(env: Env, configs: list[tuple[str | None, str]], wl_args: list[str],
             rounds: int, mode: str) -> list[dict[str, object]]:
    rows = []
    for rnd in range(rounds):
        k = rnd % len(configs)
        for name, variant in configs[k:] + configs[:k]:  # rotated: no fixed position
            tool = TOOLS[name] if name else None
            env.log(f"[{mode}] round {rnd + 1}: {name or 'none'} on {variant}")
            row = traced_run(env, tool, variant, wl_args, f"{mode}-r{rnd}-{name}-{variant}")
            row["round"] = rnd
            env.log(f"    ns_per_iter={row.get('ns_per_iter')} cpu={row.get('cpu_ns_per_hit')}"
                    f" delivered={row.get('delivered')} lost={row.get('lost')}"
                    f" {row.get('error', '')}")
            rows.append(row)
    return rows


def throughput(env: Env, cases: list[tuple[str, int, float]]) -> list[dict[str, object]]:
    rows = []
    for name, hz, secs in cases:
        env.log(f"[throughput] {name} at {hz}/s for {secs} s")
        row = traced_run(env, TOOLS[name], "plain", ["rate", str(hz), str(secs)],
                         f"tp-{name}-{hz}", bound=secs + 60)
        row["hz"], row["secs"] = hz, secs
        if row.get("elapsed_ns") and row.get("delivered") is not None:
            row["delivered_per_s"] = row["delivered"] / (row["elapsed_ns"] / 1e9)  # type: ignore[operator]
        env.log(f"    fired={row.get('fired')} printed={row.get('delivered')} "
                f"lost={row.get('lost')} rss={row.get('rss_mib')} {row.get('error', '')}")
        rows.append(row)
    return rows


def _launch_pty(argv: list[str]) -> tuple[Child, Lines, int]:
    master, slave = pty.openpty()
    rd, wr = os.pipe()
    c = Child(argv, group=True, stdout=slave, stderr=wr, stdin=subprocess.DEVNULL)
    os.close(slave)
    os.close(wr)
    return c, Lines({"out": master, "err": rd}), master


def _close(lines: Lines) -> None:
    for fd in lines.fds.values():
        if fd >= 0:
            os.close(fd)
    lines.fds = {k: -1 for k in lines.fds}


def startup(env: Env, names: list[str], reps: int) -> list[dict[str, object]]:
    """Against an already running 1000/s target: launch -> ready line, -> first event."""
    binary = env.bins["plain"]
    rows: list[dict[str, object]] = []
    wl = Child([binary, "rate", "1000", str(reps * len(names) * 10 + 30)],
               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for rep in range(reps):
            k = rep % len(names)
            for name in names[k:] + names[:k]:
                tool = TOOLS[name]
                t0 = mono()
                c, lines, _m = _launch_pty(bounded(tool.command(env.subst("plain", wl.pid)), 40))
                first = lines.wait_for(re.compile(rb"ev-(?:alpha|beta|gamma|delta)"), 30, c)
                ready = lines.first(re.compile(tool.ready.encode()))
                cpu_wait = mono()
                exit_s, killed = c.stop()
                lines.drain(0.2)
                _close(lines)
                rows.append({"tool": name, "rep": rep,
                             "ready_s": None if ready is None else ready - t0,
                             "first_event_s": None if first is None else first - t0,
                             "sigint_exit_s": exit_s, "killed": killed,
                             "cpu_s": c.cpu_s(), "stopped_after_s": cpu_wait - t0})
                env.log(f"[startup] {name}: ready={rows[-1]['ready_s']} "
                        f"first={rows[-1]['first_event_s']}")
    finally:
        wl.kill()
    return rows


def stop_cases(env: Env, planrunner: tuple[str, ...] = (PLANRUNNER,)
               ) -> list[dict[str, object]]:
    """planrunner's stops, timed from its `Tracing` line (stdout to /dev/null);
    `planrunner`: the command that runs it (bench/stop_ab.py runs two trees)."""
    pr = [*planrunner, "run", env.plans["plain"]["plan"], "--pid", "{pid}"]
    cases = [
        ("--max-events 5, target at 1k/s", ["rate", "1000", "20"], ["-n", "5"], None),
        ("--max-events 5, target back to back", ["loop", "20"], ["-n", "5"], None),
        ("--max-events 10000, target back to back", ["loop", "20"], ["-n", "10000"], None),
        ("--duration 2, target at 1M/s", ["rate", "1000000", "20"], ["-d", "2"], 2.0),
        ("--duration 2, target back to back", ["loop", "20"], ["-d", "2"], 2.0),
        ("SIGINT 2 s into a back-to-back flood", ["loop", "20"], [], "sigint"),
    ]
    rows = []
    for label, wl_args, extra, how in cases:
        wl = Child([env.bins["plain"], *wl_args], stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
        argv = [a.replace("{pid}", str(wl.pid)) for a in pr] + extra
        rd, wr = os.pipe()
        with open(os.devnull, "wb") as null:
            c = Child(bounded(argv, 30), group=True, stdout=null, stderr=wr,
                      stdin=subprocess.DEVNULL)
        os.close(wr)
        lines = Lines({"err": rd})
        tracing = lines.wait_for(re.compile(rb"^Tracing "), 20, c)
        sig_at = None
        if how == "sigint" and tracing is not None:
            while mono() < tracing + 2.0:
                lines.pump(0.05)
            sig_at = mono()
            c.signal(signal.SIGINT)
        while c.alive() and mono() < (tracing or mono()) + 25:
            lines.pump(0.005)
        ended = c.ended_at or mono()
        lines.drain(0.1)
        os.close(rd)
        c.kill() if c.alive() else None
        wl.kill()
        after = None
        if tracing is not None:
            after = ended - (sig_at if sig_at else tracing) - (how if isinstance(how, float) else 0)
        rows.append({"case": label, "cmd": " ".join(argv), "rc": c.rc,
                     "late_s": after, "attached": tracing is not None})
        env.log(f"[stop] {label}: {after}")
    return rows


def listing(env: Env, runs: int) -> list[dict[str, object]]:
    cmds = {
        "planrunner list": [PLANRUNNER, "list", JVM],
        "tplist -l": ["tplist-bpfcc", "-l", JVM],
        "bpftrace -l": ["bpftrace", "-l", f"usdt:{JVM}:*"],
        "planrunner validate": [PLANRUNNER, "validate", env.plans["validate"]["plan"]],
    }
    times: dict[str, list[float]] = {k: [] for k in cmds}
    rcs: dict[str, set[int | None]] = {k: set() for k in cmds}
    ratios: list[float] = []
    names = list(cmds)
    for i in range(runs + 1):  # the first round warms the page cache
        got = {}
        for name in names[i % len(names):] + names[:i % len(names)]:
            got[name], rc = time_cmd(cmds[name])
            rcs[name].add(rc)
        if i:
            for name, wall in got.items():
                times[name].append(wall)
            ratios.append(got["planrunner list"] / got["tplist -l"])
    env.log(f"[listing] {({k: sorted(v)[len(v) // 2] for k, v in times.items()})}")
    return [{"cmd": name, "argv": " ".join(cmds[name]), "walls": times[name],
             "rc": sorted(r for r in rcs[name] if r is not None),
             "x_tplist": ratios if name == "planrunner list" else None} for name in names]
