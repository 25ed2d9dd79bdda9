"""The live terminal table of the `text` view: one table redrawn in place each interval
(like top or bcc's ustat), when stdout is a terminal.

Drawn with Rich (`rich.live.Live`, Debian's python3-rich): it measures the terminal,
redraws the region in place, fits the columns to the width (the command line is cut
with an ellipsis: it takes the width the other columns leave) and leaves the last table
on the screen when the run ends. No thread: `auto_refresh=False`, the table is redrawn
when a snapshot arrives. Every cell is a `Text`, never markup, so a command line with
``[brackets]`` or escape sequences shows as it is (control characters escaped, see
printable.py). Other output (print records, other aggregations) goes above the table,
through the same console, so it does not tear the region.

Imported only when the live table is used.
"""

from __future__ import annotations

from typing import TextIO

from rich import box
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from planrunner.output.clock import Clock
from planrunner.output.table_text import column_heads, left_aligned, table_cells, table_title
from planrunner.records import TableSnapshot


class LiveTables:
    def __init__(self, stream: TextIO, clock: Clock) -> None:
        self.stream = stream
        self.clock = clock
        self.console = Console(file=stream, highlight=False, soft_wrap=False)
        self.live: Live | None = None
        self.shown: dict[str, TableSnapshot] = {}

    def show(self, snap: TableSnapshot) -> None:
        self.shown[snap.output] = snap
        view = Group(*(self._table(s) for s in self.shown.values()))
        if self.live is None:
            self.live = Live(view, console=self.console, auto_refresh=False,
                             redirect_stdout=False, redirect_stderr=False,
                             vertical_overflow="crop")
            self.live.start(refresh=True)
        else:
            self.live.update(view, refresh=True)

    def write(self, text: str) -> None:
        """Text printed above the table (or plainly before it is shown)."""
        if self.live is None:
            self.stream.write(text)
        else:
            self.console.print(Text(text.rstrip("\n")))

    def close(self) -> None:
        if self.live is not None:
            self.live.stop()
            self.live = None

    def _table(self, snap: TableSnapshot) -> Table:
        table = Table(title=Text(table_title(snap, self.clock)), title_justify="left",
                      box=box.SIMPLE_HEAD, caption=Text("Ctrl-C to end"),
                      caption_justify="left", expand=True)
        nleft = left_aligned(snap)
        for i, head in enumerate(column_heads(snap)):
            is_cmd = snap.has_cmdline and i == nleft - 1
            table.add_column(head, justify="left" if i < nleft else "right",
                             no_wrap=True, overflow="ellipsis",
                             ratio=1 if is_cmd else None, min_width=12 if is_cmd else None)
        for cells in table_cells(snap, cmdline_width=None):
            table.add_row(*(Text(c) for c in cells))
        if not snap.rows:
            table.caption = Text("(no events in this interval) Ctrl-C to end")
        return table
