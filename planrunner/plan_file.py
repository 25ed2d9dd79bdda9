"""The bytes of a plan file, read once and bounded: `run` keys its cache on them and
hands the same bytes to the loader (a plan read twice could differ between the reads,
and a FIFO gives its bytes once). Outside plan/, whose package imports the plan model:
a warm run reads the plan without it."""

from __future__ import annotations

MAX_PLAN_BYTES = 2 * 1024 * 1024


class PlanTooLarge(Exception):
    pass


def read_plan_bytes(path: str) -> bytes:
    """The bytes of `path`; PlanTooLarge when over MAX_PLAN_BYTES (only that much plus
    one byte is ever read). OSError passes through."""
    with open(path, "rb") as fh:
        data = fh.read(MAX_PLAN_BYTES + 1)
    if len(data) > MAX_PLAN_BYTES:
        raise PlanTooLarge(path)
    return data
