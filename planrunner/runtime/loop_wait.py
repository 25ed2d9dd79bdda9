"""How long the session's loop may sleep between two turns, and the sleep itself
(issue 28 item 5: a profile's loop turned 20 times a second with nothing to do, 0.9%
of one CPU).

The loop turns every POLL_MS by default: print records are mostly submitted without a
wakeup (templates/record_helpers.h), a -c command's end and a late library are seen by
looking. A program whose records need no such turn sleeps instead until something is
due (`quiet_turn_s`): that is a program without print outputs (only aggregations and
tables; the ring carries no more than the new-process notices, each with a forced
wakeup), whose sites are all perf samplers (so the copies waiting in the copies map,
render/stacks.py UCOPY_ENTRIES, grow at a known rate: at most one copy a sample), run
without a -c command, a late-library watch or a live view. `TurnWaiter.wait` then
sleeps in one poll(2) on what can end the wait early:
- the ring buffer's fd (the notices);
- a pipe that `signal.set_wakeup_fd` writes a byte to for every signal with a Python
  handler (Ctrl-C, SIGTERM, SIGHUP, the output's SIGALRM): a stop ends the wait at
  once, as a poll timeout of POLL_MS bounded it before (PEP 475 retries a poll a
  signal interrupts, so without the pipe the stop waits for the timeout);
- the pidfds of the --pid processes (runtime/pid_watch.py): readable at their end;
- the kernel's maps records' perf rings (runtime/task_events.py): readable when one
  is half full (the kernel's default watermark), long before records are dropped.
Its timeout is the sooner of QUIET_POLL_S, the next `every:` print or stale-pid expiry
(AggregateReader.next_due), the --duration deadline, and the time for the copies map
to fill a quarter.
"""

from __future__ import annotations

import os
import select
import signal
from collections.abc import Iterable

from planrunner.probe_kinds import site_kind
from planrunner.render.model import RUN_OWN_SITES, UCOPY_ENTRIES, RenderedProgram

# The longest sleep of a quiet loop: a bound on how late an event nothing announces
# (a --pid process's end where pidfds are refused is looked at every POLL_MS anyway)
# is seen.
QUIET_POLL_S = 1.0


def copy_rate(program: RenderedProgram, cpus: int) -> float | None:
    """At most how many stack copies a second the program stores, when every one of its
    sites is a perf sampler (one copy a sample at most); None when it has others (a
    uprobe fires at any rate) or uprobe sets."""
    if program.sets:
        return None
    rate = 0.0
    for site in program.sites:
        if site in RUN_OWN_SITES:
            continue  # the run's own tracepoints copy no stack
        if not site_kind(site.kind).timer:
            return None
        if site.sample_hz:
            rate += site.sample_hz * cpus
        elif site.sample_period_ns:
            rate += 1e9 / site.sample_period_ns  # on CPU 0 only
        else:
            return None
    return rate


def quiet_turn_s(program: RenderedProgram, cpus: int) -> float | None:
    """The longest a turn of this program's loop may sleep (module docstring), None
    when it must turn every POLL_MS."""
    if program.prints:
        return None
    rate = copy_rate(program, cpus)
    if rate is None:
        return None
    if not program.stack_maps.copies or rate <= 0:
        return QUIET_POLL_S
    return min(QUIET_POLL_S, UCOPY_ENTRIES / 4 / rate)


class TurnWaiter:
    """One poll(2) over the fds that end a quiet loop's sleep (module docstring). Made
    in the main thread (signal.set_wakeup_fd); `close` puts the previous wakeup fd back."""

    def __init__(self, fds: Iterable[int]) -> None:
        self._fds = tuple(fds)
        self._read, self._write = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._previous = signal.set_wakeup_fd(self._write, warn_on_full_buffer=False)

    def wait(self, timeout_s: float, also: Iterable[int] = ()) -> None:
        """Sleep until one of the fds (and `also`: the pidfds still open, asked each
        time, as they close when their process ends) is readable, a signal comes, or
        `timeout_s` passes."""
        if timeout_s <= 0:
            return
        poller = select.poll()
        for fd in (self._read, *self._fds, *also):
            poller.register(fd, select.POLLIN)
        ready = poller.poll(max(1, round(timeout_s * 1000)))
        if any(fd == self._read for fd, _ in ready):
            try:
                while os.read(self._read, 256):
                    pass
            except BlockingIOError:
                pass

    def close(self) -> None:
        signal.set_wakeup_fd(self._previous)
        os.close(self._read)
        os.close(self._write)
