"""The `text` view (the default): columns for print records, tables and bars for
aggregations, in the manner of bcc's tools.

Print records. One header line, written before the first record, then one line each:
``TIME PID TID COMM PROBE`` and the output's fields, each column padded to its header
or to the widest value seen so far (the header is laid out for the first batch; a
column widens, up to MAX_WIDTH, when a later value is longer; a longer value still
pushes the line: nothing is cut). TIME is local wall-clock time
``HH:MM:SS.ffffff`` (bcc shows local time too; JSON/CSV keep UTC), or in `tz` if given.
- When every `print` output without a `format` has the same fields, the header names
  them. When they differ, the header stops at PROBE and each line shows its fields as
  ``key=value`` (a record's output is then clear from its keys and PROBE).
- An output with a `format` template prints the template instead (see template.py).
- NULL strings read ``(null)``, bools ``true``/``false``; a truncated string ends ``…``.
  Line breaks inside values are shown as ``\\n``/``\\r``, so a record stays one line,
  and every other control character as ``\\xNN`` (printable.py, as `list` does), so a
  traced program's strings cannot move the cursor or forge lines.

Stacks (`ustack`, `kstack` fields) are not columns: their frames follow the line, one
per line, indented like bcc's `trace -U` (``    inner+0x12 [fx_stack]``), innermost
first; a stack that could not be captured reads ``    [stack lost]``, one not unwound
past the probe's frame shows that frame, then ``    [stack lost]``.

Aggregations: see text_agg.py. Tables: table_text.py, or with `live=True` (stdout is a
terminal) one table redrawn in place, live_table.py (Rich). Losses: ``N events lost
(REASON)``. The view prints only what it is given; the runtime reports losses on stderr
itself.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from datetime import tzinfo
from itertools import repeat
from operator import itemgetter
from typing import TYPE_CHECKING, Any, TextIO

from planrunner.output.base import ViewBase
from planrunner.output.clock import Clock
from planrunner.output.stack_text import stack_text
from planrunner.output.table_text import table_text
from planrunner.output.template import compile_template, readable
from planrunner.output.text_agg import snapshot_text
from planrunner.printable import printable
from planrunner.records import (
    RECORD_HEAD,
    AggSnapshot,
    PrintSchema,
    Record,
    TableSnapshot,
)

if TYPE_CHECKING:
    from planrunner.output.live_table import HeldStream, LiveTables

Render = Callable[[Record], str]
TIME_WIDTH = 15  # HH:MM:SS.ffffff
FIELD_MIN_WIDTH = 8
MAX_WIDTH = 40  # a column widens to the values seen up to this; longer values push
_LINE_BREAKS = str.maketrans({"\n": "\\n", "\r": "\\r"})


def _has_bool(values: Iterable[object]) -> bool:
    return any(type(v) is bool for v in values)


def _plain(rec: Record) -> Record:
    """`rec` itself, or its readable copy when it holds None, bools or truncation."""
    vals = rec.values()
    if None in vals or "truncated" in rec or (
        (True in vals or False in vals) and _has_bool(vals)  # 0/1 ints match too: confirm
    ):
        return readable(rec)
    return rec


def _same(rec: Record) -> Record:
    return rec


def _truncated(rec: Record) -> Record:
    return readable(rec) if "truncated" in rec else rec


def _plain_for(schema: PrintSchema) -> Callable[[Record], Record]:
    """`_plain` for the records of `schema`, looking only at the fields it says may hold
    None or a bool (PrintSchema.nullable, .bools) when it says: comparing every value
    of a record with None, True and False cost ~0.6 us a record on an AMD EPYC guest,
    a seventh of the consumer's time at 1M/s (BENCHMARKS.md issue 28 item 1)."""
    if schema.format is not None:
        return _same  # a template makes its own readable copy
    if schema.nullable is None or schema.bools is None:
        return _plain
    maybe = (*schema.nullable, *schema.bools)
    if not maybe:
        return _truncated
    if len(maybe) == 1 and not schema.bools:
        key = maybe[0]
        return lambda rec: readable(rec) if "truncated" in rec or rec[key] is None else rec
    get = itemgetter(*maybe, *maybe[:1])  # a tuple even for one key

    def plain(rec: Record) -> Record:
        vals = get(rec)
        if "truncated" in rec or None in vals or (
                (True in vals or False in vals) and _has_bool(vals)):
            return readable(rec)
        return rec

    return plain


