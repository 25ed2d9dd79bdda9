"""The `csv` view (RFC 4180 via the csv module, "\\r\\n" line ends).

A CSV stream may hold several tables; each starts with its own header row, written
once, just before its first data row. `run` gives each output a stream of its own
when there are several (destination.py), so a file holds one table (and losses go
to a `lost` file). To split them, a header row is one whose first
cell is ``output`` (records, aggregations) or ``lost`` (losses).

- Print records: one table for all `print` outputs, columns ``output, time, ts_ns,
  pid, tid, comm, probe``, then the union of the outputs' fields (first-seen order;
  a field another output lacks is empty), then ``truncated`` (keys joined by ``;``).
  NULL strings are empty cells, bools ``true``/``false``; time is UTC ISO 8601. A
  record of an output without a schema fills the common columns only.
- Each aggregation output: its own table, ``output, interval_start, interval_end``
  (ISO 8601 UTC; start empty if the snapshot has none: under `run` it is the run's
  start without `every`), the key fields, then for count/sum/min/
  max the statistic (avg: ``avg, count``), or for hist/lhist ``low, high, count`` with
  one row per bucket from the first to the last non-empty one (an unbounded side of an
  lhist bucket is empty).
- Each `table:` output: its own table, ``output, interval_start, interval_end``, the
  key fields, ``cmdline`` when a key is `pid`, then a column per joined column (the
  interval's count or sum, or per second with `rate: true`).
- Losses: table ``lost, reason, output`` (output set for keys dropped from a full map).
"""

from __future__ import annotations

import csv
import io
from collections.abc import Callable, Sequence
from operator import itemgetter
from typing import TextIO

from planrunner.output.base import ViewBase
from planrunner.output.histogram import trim
from planrunner.records import (
    RECORD_HEAD,
    AggSnapshot,
    PrintSchema,
    Record,
    TableSnapshot,
    iso_utc,
)

HEAD = ("output", *(k for k in RECORD_HEAD if k != "output"))
Row = Callable[[Record], Sequence[object]]


def _cell(value: object) -> object:
    if value is True or value is False:
        return "true" if value else "false"
    return value


def _fix_bools(values: tuple[object, ...]) -> tuple[object, ...]:
    # `True in values` also matches the int 1: check the types before copying.
    if (True in values or False in values) and any(type(v) is bool for v in values):
        return tuple(map(_cell, values))
    return values


class CsvView(ViewBase):
    def __init__(self, stream: TextIO, schemas: Sequence[PrintSchema]) -> None:
        super().__init__(stream, schemas)
        # Rows go to a buffer, then one stream.write per call (the csv module writes
        # each row separately).
        self.buffer = io.StringIO(newline="")
        self.writer = csv.writer(self.buffer)
        fields: dict[str, None] = {}
        for schema in self.schemas:
            fields.update(dict.fromkeys(schema.fields))
        self.columns = (*HEAD, *fields, "truncated")
        self.rows: dict[str, Row] = {s.output: self._row_fn(s.fields) for s in self.schemas}
        self.general = self._row_fn(())  # an output without a schema: common columns only
        self.tables: set[str] = set()

    def _row_fn(self, fields: Sequence[str]) -> Row:
        keys = (*HEAD, *fields)
        if keys == self.columns[:-1]:  # the output has every column in order: C getter
            get = itemgetter(*keys)

            def row(rec: Record) -> Sequence[object]:
                trunc = rec.get("truncated")
                return (*_fix_bools(get(rec)), ";".join(trunc) if trunc else None)

            return row

        # Only this output's keys: another output's columns stay empty.
        cols = [k if k in keys else None for k in self.columns[:-1]]

        def row_general(rec: Record) -> Sequence[object]:
            trunc = rec.get("truncated")
            cells = (_cell(rec.get(k)) if k else None for k in cols)
            return (*cells, ";".join(trunc) if trunc else None)

        return row_general

    def _table(self, name: str, header: Sequence[str]) -> None:
        if name not in self.tables:
            self.tables.add(name)
            self.writer.writerow(header)

    def records(self, batch: Sequence[Record]) -> None:
        if not batch:
            return
        self._table("\0records", self.columns)
        rows, general = self.rows, self.general
        self.writer.writerows((rows.get(rec["output"]) or general)(rec) for rec in batch)
        self._emit()

    def _emit(self) -> None:
        text = self.buffer.getvalue()
        if not text:
            return
        self.stream.write(text)
        self.buffer.seek(0)
        self.buffer.truncate()

    def aggregate(self, snap: AggSnapshot) -> None:
        if snap.rows:
            self._table(snap.output, aggregate_header(snap))
            self.writer.writerows(aggregate_rows(snap))
        if snap.dropped:
            self.lost(snap.dropped, "map full", snap.output)
        self._emit()

    def table(self, snap: TableSnapshot) -> None:
        if snap.rows:
            self._table(snap.output, table_header(snap))
            start, end = iso_utc(snap.interval_start), iso_utc(snap.interval_end)
            self.writer.writerows(
                (snap.output, start, end, *(_cell(v) for _, v in r.key),
                 *((r.cmdline,) if snap.has_cmdline else ()), *r.values)
                for r in snap.rows)
        if snap.dropped:
            self.lost(snap.dropped, "map full", snap.output)
        self._emit()

    def lost(self, count: int, reason: str, output: str | None = None) -> None:
        self._table("\0lost", ("lost", "reason", "output"))
        self.writer.writerow((count, reason, output))
        self._emit()


def _stats(kind: str) -> tuple[str, ...]:
    return ("avg", "count") if kind == "avg" else (kind,)


def table_header(snap: TableSnapshot) -> tuple[str, ...]:
    cmd = ("cmdline",) if snap.has_cmdline else ()
    return ("output", "interval_start", "interval_end", *snap.key_fields, *cmd,
            *snap.columns)


def aggregate_header(snap: AggSnapshot) -> tuple[str, ...]:
    tail = ("low", "high", "count") if snap.kind in ("hist", "lhist") else _stats(snap.kind)
    return ("output", "interval_start", "interval_end", *snap.key_fields, *tail)


def aggregate_rows(snap: AggSnapshot) -> list[tuple[object, ...]]:
    start = None if snap.interval_start is None else iso_utc(snap.interval_start)
    head = (snap.output, start, iso_utc(snap.interval_end))
    rows = []
    for row in snap.rows:
        keys = tuple(_cell(v) for _, v in row.key)
        if snap.kind in ("hist", "lhist"):
            rows += [(*head, *keys, b.low, b.high, b.count) for b in trim(row.buckets or ())]
        else:
            rows.append((*head, *keys, *(getattr(row, s) for s in _stats(snap.kind))))
    return rows
