"""Start-up phase marks for benchmarks (issue 28 item 3: a first run's time split).

With PLANRUNNER_TIMING=1 in the environment, `mark(phase)` writes one line to stderr:

    planrunner-timing PHASE SECONDS PID

SECONDS is CLOCK_MONOTONIC, which is one clock for every process of the machine, so a
bench subtracts the time it launched `run` (and the compile worker's marks, written to
the same stderr, line up with the parent's). Without the variable a mark costs one
check of a module constant: no import, no system call. bench/first_run.py reads them.
`note(what, **counts)` writes `planrunner-note WHAT KEY=N ...` the same way: counts
a bench or a test reads at the end of a run (the stack copies, full and light).
"""

from __future__ import annotations

import os
import sys
import time

ENABLED = os.environ.get("PLANRUNNER_TIMING") == "1"


def mark(phase: str) -> None:
    if ENABLED:
        sys.stderr.write(f"planrunner-timing {phase} {time.monotonic():.6f} {os.getpid()}\n")
        sys.stderr.flush()


def note(what: str, **counts: int) -> None:
    if ENABLED:
        pairs = " ".join(f"{k}={v}" for k, v in counts.items())
        sys.stderr.write(f"planrunner-note {what} {pairs}\n")
        sys.stderr.flush()