class TextView(ViewBase):
    def __init__(self, stream: TextIO, schemas: Sequence[PrintSchema],
                 tz: tzinfo | None = None, live: bool = False,
                 held_stderr: HeldStream | None = None) -> None:
        super().__init__(stream, schemas)
        self.clock = Clock(tz)
        # live: `table:` outputs redraw one table in place (stdout is a terminal)
        self.live: LiveTables | None = None
        if live:  # only asked for where Rich imports (commands/run.py checks)
            from planrunner.output.live_table import LiveTables

            self.live = LiveTables(stream, self.clock, held_stderr)
        columned = [s for s in self.schemas if s.format is None]
        self.uniform = len({_columns_of(s) for s in columned}) <= 1
        self.probe_width = max([5, *(len(s.probe) for s in self.schemas)])
        # The shared columns' fields (uniform case) and the outputs printed in them.
        self.fields: tuple[str, ...] = (_columns_of(columned[0]) if columned and self.uniform
                                        else ())
        self.multiline: set[str] = {s.output for s in self.schemas if s.stacks}
        self.columned = {s.output for s in columned} if self.uniform else set()
        self.widths: dict[str, int] = {f: max(FIELD_MIN_WIDTH, len(f)) for f in self.fields}
        # the shared fields every columned schema says hold ints (neither None nor bool)
        self.int_columns = {f for f in self.fields if all(
            s.nullable is not None and s.bools is not None
            and f not in s.nullable and f not in s.bools for s in columned)}
        self.header = self._header(self.fields)
        self.header_done = False
        self.templated = {s.output for s in self.schemas if s.format is not None}
        self.renderers: dict[str, Render] = {}
        for schema in self.schemas:
            self.renderers[schema.output] = self._renderer(schema)
        # per output, `_plain` or what stands for it (an output without a schema: _plain)
        self.plains = {s.output: _plain_for(s) for s in self.schemas}

    # -- layout ------------------------------------------------------------------------

    def _head_keys(self) -> list[tuple[str, int]]:
        """The record keys after TIME that every line shows, with their widths."""
        return [("pid", 7), ("tid", 7), ("comm", 16), ("probe", self.probe_width)]

    def _header(self, fields: Sequence[str]) -> str:
        cols = [("TIME", TIME_WIDTH), *((k.upper(), w) for k, w in self._head_keys())]
        cols += [(f, self.widths.get(f, max(FIELD_MIN_WIDTH, len(f)))) for f in fields]
        names = [f"{name:<{w}}" for name, w in cols[:-1]] + [cols[-1][0]]
        return " ".join(names) + "\n"

    def _widen(self, plain: Sequence[Record]) -> None:
        """Widen the shared field columns (all but the last) to the values of `plain`,
        and lay out the header and the column renderers again if any grew."""
        grew = False
        columned = self.columned
        recs = [r for r in plain if r["output"] in columned]
        if not recs:
            return
        for key in self.fields[:-1]:
            if self.widths[key] >= MAX_WIDTH:
                continue  # as wide as a column gets
            # C-level maps: this runs over every record of every batch
            values: list[Any] = list(map(dict.get, recs, repeat(key)))
            if key in self.int_columns:  # the widest int is the largest or the smallest
                seen = max(len(str(max(values))), len(str(min(values))))
            else:
                seen = max(map(len, map(str, values)))
            width = min(seen, MAX_WIDTH)
            if width > self.widths[key]:
                self.widths[key] = width
                grew = True
        if grew:
            self.header = self._header(self.fields)
            for schema in self.schemas:
                if schema.output in self.columned:
                    self.renderers[schema.output] = self._renderer(schema)

    def _column_format(self, fields: Sequence[str], as_pairs: bool
                       ) -> tuple[str, tuple[str, ...]]:
        """A positional %-format for everything after TIME (TIME is converted), and the
        record keys whose values it takes, in order (a positional format over a tuple of
        them costs ~2/3 of the same format by %(key)s over the dict)."""
        keys = self._head_keys()
        if not as_pairs:
            keys += [(f, self.widths.get(f, max(FIELD_MIN_WIDTH, len(f)))) for f in fields]
        cells = [f"%-{w}s" for _k, w in keys]
        pairs = [f"{f.replace('%', '%%')}=%s" for f in fields] if as_pairs else []
        if not pairs:  # the last column is not padded (PROBE is, when pairs follow it)
            cells[-1] = "%s"
        cells += pairs
        return " " + " ".join(cells), (*(k for k, _w in keys), *(fields if as_pairs else ()))

    def _renderer(self, schema: PrintSchema) -> Render:
        if schema.format is not None:
            line = compile_template(schema.format, (*RECORD_HEAD, *schema.fields, "truncated"))
        else:
            line = self._columns(_columns_of(schema), as_pairs=not self.uniform)
        return _with_stacks(line, schema.stacks) if schema.stacks else line

    def _columns(self, fields: Sequence[str], as_pairs: bool) -> Render:
        if any(")" in f for f in fields):  # not a %(name) key: the slow, general way
            return self._pairs_renderer(fields)
        fmt, keys = self._column_format(fields, as_pairs)
        values = itemgetter(*keys)  # at least the four head keys: always a tuple
        time_of = self.clock.record_time
        shown, seconds = self.clock.shown.get, self.clock.seconds

        # Here is the hot path: one C-level %-format over the (plain) record's values,
        # and Clock.record_time's common case inline (one call less per record).
        def render(rec: Record) -> str:
            iso: str = rec["time"]
            cells: str = fmt % values(rec)
            if len(iso) == 27 and iso[19] == ".":
                return (shown(iso[:19]) or seconds(iso[:19])) + iso[19:26] + cells
            return time_of(iso) + cells

        return render

    def _pairs_renderer(self, fields: Sequence[str]) -> Render:
        base = " " + " ".join(f"%({k})-{w}s" for k, w in self._head_keys())
        time_of = self.clock.record_time

        def render(rec: Record) -> str:
            pairs = "".join(f" {f}={rec.get(f)}" for f in fields)
            head = time_of(str(rec["time"])) + base % rec
            return head + pairs if pairs else head.rstrip(" ")

        return render

    def _unknown(self, rec: Record) -> Render:
        """A record of an output without a schema: its fields as key=value."""
        skip = {*RECORD_HEAD, "truncated", "reread"}
        render = self._pairs_renderer([k for k in rec if k not in skip])
        self.renderers[str(rec["output"])] = render
        return render

    # -- View ----------------------------------------------------------------------------

    def records(self, batch: Sequence[Record]) -> None:
        if not batch:
            return
        plains = self.plains
        batch = [plains.get(rec["output"], _plain)(rec) for rec in batch]
        if self.columned and len(self.fields) > 1:
            self._widen(batch)
        out = []
        if not self.header_done:
            self.header_done = True
            if any(s.format is None for s in self.schemas) or any(
                r["output"] not in self.renderers for r in batch
            ):
                out.append(self.header.rstrip("\n"))
        renderers, multiline = self.renderers, self.multiline
        only = self._one_renderer(batch)
        if only is not None:  # one output, one line each: rendered at C level
            lines = list(map(only, batch))
            if not "".join(lines).isprintable():  # a control character: fix its lines
                lines = [line if line.isprintable() else
                         printable(line.translate(_LINE_BREAKS)) for line in lines]
            out += lines
            out.append("")
            self._write("\n".join(out))
            return
        for rec in batch:
            line = (renderers.get(rec["output"]) or self._unknown(rec))(rec)
            if rec["output"] in multiline:
                out.append(line)  # _with_stacks made the record's own line safe
                continue
            if not line.isprintable():  # a control character from the traced program
                line = printable(line.translate(_LINE_BREAKS))
            out.append(line)
        out.append("")
        self._write("\n".join(out))

    def _one_renderer(self, batch: Sequence[Record]) -> Render | None:
        """The renderer of every record of `batch` when they are of one output, whose
        lines are one line each (no stacks under them); else None."""
        output = batch[0]["output"]
        render = self.renderers.get(str(output))
        if render is None or output in self.multiline or not all(
                map(output.__eq__, map(itemgetter("output"), batch))):
            return None
        return render

    def aggregate(self, snap: AggSnapshot) -> None:
        self._write(snapshot_text(snap, self.clock))

    def table(self, snap: TableSnapshot) -> None:
        if self.live is not None:
            self.live.show(snap)
        else:
            self.stream.write(table_text(snap, self.clock))

    def lost(self, count: int, reason: str) -> None:
        self._write(f"{count} events lost ({reason})\n")

    def close(self) -> None:
        if self.live is not None:
            self.live.close()  # the last table stays on the screen
        super().close()

    def _write(self, text: str) -> None:
        if self.live is not None:
            self.live.write(text)
        else:
            self.stream.write(text)


def _columns_of(schema: PrintSchema) -> tuple[str, ...]:
    return tuple(f for f in schema.fields if f not in schema.stacks)


def _with_stacks(line: Render, stacks: Sequence[str]) -> Render:
    def render(rec: Record) -> str:
        text = line(rec)
        if not text.isprintable():
            text = printable(text.translate(_LINE_BREAKS))
        frames = [t for key in stacks for t in stack_text(rec.get(key))]
        return "\n".join([text, *frames])

    return render
