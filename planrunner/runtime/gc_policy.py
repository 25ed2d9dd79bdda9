"""The cyclic garbage collector while tracing (issue 28 item 5).

By the time the loop starts, the run holds what start-up built (modules, ELF symbol
tables, CFI indexes, the program): a million objects that live as long as the run.
CPython's collector walked them all in every full collection, ~60 ms each on this
machine's profile benchmark (3 in 30 s at 99 Hz: 0.6% of one CPU), and a young
collection ran every 700 allocations net. `settle()` moves them out of the collector's
sight (`gc.freeze`) and lets the young generation grow to YOUNG first: the loop's
allocations are mostly records, frames and cache entries without cycles, freed by
their reference counts.
"""

from __future__ import annotations

import gc

YOUNG = 20_000  # net allocations between young collections (CPython's default: 700)


def settle() -> None:
    """Call once, when tracing begins (see the module docstring)."""
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG, middle, old)
