"""CLOCK_MONOTONIC (bpf_ktime_get_ns, the probes' clock) against the wall clock."""

from __future__ import annotations

import time
from collections.abc import Callable


def wall_offset_ns(tries: int = 5, wall: Callable[[], int] = time.time_ns,
                   monotonic: Callable[[], int] = time.monotonic_ns) -> int:
    """CLOCK_REALTIME - CLOCK_MONOTONIC, from the tightest of `tries` bracketed reads: a
    preemption between two plain reads (a loaded machine) would skew every time
    converted with it by as much."""
    best: tuple[int, int] | None = None
    for _ in range(tries):
        before = monotonic()
        now = wall()
        after = monotonic()
        if best is None or after - before < best[0]:
            best = (after - before, now - (before + after) // 2)
    assert best is not None
    return best[1]
