"""Aggregation snapshots as text (part of the `text` view).

Each snapshot starts with a title line: ``[HH:MM:SS] NAME: KIND of VALUE by KEYS``
(the time is the interval's end, local time like bcc's interval headers), then:

- count/sum/min/max/avg: one aligned table, the key fields (left-aligned) then one
  column per statistic the rows carry (right-aligned): ``count``, ``sum(arg2)``,
  ``avg(latency_ns)`` (avg to 2 decimals); rows in the order given (largest first).
- hist/lhist: per key, a line ``comm = postgres, pid = 42`` (none without `by`), then
  the bucket table of histogram.py, and a blank line.
- A stack key is no column: its frames follow the row (or the key line of a
  histogram), indented like a print record's (text.py).
- ``(no events)`` when the snapshot has no rows; a last line
  ``N keys dropped (map full; raise settings.map_size)`` when keys did not fit.
"""

from __future__ import annotations

from planrunner.output.clock import Clock
from planrunner.output.histogram import hist_lines, unit_title
from planrunner.output.stack_text import stack_text
from planrunner.printable import printable
from planrunner.records import STAT_KEYS, AggRow, AggSnapshot, Stack


def cell(value: object) -> str:
    """A key or statistic as the text view spells it."""
    if value is None:
        return "(null)"
    if value is True or value is False:
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:.2f}"
    if isinstance(value, str):
        return printable(value)  # a key string from the traced program
    return str(value)


def title(snap: AggSnapshot, clock: Clock) -> str:
    what = snap.kind if snap.kind == "count" else f"{snap.kind} of {snap.value_label}"
    by = f" by {', '.join(snap.key_fields)}" if snap.key_fields else ""
    return f"[{clock.unix_time(snap.interval_end)}] {snap.output}: {what}{by}"


def _stat_header(stat: str, snap: AggSnapshot) -> str:
    return stat if stat == "count" else f"{stat}({snap.value_label})"


def _stacks_of(row: AggRow) -> list[str]:
    return [t for _, v in row.key if isinstance(v, Stack) for t in stack_text(v)]


def stats_lines(snap: AggSnapshot) -> list[str]:
    stats = [s for s in STAT_KEYS if any(getattr(r, s) is not None for r in snap.rows)]
    stacked = {i for r in snap.rows for i, (_, v) in enumerate(r.key) if isinstance(v, Stack)}
    keys = [k for i, k in enumerate(snap.key_fields) if i not in stacked]
    heads = [*keys, *(_stat_header(s, snap) for s in stats)]
    table = [[cell(v) for i, (_, v) in enumerate(r.key) if i not in stacked]
             + [cell(getattr(r, s)) for s in stats] for r in snap.rows]
    widths = [max(len(h), *(len(row[i]) for row in table)) for i, h in enumerate(heads)]
    nkeys = len(keys)

    def line(cells: list[str]) -> str:
        parts = [f"{c:<{w}}" if i < nkeys else f"{c:>{w}}"
                 for i, (c, w) in enumerate(zip(cells, widths, strict=True))]
        return " ".join(parts).rstrip()

    out = [line(heads)]
    for row, cells in zip(snap.rows, table, strict=True):
        out.append(line(cells))
        out += _stacks_of(row)
    return out


def _key_line(row: AggRow) -> str:
    line = ", ".join(f"{name} = {cell(value)}" for name, value in row.key
                     if not isinstance(value, Stack))
    frames = _stacks_of(row)
    return "\n".join([line, *frames] if line else frames) if frames else line


def hist_block(snap: AggSnapshot) -> list[str]:
    head = unit_title(snap.value_label, snap.unit)
    lines: list[str] = []
    for row in snap.rows:
        if row.key:
            lines.append(_key_line(row))
        lines += hist_lines(row.buckets or (), head, linear=snap.kind == "lhist")
        lines.append("")
    return lines


def snapshot_text(snap: AggSnapshot, clock: Clock) -> str:
    lines = [title(snap, clock)]
    if not snap.rows:
        lines.append("(no events)")
    elif snap.kind in ("hist", "lhist"):
        lines += hist_block(snap)
    else:
        lines += stats_lines(snap)
    if snap.dropped:
        lines.append(f"{snap.dropped} keys dropped (map full; raise settings.map_size)")
    if lines[-1] != "":
        lines.append("")  # a blank line between snapshots
    return "\n".join(lines) + "\n"
