"""PlanOrderView: aggregation snapshots in plan order, with their interval's start.

The runtime hands over an aggregation's snapshots in the order of its own list (by
probe, so output 1 may come before output 0) and, for outputs without `every`, with
`interval_start = None`. This wrapper holds the snapshots it is given until the next
`flush()` (the runtime flushes after each round of snapshots: every tick and at the
end), then passes them on in the plan's output order. A snapshot without a start gets
the run's start, as near as a view can tell (the runtime does not pass it): the time of
the first record, or of the first `flush()` if that came first (the session flushes
on its first loop turn, right after attaching).
Records and losses pass straight through, after any held snapshots.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import replace

from planrunner.output.base import View
from planrunner.records import AggSnapshot


class PlanOrderView:
    def __init__(self, inner: View, order: Sequence[str],
                 clock: Callable[[], float] = time.time) -> None:
        self.inner = inner
        self.rank = {name: i for i, name in enumerate(order)}
        self.clock = clock
        self.started: float | None = None
        self.pending: list[AggSnapshot] = []

    def record(self, rec: dict[str, object]) -> None:
        self.records((rec,))

    def records(self, batch: Sequence[dict[str, object]]) -> None:
        if self.started is None and batch:
            self.started = _unix(batch[0].get("time"))
        self._release()
        self.inner.records(batch)

    def aggregate(self, snap: AggSnapshot) -> None:
        self.pending.append(snap)

    def lost(self, count: int, reason: str) -> None:
        self._release()
        self.inner.lost(count, reason)

    def flush(self) -> None:
        if self.started is None:
            self.started = self.clock()
        self._release()
        self.inner.flush()

    def close(self) -> None:
        self._release()
        self.inner.close()

    def _release(self) -> None:
        if not self.pending:
            return
        last = len(self.rank)
        held = sorted(self.pending, key=lambda s: self.rank.get(s.output, last))
        self.pending = []
        for snap in held:
            if snap.interval_start is None:
                start = self.started if self.started is not None else snap.interval_end
                snap = replace(snap, interval_start=min(start, snap.interval_end))
            self.inner.aggregate(snap)


def _unix(iso: object) -> float | None:
    """Unix seconds of a record's ISO 8601 time (None if it has none)."""
    from datetime import UTC, datetime

    try:
        when = datetime.fromisoformat(str(iso))
    except ValueError:
        return None
    return (when if when.tzinfo else when.replace(tzinfo=UTC)).timestamp()
