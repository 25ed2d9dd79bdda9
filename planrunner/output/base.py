"""The View protocol every output view implements, and a base class with the shared bits.

A view writes to the text stream it is given and prints only what it is given: the
runtime calls `records(batch)` (or `record(rec)`) for print records, `aggregate(snap)`
for each aggregation snapshot, `table(snap)` for each snapshot of a `table:` output,
`lost(count, reason)` for losses it wants in the output (it reports them on stderr
itself; views never write to stderr), `flush()` after each batch and `close()` once at
the end. `close()` flushes but never closes the stream: the caller owns it (it may be
sys.stdout).

A `LiveView` (Prometheus) is not handed records: it pulls aggregation snapshots through
a `SnapshotSource` (records.py) while the session runs. The session starts it once
everything is attached and closes it after detaching; while one runs, aggregation maps
are never reset, so what it serves only grows.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol, TextIO, runtime_checkable

if TYPE_CHECKING:  # annotations only: records.py loads with the views that use it
    from planrunner.records import AggSnapshot, PrintSchema, SnapshotSource, TableSnapshot


@runtime_checkable
class View(Protocol):
    def record(self, rec: dict[str, object]) -> None: ...

    def records(self, batch: Sequence[dict[str, object]]) -> None: ...

    def aggregate(self, snap: AggSnapshot) -> None: ...

    def table(self, snap: TableSnapshot) -> None: ...

    def lost(self, count: int, reason: str) -> None: ...

    def flush(self) -> None: ...

    def close(self) -> None: ...


class ViewWrapper:
    """A View that passes everything to `inner`: wrappers override what they change."""

    def __init__(self, inner: View) -> None:
        self.inner = inner

    def record(self, rec: dict[str, object]) -> None:
        self.inner.record(rec)

    def records(self, batch: Sequence[dict[str, object]]) -> None:
        self.inner.records(batch)

    def aggregate(self, snap: AggSnapshot) -> None:
        self.inner.aggregate(snap)

    def table(self, snap: TableSnapshot) -> None:
        self.inner.table(snap)

    def lost(self, count: int, reason: str) -> None:
        self.inner.lost(count, reason)

    def flush(self) -> None:
        self.inner.flush()

    def close(self) -> None:
        self.inner.close()


class DeferredView:
    """A View built by `build()` when it is first used (any call, `close` included):
    `run` opens its view this way, so that the view's modules load once the probes are
    attached, not before "Tracing". The first call binds the built view's methods over
    this object's: later calls go straight to them."""

    _METHODS = ("record", "records", "aggregate", "table", "lost", "flush", "close")

    def __init__(self, build: Callable[[], View]) -> None:
        self._build = build
        self.built: View | None = None

    def _view(self) -> View:
        if self.built is None:
            self.built = self._build()
            for name in self._METHODS:
                setattr(self, name, getattr(self.built, name))
        return self.built

    def record(self, rec: dict[str, object]) -> None:
        self._view().record(rec)

    def records(self, batch: Sequence[dict[str, object]]) -> None:
        self._view().records(batch)

    def aggregate(self, snap: AggSnapshot) -> None:
        self._view().aggregate(snap)

    def table(self, snap: TableSnapshot) -> None:
        self._view().table(snap)

    def lost(self, count: int, reason: str) -> None:
        self._view().lost(count, reason)

    def flush(self) -> None:
        self._view().flush()

    def close(self) -> None:
        self._view().close()


class LiveView(Protocol):
    def start(self, source: SnapshotSource, probes_attached: int,
              semaphore_mode: str) -> None: ...

    def close(self) -> None: ...


class ViewBase:
    """Keeps the stream and schemas. A subclass overrides `records` (the batched path,
    one stream.write per batch) or `record`; each default calls the other."""

    def __init__(self, stream: TextIO, schemas: Sequence[PrintSchema]) -> None:
        self.stream = stream
        self.schemas = tuple(schemas)
        self.closed = False

    def record(self, rec: dict[str, object]) -> None:
        self.records((rec,))

    def records(self, batch: Sequence[dict[str, object]]) -> None:
        for rec in batch:
            self.record(rec)

    def flush(self) -> None:
        self.stream.flush()

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.flush()
