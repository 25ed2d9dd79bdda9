"""Calls that wait on the kernel, run side by side in threads: program loads (each
verifier run takes one CPU) and detaches (each waits for its grace periods).

Plain threads, not concurrent.futures: that imports logging, ~13 ms on every run's
path to `Tracing`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence


def side_by_side(calls: Sequence[Callable[[], object]], threads: int | None = None,
                 name: str = "planrunner") -> None:
    """Each of `calls`, in up to `threads` threads at once (the caller's among them;
    None: one per call), all waited for; then the first that raised, in `calls`'
    order, is raised again. A failure stops no other call."""
    failed: list[BaseException | None] = [None] * len(calls)
    todo = iter(range(len(calls)))
    lock = threading.Lock()

    def work() -> None:
        while True:
            with lock:
                i = next(todo, None)
            if i is None:
                return
            try:
                calls[i]()
            except BaseException as exc:  # noqa: BLE001 - raised below, in the caller
                failed[i] = exc

    n = len(calls) if threads is None else min(threads, len(calls))
    helpers = [threading.Thread(target=work, name=name, daemon=True)
               for _ in range(n - 1)]
    for helper in helpers:
        helper.start()
    work()
    for helper in helpers:
        helper.join()
    for exc in failed:
        if exc is not None:
            raise exc
