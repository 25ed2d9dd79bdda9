"""The `folded` view: stacks as folded lines, `comm;outermost;…;innermost COUNT`, the
input of FlameGraph's flamegraph.pl, inferno and speedscope.

- An aggregation keyed by a stack (`by: [comm, ustack]`) gives one line per row: the
  row's `comm` key when it has one, then the frames of its stacks (a kstack's frames
  above a ustack's: the kernel runs on top of the user code that called it), and the
  row's value (count; sum for `sum`; the number of events for the others). Each
  snapshot is written when it is read (an `every:` output, once per interval).
- Print records with stacks count one each, per distinct stack, written at the end.
- Anything without a stack writes nothing (tables, and losses: the runtime reports
  those on stderr).
`FlameGraphTap` wraps another view: it passes everything on and keeps the folded lines,
rendered as an SVG flame graph (planrunner/stacks/flamegraph.py) into a file at close.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from typing import TextIO

from planrunner.output.base import View, ViewBase, ViewWrapper
from planrunner.records import AggRow, AggSnapshot, PrintSchema, Stack, TableSnapshot
from planrunner.stacks.formats import folded_line
from planrunner.stacks.frame import Frame


def _frames(values: Iterable[object]) -> tuple[Frame, ...] | None:
    """Kernel frames then user frames (innermost first); None when there is no stack."""
    stacks = [v for v in values if isinstance(v, Stack)]
    if not stacks:
        return None
    kernel = [f for s in stacks if s.kind == "kernel" for f in s.frames]
    user = [f for s in stacks if s.kind != "kernel" for f in s.frames]
    return (*kernel, *user)


def _value(row: AggRow, kind: str) -> int:
    if kind == "sum" and row.sum is not None:
        return row.sum
    return row.total() if row.count is not None or row.buckets is not None else 1


def snapshot_lines(snap: AggSnapshot) -> list[str]:
    """The folded lines of one aggregation snapshot (empty without a stack key)."""
    totals: Counter[str] = Counter()
    for row in snap.rows:
        key = dict(row.key)
        frames = _frames(key.values())
        if frames is None:
            continue
        comm = key.get("comm")
        line = folded_line(comm if isinstance(comm, str) else "", frames, 0)
        totals[line.rsplit(" ", 1)[0]] += _value(row, snap.kind)
    return [f"{k} {v}" for k, v in sorted(totals.items()) if v > 0]


class FoldedView(ViewBase):
    def __init__(self, stream: TextIO, schemas: Sequence[PrintSchema]) -> None:
        super().__init__(stream, schemas)
        self.counts: Counter[str] = Counter()
        self.lines: list[str] = []  # everything written, for FlameGraphTap

    def records(self, batch: Sequence[dict[str, object]]) -> None:
        for rec in batch:
            frames = _frames(rec.values())
            if frames is not None:
                comm = rec.get("comm")
                key = folded_line(comm if isinstance(comm, str) else "", frames, 0)
                self.counts[key.rsplit(" ", 1)[0]] += 1

    def aggregate(self, snap: AggSnapshot) -> None:
        lines = snapshot_lines(snap)
        self.lines += lines
        if lines:
            self.stream.write("".join(line + "\n" for line in lines))

    def table(self, snap: TableSnapshot) -> None:
        pass  # a table joins counts by key, never by a stack

    def lost(self, count: int, reason: str) -> None:
        pass

    def close(self) -> None:
        if not self.closed and self.counts:
            lines = [f"{k} {v}" for k, v in sorted(self.counts.items())]
            self.lines += lines
            self.stream.write("".join(line + "\n" for line in lines))
        super().close()


class FlameGraphTap(ViewWrapper):
    """A view that passes everything to `inner` and writes a flame graph of the stacks
    it saw to `path` at close (nothing when there were none)."""

    def __init__(self, inner: View, path: str, title: str) -> None:
        import io

        super().__init__(inner)
        self.path, self.title = path, title
        self.folded = FoldedView(io.StringIO(), ())
        self.written = False

    def record(self, rec: dict[str, object]) -> None:
        self.records((rec,))

    def records(self, batch: Sequence[dict[str, object]]) -> None:
        self.inner.records(batch)
        self.folded.records(batch)

    def aggregate(self, snap: AggSnapshot) -> None:
        self.inner.aggregate(snap)
        self.folded.aggregate(snap)

    def close(self) -> None:
        self.inner.close()
        if self.written:
            return
        self.written = True
        self.folded.close()
        if self.folded.lines:
            from planrunner.stacks.flamegraph import render_flamegraph

            with open(self.path, "w", encoding="utf-8") as fh:
                fh.write(render_flamegraph(self.folded.lines, self.title))
