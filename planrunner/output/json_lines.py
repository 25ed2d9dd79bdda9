"""The `json` view: one JSON object per line (UTF-8, not ASCII-escaped; lines end with
"\n" and only there: a reader must not split on U+2028 or U+0085, which JSON keeps raw).

- A print record is written as it is (its keys already follow the contract in
  records.py; a NULL string is ``null``); a stack is a list of frames, innermost first:
  ``[{"address", "symbol" (null when unknown), "offset", "module", "line" (a CPython
  frame's; else null), "kind" ("native" or "python")}, ...]`` (so is a stack
  key of an aggregation row).
- An aggregation snapshot gives one object per row, in the order given:
  ``{"output", "interval_start" (ISO 8601 UTC; null if the snapshot has none, which
  `run` never passes: without `every` it is the run's start),
  "interval_end", the key fields..., then each statistic the row carries among
  "count", "sum", "min", "max", "avg"}``; histograms carry
  ``"buckets": [{"low", "high", "count"}...]`` with the buckets from the first to the
  last non-empty one (empty ones between them kept, so the shape is visible); ``low``
  is inclusive, ``high`` exclusive, ``null`` for the unbounded side of an lhist's
  underflow/overflow bucket. An empty snapshot writes nothing.
- A `table:` snapshot gives one object per row: ``{"output", "interval_start",
  "interval_end", the key fields..., "cmdline" (when a key is `pid`: the process's
  command line, null if it could not be read), then one key per column}``; a column's
  value is the interval's count or sum, or with `rate: true` that per second (a float).
- Keys that did not fit in an aggregation map:
  ``{"lost": N, "reason": "map full", "output": NAME}``; losses given by the runtime:
  ``{"lost": N, "reason": REASON}``.

Lines are buffered per batch: one write per `records()` call; `flush()` is the
runtime's, after each batch.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import TextIO

from planrunner.output.base import ViewBase
from planrunner.output.histogram import trim
from planrunner.records import (
    STAT_KEYS,
    AggRow,
    AggSnapshot,
    PrintSchema,
    Record,
    Stack,
    TableRow,
    TableSnapshot,
    UserSymbol,
    iso_utc,
)


def _default(obj: object) -> object:
    if isinstance(obj, Stack | UserSymbol):
        return obj.json()
    raise TypeError(f"{type(obj).__name__} is not JSON serializable")


class JsonView(ViewBase):
    def __init__(self, stream: TextIO, schemas: Sequence[PrintSchema]) -> None:
        super().__init__(stream, schemas)
        # One encoder, built once: json.dumps with options builds a new one per call.
        encoder = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False,
                                   default=_default)
        self.encode = encoder.encode
        self._records_line = _flat_encoder(encoder)

    def records(self, batch: Sequence[Record]) -> None:
        if batch:
            self.stream.write("\n".join(map(self._records_line, batch)) + "\n")

    def aggregate(self, snap: AggSnapshot) -> None:
        objs = [row_object(snap, row) for row in snap.rows]
        if snap.dropped:
            objs.append({"lost": snap.dropped, "reason": "map full", "output": snap.output})
        if objs:
            self.stream.write("".join(self.encode(o) + "\n" for o in objs))

    def table(self, snap: TableSnapshot) -> None:
        objs = [table_object(snap, row) for row in snap.rows]
        if snap.dropped:
            objs.append({"lost": snap.dropped, "reason": "map full", "output": snap.output})
        if objs:
            self.stream.write("".join(self.encode(o) + "\n" for o in objs))

    def lost(self, count: int, reason: str) -> None:
        self.stream.write(self.encode({"lost": count, "reason": reason}) + "\n")


def _flat_encoder(encoder: json.JSONEncoder) -> Callable[[Record], str]:
    """encoder.encode for print records, without its per-call set-up: JSONEncoder.encode
    builds a new C encoder for every object (1.4x slower on records). Print records hold
    only str/int/bool/None, stacks and a list of keys, so no cycle check is needed."""
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:  # not CPython's C accelerator: the plain way
        return encoder.encode
    encode = make(None, encoder.default, json.encoder.encode_basestring, None,
                  encoder.key_separator, encoder.item_separator, False, False, True)
    return lambda rec: "".join(encode(rec, 0))  # noqa: E731 - the encoder is closed over


def table_object(snap: TableSnapshot, row: TableRow) -> Record:
    obj: Record = {
        "output": snap.output,
        "interval_start": iso_utc(snap.interval_start),
        "interval_end": iso_utc(snap.interval_end),
    }
    obj.update(row.key)
    if snap.has_cmdline:
        obj["cmdline"] = row.cmdline
    obj.update(zip(snap.columns, row.values, strict=True))
    return obj


def row_object(snap: AggSnapshot, row: AggRow) -> Record:
    obj: Record = {
        "output": snap.output,
        "interval_start": None if snap.interval_start is None else iso_utc(snap.interval_start),
        "interval_end": iso_utc(snap.interval_end),
    }
    obj.update(row.key)
    for stat in STAT_KEYS:
        value = getattr(row, stat)
        if value is not None:
            obj[stat] = value
    if row.buckets is not None:
        obj["buckets"] = [{"low": b.low, "high": b.high, "count": b.count}
                          for b in trim(row.buckets)]
    return obj
