"""How long `run` takes to end after a signal while its compile worker compiles a large
plan (issue 23 item 1): N uprobes on distinct exported functions of PostgreSQL's server
binary (bench/many_probes.py's plans), `--no-cache`, SIGINT sent 1 s after the run says
it compiles (tests/e2e/slow_attach.py's hook, with no delay added: by then the worker
has the C). One line per N: SIGINT -> exit, each run a fresh process.

    sudo .venv/bin/python bench/stop_startup.py [--counts 300,1000,3000] [--reps 3]
"""

from __future__ import annotations

import argparse
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from many_probes import ROOT, write_plan  # noqa: E402

HOOKED = [sys.executable, "-m", "tests.e2e.slow_attach", "0", "0"]


def stop_once(plan: str) -> float:
    proc = subprocess.Popen([*HOOKED, "run", plan, "--no-cache"], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    line = proc.stderr.readline()
    if line != "test-hook: compiling\n":
        proc.kill()
        sys.exit(f"unexpected: {line}{proc.communicate()[1]}")
    time.sleep(1)
    start = time.monotonic()
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=600)
    return time.monotonic() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--counts", default="300,1000,3000")
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    cpu = next((line.split(":", 1)[1].strip() for line in
                Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())
    print(f"# {cpu}, Linux {platform.release()}")
    with tempfile.TemporaryDirectory() as tmp:
        for n in (int(c) for c in args.counts.split(",")):
            plan = write_plan(tmp, n)
            if n > 1000:  # above the default settings.max_sites
                text = Path(plan).read_text().replace(
                    "\ntargets:", f"\nsettings: {{max_sites: {n}}}\ntargets:", 1)
                Path(plan).write_text(text)
            times = [stop_once(plan) for _ in range(args.reps)]
            print(f"{n} sites: SIGINT -> exit median {statistics.median(times):.2f} s "
                  f"(max {max(times):.2f} s)", flush=True)


if __name__ == "__main__":
    main()
