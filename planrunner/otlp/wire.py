"""The pipes between the run and its exporter process (sender.py -> exporter.py).

Frames: a 4-byte little-endian length, then a pickle (both ends are this run's own
processes). A print record crosses as a *row*, a tuple of the values the exporter
reads, in the order `row_keys` gives: `ts_ns`, `pid`, `tid`, then the output's fields
in layout order. Pickling a batch of rows costs the run about a fifth of a microsecond
a record (a dict pickles at ~0.3 us, and unpickles at twice that); values that are
objects (stacks, symbols) cross as the text the other views print.

Messages to the exporter: ("init", Setup), ("procs", {pid: resource attributes}),
("rows", output name, [row, ...]), ("snap", AggSnapshot); the end of its input is the
close. From it: ("ready",), ("sent", records, points, spans, logs), ("handled", rows
it is done with), ("down", why) and ("up",) (the receiver), ("orphaned", n), ("warn",
text), ("failed", text), at its end ("cpu", seconds it used
since it was up).

Imports nothing of protobuf: the run's side needs it without --otlp's packages.
"""

from __future__ import annotations

import pickle
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import IO, Any

from planrunner.otlp.config import OtlpConfig
from planrunner.records import Record
from planrunner.render.model import AggregateOutput, PrintOutput

HEADER = struct.Struct("<I")
ROW_HEAD = ("ts_ns", "pid", "tid")
TS, PID, TID = 0, 1, 2  # their places in a row
# layout kinds whose values are objects: they cross as text
_OBJECT_KINDS = frozenset({"stack", "ucopy", "usym"})


@dataclass(frozen=True, slots=True)
class Setup:
    """What the exporter needs of the run (the first message)."""

    config: OtlpConfig
    prints: tuple[PrintOutput, ...]
    aggregates: tuple[AggregateOutput, ...]
    started_ns: int
    batch: int


def row_keys(out: PrintOutput) -> tuple[str, ...]:
    return ROW_HEAD + tuple(f.key for f in out.layout.fields)


def text_of(value: object) -> object:
    """An object value (a Stack, a UserSymbol, a list) as the text views print."""
    if value is None or isinstance(value, (int, str, float)):
        return value
    if isinstance(value, (list, tuple)):
        return ",".join(map(str, value))
    return str(value)


def row_maker(out: PrintOutput) -> Callable[[Record], tuple[Any, ...]]:
    """record -> row for the output `out` (a record without some field: None there)."""
    keys = row_keys(out)
    get = itemgetter(*keys)
    objects = [i for i, f in enumerate(out.layout.fields, len(ROW_HEAD))
               if f.kind in _OBJECT_KINDS]

    def row(rec: Record) -> tuple[Any, ...]:
        try:
            values: tuple[Any, ...] = get(rec)
        except KeyError:
            values = tuple(rec.get(k) for k in keys)
        if objects:
            items = list(values)
            for i in objects:
                items[i] = text_of(items[i])
            values = tuple(items)
        return values

    return row


def rows_maker(out: PrintOutput) -> Callable[[Sequence[Record]], list[tuple[Any, ...]]]:
    """records -> rows for the output `out`, a batch at a time: one itemgetter mapped
    over the batch (~0.1 us a record, half what a call of row_maker's costs); a batch
    with a record without some field, or an output with object values, goes record by
    record."""
    one = row_maker(out)
    if any(f.kind in _OBJECT_KINDS for f in out.layout.fields):
        return lambda records: list(map(one, records))
    get = itemgetter(*row_keys(out))  # (at least ROW_HEAD's 3 keys: tuples)

    def rows(records: Sequence[Record]) -> list[tuple[Any, ...]]:
        try:
            return list(map(get, records))
        except KeyError:
            return list(map(one, records))

    return rows


def write(fh: IO[bytes], message: object) -> None:
    data = pickle.dumps(message, pickle.HIGHEST_PROTOCOL)
    fh.write(HEADER.pack(len(data)) + data)
    fh.flush()


def read(fh: IO[bytes]) -> Any:
    """The next message, or None at the end of the input (or a cut frame)."""
    head = fh.read(HEADER.size)
    if len(head) < HEADER.size:
        return None
    size = HEADER.unpack(head)[0]
    data = fh.read(size)
    if len(data) < size:
        return None
    return pickle.loads(data)  # noqa: S301 - written by this run, over its own pipe
