"""Attach and stop of plans with many uprobe sites, before and after bulk attach
(issue 23 item 6: one uprobe_multi link per binary and kind instead of one per site).

For each revision (a git rev, exported with `git archive` into a temporary directory
and run from there, so that both are measured in the same invocation, interleaved) and
each N: a plan of N uprobes on N distinct exported functions of PostgreSQL's server
binary (bench/many_probes.py writes it; each probe counted), run warm (a first run
compiles and fills a program cache shared by the runs; not measured), then --reps runs
of: launch -> "Tracing" (load from the cache, attach), the bpf_link fds the run holds
then, SIGINT -> exit (detach, the last reads, exit). Nothing is traced: no postgres
runs. settings.max_sites is capped at 1000 by the schema; the exported copies have that
cap (schema and resolve/site_cost.py) raised to the largest N, so that 3000 sites can
be measured.

    sudo .venv/bin/python bench/bulk_attach.py [--revs main,HEAD] [--counts 100,1000,3000]
        [--reps 3] [--cache-dir DIR] [--phases]

--in-process: bcc compiles in the run's own process, every run (no worker, no cache).
--phases: one more run per revision and N, straced from before the SIGINT to its exit,
says where the stop went (detach, map reads, output, exit).
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from many_probes import ROOT, write_plan


def export(rev: str, dest: Path, max_sites: int) -> None:
    """Revision `rev` of this repository in `dest`, its max_sites cap raised."""
    dest.mkdir()
    archive = subprocess.run(["git", "archive", rev], cwd=ROOT, capture_output=True,
                             check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    schema = dest / "schema" / "plan.schema.json"
    text = schema.read_text()
    at = text.index('"max_sites"')
    text = text[:at] + text[at:].replace('"maximum": 1000', f'"maximum": {max_sites}', 1)
    schema.write_text(text)
    cost = dest / "planrunner" / "resolve" / "site_cost.py"
    cost.write_text(re.sub(r"^MAX_SITES = \d+", f"MAX_SITES = {max_sites}",
                           cost.read_text(), count=1, flags=re.M))


def links_of(pid: int) -> int:
    count = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            count += os.readlink(f"/proc/{pid}/fd/{fd}") == "anon_inode:bpf_link"
        except OSError:
            pass
    return count


# the module runs are started as: planrunner, or (--in-process) tests/e2e/in_process.py,
# where bcc compiles and loads the program in the run's own process, with no cache
ENTRY = ["planrunner"]


def link_fds(pid: int) -> set[int]:
    """The fds a detach closes: bpf links and perf events (tracepoints)."""
    fds = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}") in ("anon_inode:bpf_link",
                                                        "anon_inode:[perf_event]"):
                fds.add(int(fd))
        except OSError:
            pass
    return fds


_LINE = re.compile(r"^(\d+) +(\d+\.\d+) (.*)$")
_CLOSE = re.compile(r"^close\((\d+)")
_READ = re.compile(r"^bpf\(BPF_MAP_(LOOKUP|GET_NEXT_KEY|DELETE)")


def phases(trace: str, links: set[int]) -> dict[str, float]:
    """Where a stop went, from `strace -f -ttt` of the run from before the SIGINT to its
    exit: s from the SIGINT to the last link or perf event closed (detach), the map reads (first to
    last bpf() lookup after the detach, and how many), the last write to stdout or
    stderr, the exit."""
    sig = detach = first = last = wrote = end = None
    reads = 0
    closing: set[str] = set()  # threads in a link's close(2)
    for line in Path(trace).read_text().splitlines():
        m = _LINE.match(line)
        if not m:
            continue
        t, call = float(m.group(2)), m.group(3)
        if sig is None:
            if "--- SIGINT" in call:
                sig = t
            continue
        close = _CLOSE.match(call)
        if close and int(close.group(1)) in links:
            links = links - {int(close.group(1))}  # its number may be reused after
            if "unfinished" in call:
                closing.add(m.group(1))
            else:
                detach = t
        elif call.startswith("<... close resumed>") and m.group(1) in closing:
            closing.discard(m.group(1))
            detach = t
        elif _READ.match(call) and detach is not None:
            first = t if first is None else first
            last, reads = t, reads + 1
        elif call.startswith(("write(1,", "write(2,")):
            wrote = t
        elif call.startswith("+++ exited"):  # each thread: the last is the end
            end = t
    if sig is None or end is None:
        raise RuntimeError(f"no SIGINT or exit in {trace}")

    def since(t: float | None) -> float:
        return round(t - sig, 3) if t is not None and sig is not None else float("nan")
    return {"detach": since(detach), "reads_from": since(first), "reads_to": since(last),
            "reads": reads, "last_write": since(wrote), "exit": since(end)}


def run_once(tree: Path, plan: str, env: dict[str, str], timeout: float,
             trace: str | None = None) -> tuple[float, int, float]:
    """(launch -> "Tracing" s, bpf_link fds then, SIGINT -> exit s) of one `run`; with
    `trace`, the run is straced from just before the SIGINT into that file (its link
    fds are then in `run_once.links`)."""
    t0 = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", ENTRY[0], "run", plan], cwd=tree,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env=env)
    assert proc.stderr is not None
    try:
        said = ""
        for line in proc.stderr:
            said += line
            if line.startswith("Tracing"):
                break
        ready = time.monotonic() - t0
        if not said.endswith("Ctrl-C to end.\n"):
            raise RuntimeError(f"run did not start: {said}{proc.stderr.read()}")
        links = links_of(proc.pid)
        tracer = None
        if trace is not None:
            run_once.links = link_fds(proc.pid)  # type: ignore[attr-defined]
            tracer = subprocess.Popen(["strace", "-f", "-ttt", "-q", "-o", trace, "-p",
                                       str(proc.pid)], stderr=subprocess.DEVNULL)
            time.sleep(1.0)  # attached to every thread
        t1 = time.monotonic()
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=timeout)  # read: its lines at exit must not fill the pipe
        stopped = time.monotonic() - t1
        if tracer is not None:
            tracer.wait(timeout=60)
        return ready, links, stopped
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--revs", default="main,HEAD")
    ap.add_argument("--counts", default="100,1000,3000")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=3600, help="per first (compiling) run")
    ap.add_argument("--phases", action="store_true",
                    help="then one run per revision and N under strace: where its stop "
                         "went (strace slows every syscall: compare revisions, not runs)")
    ap.add_argument("--in-process", action="store_true",
                    help="bcc compiles and loads in the run's process, every run (no "
                         "compile worker, no cache: tests/e2e/in_process.py)")
    ap.add_argument("--traces", default=None, help="keep --phases' straces in this directory")
    ap.add_argument("--cache-dir", default=None,
                    help="a program cache kept across invocations (default: a temporary "
                         "one); the revisions' C is the same, so one compile serves both")
    a = ap.parse_args()
    revs = a.revs.split(",")
    if a.in_process:
        ENTRY[0] = "tests.e2e.in_process"
    counts = [int(x) for x in a.counts.split(",")]
    cpu = next((line.split(":", 1)[1].strip() for line in
                Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())
    print(f"machine: {cpu}, {os.cpu_count()} CPUs, Linux {platform.release()}")
    print("| sites | rev | launch -> Tracing s | bpf_link fds | SIGINT -> exit s (max) "
          "| load avg |")
    print("|---|---|---|---|---|---|")
    found: list[tuple[int, str, dict[str, float], float]] = []
    with tempfile.TemporaryDirectory() as tmp:
        cache = Path(a.cache_dir) if a.cache_dir else Path(tmp, "cache")
        cache.mkdir(mode=0o700, exist_ok=True)
        env = {**os.environ, "PLANRUNNER_CACHE_DIR": str(cache)}
        trees = {}
        for rev in revs:
            trees[rev] = Path(tmp, f"tree-{len(trees)}")
            export(rev, trees[rev], max(counts))
        for n in counts:
            plan = write_plan(tmp, n)
            with open(plan, "a") as fh:
                fh.write(f"settings:\n  max_sites: {n}\n")
            for rev in revs if not a.in_process else ():  # the compile, into the cache
                run_once(trees[rev], plan, env, a.timeout)
            runs: dict[str, list[tuple[float, int, float]]] = {rev: [] for rev in revs}
            load = os.getloadavg()[0]
            for _ in range(a.reps):  # interleaved: both under the same load
                for rev in revs:
                    runs[rev].append(run_once(trees[rev], plan, env, 600))
            for rev in revs if a.reps else ():
                r = runs[rev]
                print(f"| {n} | {rev} | {statistics.median(x[0] for x in r):.2f} "
                      f"| {max(x[1] for x in r)} | {statistics.median(x[2] for x in r):.2f} "
                      f"({max(x[2] for x in r):.2f}) | {load:.1f} |", flush=True)
            if a.phases:
                for rev in revs:
                    trace = str(Path(a.traces or tmp, f"strace-{n}-{rev}"))
                    run_once(trees[rev], plan, env, 600, trace)
                    found.append((n, rev, phases(trace, run_once.links),  # type: ignore[attr-defined]
                                  os.getloadavg()[0]))
    if found:
        print("\nUnder strace, s after the SIGINT (one run each):\n")
        print("| sites | rev | detach done | map reads (bpf calls) | last write | exit "
              "| load avg |")
        print("|---|---|---|---|---|---|---|")
        for n, rev, p, load in found:
            print(f"| {n} | {rev} | {p['detach']:.3f} | {p['reads_from']:.3f}-"
                  f"{p['reads_to']:.3f} ({p['reads']}) | {p['last_write']:.3f} "
                  f"| {p['exit']:.3f} | {load:.1f} |")


if __name__ == "__main__":
    main()
