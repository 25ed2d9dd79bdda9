"""Probe sets (issue 29): attaching a glob, against bpftrace; all of libc; per hit.

    sudo .venv/bin/python bench/sets_bench.py [-n 3] [--calls 300000] [--skip-bpftrace]

1. `str*` on libc (the same glob, the same run, interleaved rounds): launch -> end of
   a `-c /bin/true` run, for planrunner's bundled funccount (warm: its caches primed;
   first: an empty cache directory) and bpftrace 0.17 (`uprobe:LIBC:str*
   { @[func] = count(); }`); planrunner's launch -> "Tracing" line too.
2. `c:*` (pattern `*`): launch -> "Tracing" (warm and first run) with --pid of an idle
   process, then SIGINT -> exit (detaching every function, then printing).
3. Per hit: bench/set_hits.c calls hit_00 back to back; its ns per call untraced, under
   a single uprobe on hit_00 and under a set over hit_* (40 functions, hit_00 the only
   one called), both counting by func; rounds rotated, medians; the cost of a hit is
   the traced CPU time (user + system, getrusage) minus the untraced one.
Prints a markdown table per part, with the machine's CPU model.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PY = str(ROOT / ".venv" / "bin" / "python")
LIBC = "/lib/x86_64-linux-gnu/libc.so.6"
BPFTRACE = "/usr/bin/bpftrace"


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown"


class Run:
    """A command with stderr lines timestamped as they arrive (a reader thread)."""

    def __init__(self, argv: list[str], env: dict[str, str] | None = None) -> None:
        self.t0 = time.monotonic()
        self.p = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.PIPE, text=True, env=env)
        self.lines: list[tuple[float, str]] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.p.stderr is not None
        for line in self.p.stderr:
            self.lines.append((time.monotonic(), line))

    def wait_line(self, prefix: str, bound: float = 300) -> float:
        """Seconds from launch to the first stderr line starting with `prefix`."""
        end = time.monotonic() + bound
        while time.monotonic() < end:
            for t, line in list(self.lines):
                if line.startswith(prefix):
                    return t - self.t0
            if self.p.poll() is not None and not self.reader.is_alive():
                raise RuntimeError(f"ended before {prefix!r}: {''.join(x for _, x in self.lines)}")
            time.sleep(0.005)
        raise RuntimeError(f"no {prefix!r} within {bound} s")

    def wait(self, bound: float = 300) -> float:
        """Seconds from launch to the end."""
        self.p.wait(timeout=bound)
        self.reader.join(timeout=5)
        return time.monotonic() - self.t0


def med(xs: list[float]) -> str:
    return f"{statistics.median(xs):.2f} ({min(xs):.2f}..{max(xs):.2f})"


def funccount(pattern: str, *args: str) -> list[str]:
    return [PY, "-m", "planrunner", "run", "funccount", "--set", "target=c",
            "--set", f"pattern={pattern}", *args]


def part_str(rounds: int, bpftrace: bool) -> None:
    warm_env = dict(os.environ)
    subprocess.run(funccount("str*", "-c", "/bin/true"), cwd=ROOT, env=warm_env,
                   capture_output=True, check=True)  # primes the caches
    rows: dict[str, list[float]] = {}
    for n in range(rounds):
        order = ["warm", "first", "bpftrace"][n % 3:] + ["warm", "first", "bpftrace"][:n % 3]
        for tool in order:
            if tool == "bpftrace":
                if not bpftrace:
                    continue
                r = Run([BPFTRACE, "-e", f"uprobe:{LIBC}:str* {{ @[func] = count(); }}",
                         "-c", "/bin/true"])
                rows.setdefault("bpftrace 0.17: launch -> end", []).append(r.wait())
                continue
            env = warm_env
            tmp = None
            if tool == "first":
                tmp = tempfile.mkdtemp(prefix="sets-bench-")
                os.chmod(tmp, 0o700)
                env = {**os.environ, "PLANRUNNER_CACHE_DIR": tmp}
            r = Run(funccount("str*", "-c", "/bin/true"), env)
            attached = r.wait_line("Tracing ")
            rows.setdefault(f"planrunner {tool}: launch -> Tracing", []).append(attached)
            rows.setdefault(f"planrunner {tool}: launch -> end", []).append(r.wait())
            if tmp:
                shutil.rmtree(tmp, ignore_errors=True)
    print("\n| `str*` on libc, -c /bin/true | seconds, median (min..max) |\n|---|---|")
    for name, xs in rows.items():
        print(f"| {name} | {med(xs)} |")
    bt = rows.get("bpftrace 0.17: launch -> end")
    if bt:
        for tool in ("warm", "first"):
            ratio = (statistics.median(rows[f"planrunner {tool}: launch -> end"])
                     / statistics.median(bt))
            print(f"| planrunner {tool} / bpftrace (launch -> end) | {ratio:.3f} |")


def part_all(rounds: int) -> None:
    idle = subprocess.Popen(["sleep", "3600"])
    rows: dict[str, list[float]] = {}
    sites = ""
    try:
        for n in range(rounds + 1):  # the first warm one primes the caches
            for tool in ("warm", "first"):
                env = dict(os.environ)
                tmp = None
                if tool == "first":
                    tmp = tempfile.mkdtemp(prefix="sets-bench-")
                    os.chmod(tmp, 0o700)
                    env["PLANRUNNER_CACHE_DIR"] = tmp
                r = Run(funccount("*", "--pid", str(idle.pid)), env)
                attached = r.wait_line("Tracing ")
                sites = next(line for _, line in r.lines if line.startswith("Tracing "))
                time.sleep(0.5)
                t_int = time.monotonic()
                r.p.send_signal(signal.SIGINT)
                r.wait()
                stop = time.monotonic() - t_int
                if tmp:
                    shutil.rmtree(tmp, ignore_errors=True)
                if n == 0 and tool == "warm":
                    continue
                rows.setdefault(f"{tool}: launch -> Tracing", []).append(attached)
                rows.setdefault(f"{tool}: SIGINT -> exit (detach + print)", []).append(stop)
    finally:
        idle.kill()
        idle.wait()
    print(f"\n| `c:*` ({sites.split(' in ')[0].strip()}) | seconds, median (min..max) |"
          "\n|---|---|")
    for name, xs in rows.items():
        print(f"| {name} | {med(xs)} |")


def part_hits(rounds: int, calls: int) -> None:
    work = Path(tempfile.mkdtemp(prefix="sets-bench-"))
    binary = work / "set_hits"
    subprocess.run(["gcc", "-O2", "-fno-ipa-icf", "-o", str(binary),
                    str(ROOT / "bench" / "set_hits.c")], check=True)
    plans = {}
    for name, spec in (("single", "w:hit_00"), ("set", '"w:hit_*"')):
        path = work / f"{name}.yaml"
        path.write_text(f"planrunner: 1\nname: hits_{name}\ntargets:\n  w: {{binary: {binary}}}\n"
                        f"probes:\n  hit: {{uprobe: {spec}}}\noutputs:\n  - count: hit\n"
                        "    by: [func]\n")
        plans[name] = str(path)
        subprocess.run([PY, "-m", "planrunner", "run", plans[name], "-c", f"{binary} 10"],
                       cwd=ROOT, capture_output=True, check=True)  # primes the caches
    rows: dict[str, list[float]] = {}
    for n in range(rounds):
        order = ["none", "single", "set"][n % 3:] + ["none", "single", "set"][:n % 3]
        for variant in order:
            argv = ([str(binary), str(calls)] if variant == "none" else
                    [PY, "-m", "planrunner", "run", plans[variant], "-c",
                     f"{binary} {calls}"])
            out = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True,
                                 check=True).stdout
            ns = float(out.split("cpu_ns_per_call=")[1].split()[0])
            rows.setdefault(variant, []).append(ns)
    shutil.rmtree(work, ignore_errors=True)
    base = statistics.median(rows["none"])
    print(f"\n| per call of hit_00 ({calls} calls) | CPU ns, median (min..max) | ns per hit |"
          "\n|---|---|---|")
    for variant, xs in rows.items():
        hit = statistics.median(xs) - base
        print(f"| {variant} | {statistics.median(xs):.1f} ({min(xs):.1f}..{max(xs):.1f}) | "
              f"{hit:.1f} |")
    single = statistics.median(rows["single"]) - base
    sets = statistics.median(rows["set"]) - base
    print(f"| set / single (per hit) | | {sets / single:.3f} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=3, help="rounds")
    ap.add_argument("--calls", type=int, default=300_000)
    ap.add_argument("--skip-bpftrace", action="store_true")
    ap.add_argument("--parts", default="str,all,hits")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("needs root")
    print(f"CPU: {cpu_model()}; kernel {os.uname().release}; {os.cpu_count()} CPUs")
    parts = args.parts.split(",")
    if "str" in parts:
        part_str(args.n, not args.skip_bpftrace and os.path.exists(BPFTRACE))
    if "all" in parts:
        part_all(args.n)
    if "hits" in parts:
        part_hits(args.n, args.calls)


if __name__ == "__main__":
    main()
