"""Closing uprobe links (and perf events) fast: `close_all`, from many threads at once.

Why uprobes are BPF links (BPF_TRACE_UPROBE_MULTI, Linux 6.6+; runtime/kernel/bpf.py
`uprobe_multi_link` makes them), not perf events only: closing a perf-event uprobe runs
the trace event teardown under the kernel's event_mutex with an RCU synchronisation
each, ~100 ms per site measured on Linux 6.18, one after the other: a plan with 100
sites took 10 s to end, and during each teardown the site's semaphore stayed raised
while its BPF program was already gone (hits counted by the target, never traced). A
uprobe_multi link removes its breakpoint and reference count at once, then waits for
one grace period; links closed from several threads share the wait (13 sites: 1.1 s ->
0.09 s).

The link carries the site's ref_ctr_offset like bpf_attach_uprobe does, so semaphores
behave the same: raised in every process mapping the file, dropped on close or death.
Whether the kernel has the link type is decided once, up front (runtime/features.py);
runtime/attach.py uses libbcc's bpf_attach_uprobe (perf events) where it has not.
No bcc, no kernel call but close(2).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager

# Closers at most, and the stack each gets: every close of a link waits for its own
# grace periods (~70 ms here), and only closes in flight at once share them: 3000 links
# took 3.1 s with 64 closers, 0.9 s with 256, 0.4-0.6 s with 1024 (BENCHMARKS.md). A
# closer only calls close(2): a small stack keeps a thousand of them cheap.
MAX_CLOSERS = 1024
CLOSER_STACK = 256 * 1024


def close_all(fds: Iterable[int], workers: int = MAX_CLOSERS,
              close: Callable[[int], object] = os.close) -> None:
    """Close link fds (or perf-event fds, with libbcc's `close`) from up to `workers`
    threads at once, so that their RCU grace periods overlap; returns when every one is
    closed (every probe is gone)."""
    pending = list(fds)
    lock = threading.Lock()

    def worker() -> None:
        while True:
            with lock:
                if not pending:
                    return
                fd = pending.pop()
            try:
                close(fd)
            except OSError:
                pass

    count = min(workers, len(pending))
    if count <= 1:
        worker()
        return
    threads: list[threading.Thread] = []
    with _small_stacks():
        for _ in range(count):
            t = threading.Thread(target=worker, daemon=True)
            try:
                t.start()
            except RuntimeError:  # no more threads here (a pids limit): those started do
                break
            threads.append(t)
    worker()  # and this one, as one of them (all of it when none could start)
    for t in threads:
        t.join()


@contextmanager
def _small_stacks() -> Iterator[None]:
    """Threads started inside get CLOSER_STACK (the setting is the process's: put back
    after)."""
    try:
        old = threading.stack_size(CLOSER_STACK)
    except (ValueError, RuntimeError):  # not settable here: the default stack then
        yield
        return
    try:
        yield
    finally:
        threading.stack_size(old)
