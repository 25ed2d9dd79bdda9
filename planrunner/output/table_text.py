"""`table:` snapshots as text (part of the `text` view), and the cells the live
terminal table (live_table.py) lays out the same way.

A plain interval (stdout not a terminal, or no live table):

    [12:00:01] stat: calls/s, objects/s by pid (sorted by calls/s, 1.00 s)
    pid   cmdline                      calls/s  objects/s
    4242  ruby3.1 work.rb               1520.3      830.0

Key columns first (left-aligned), then ``cmdline`` when a key is `pid` (cut to
CMDLINE_WIDTH, ``?`` when it could not be read), then a column per joined output
(right-aligned; ``NAME/s`` with one decimal for rates, integers otherwise). Rows in the
order given (sorted, cut to `top`), ``(no events)`` when there are none.
"""

from __future__ import annotations

from planrunner.output.clock import Clock
from planrunner.output.text_agg import cell
from planrunner.records import TableSnapshot

CMDLINE_WIDTH = 48


def column_heads(snap: TableSnapshot) -> list[str]:
    unit = "/s" if snap.rate else ""
    heads = list(snap.key_fields)
    if snap.has_cmdline:
        heads.append("cmdline")
    return heads + [f"{c}{unit}" for c in snap.columns]


def value_text(value: int | float, rate: bool) -> str:
    return f"{value:.1f}" if rate else str(value)


def table_cells(snap: TableSnapshot, cmdline_width: int | None = CMDLINE_WIDTH
                ) -> list[list[str]]:
    """Each row's cells as text, in column_heads order (`cmdline_width` None: uncut)."""
    rows = []
    for r in snap.rows:
        cells = [cell(v) for _, v in r.key]
        if snap.has_cmdline:
            cells.append(cut(cell(r.cmdline) if r.cmdline is not None else "?",
                             cmdline_width))
        rows.append(cells + [value_text(v, snap.rate) for v in r.values])
    return rows


def cut(text: str, width: int | None) -> str:
    if width is None or len(text) <= width:
        return text
    return text[: width - 1] + "…"


def left_aligned(snap: TableSnapshot) -> int:
    """How many leading columns are left-aligned (keys and the command line)."""
    return len(snap.key_fields) + (1 if snap.has_cmdline else 0)


def table_title(snap: TableSnapshot, clock: Clock) -> str:
    unit = "/s" if snap.rate else ""
    cols = ", ".join(f"{c}{unit}" for c in snap.columns)
    by = f" by {', '.join(snap.key_fields)}" if snap.key_fields else ""
    span = snap.interval_end - snap.interval_start
    return (f"[{clock.unix_time(snap.interval_end)}] {snap.output}: {cols}{by} "
            f"(sorted by {snap.sort}{unit}, {span:.2f} s)")


def table_text(snap: TableSnapshot, clock: Clock) -> str:
    lines = [table_title(snap, clock)]
    if snap.rows:
        heads = column_heads(snap)
        rows = table_cells(snap)
        widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(heads)]
        nleft = left_aligned(snap)

        def line(cells: list[str]) -> str:
            return " ".join(f"{c:<{w}}" if i < nleft else f"{c:>{w}}"
                            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
                            ).rstrip()

        lines += [line(heads), *map(line, rows)]
    else:
        lines.append("(no events)")
    if snap.dropped:
        lines.append(f"{snap.dropped} keys dropped (map full; raise settings.map_size)")
    return "\n".join(lines) + "\n\n"
