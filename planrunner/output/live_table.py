"""The live terminal table of the `text` view: one table redrawn in place each interval
(like top or bcc's ustat), when stdout is a terminal.

Drawn with Rich (`rich.live.Live`, Debian's python3-rich) on the alternate screen, like
top: it measures the terminal, redraws in place and fits the columns to the width (the
command line takes the width the others leave, cut with an ellipsis); at the end the
last table is printed on the normal screen, so it stays. No thread: `auto_refresh=False`,
the table is redrawn when a snapshot arrives. Every cell is a `Text`, never markup, so
a command line with ``[brackets]`` or escape sequences shows as it is (control
characters escaped, see printable.py). Other text (aggregations that are not tables;
`run` uses the live table only for plans without print outputs) is held while the table
is shown and printed after it at the end: the alternate screen would lose it; so is
what the session writes to stderr meanwhile (HeldStream).

Imported only when the live table is used.
"""

from __future__ import annotations

import io
from typing import TextIO

from rich import box
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from planrunner.output.clock import Clock
from planrunner.output.table_text import column_heads, left_aligned, table_cells, table_title
from planrunner.records import TableSnapshot


class HeldStream(io.TextIOBase):
    """The session's stderr while a live table is shown: what is written then (a report
    at the end of the run, a late library's note) would land on the alternate screen
    and vanish with it, so it is held and written after the last table."""

    def __init__(self, stream: TextIO) -> None:
        super().__init__()
        self.stream = stream
        self.holding = False
        self.held: list[str] = []

    def write(self, text: str) -> int:
        if self.holding:
            self.held.append(text)
        else:
            self.stream.write(text)
        return len(text)

    def flush(self) -> None:
        if not self.holding:
            self.stream.flush()

    def release(self) -> None:
        self.holding = False
        self.stream.write("".join(self.held))
        self.held.clear()
        self.stream.flush()


class LiveTables:
    def __init__(self, stream: TextIO, clock: Clock, stderr: HeldStream | None = None
                 ) -> None:
        self.stream = stream
        self.clock = clock
        self.stderr = stderr
        self.console = Console(file=stream, highlight=False, soft_wrap=False)
        self.live: Live | None = None
        self.shown: dict[str, TableSnapshot] = {}
        self.held: list[str] = []

    def show(self, snap: TableSnapshot) -> None:
        self.shown[snap.output] = snap
        view = self._view()
        if self.live is None:
            # The alternate screen, like top: redraws leave no trace in the scrollback
            # and the tty's echo of ^C cannot shift the region; close() prints the
            # last table on the normal screen.
            self.live = Live(view, console=self.console, auto_refresh=False, screen=True,
                             redirect_stdout=False, redirect_stderr=False,
                             vertical_overflow="crop")
            self.live.start(refresh=True)
            if self.stderr is not None:
                self.stderr.holding = True
        else:
            self.live.update(view, refresh=True)

    def write(self, text: str) -> None:
        """Text written as it is before the table is shown, then held until close()."""
        if self.live is None and not self.shown:
            self.stream.write(text)
        else:
            self.held.append(text)

    def close(self) -> None:
        try:
            if self.live is not None:
                self.live.stop()
                self.live = None
                self.console.print(self._view(final=True))
            self.stream.write("".join(self.held))
            self.stream.flush()
            if self.stderr is not None:
                self.stderr.release()
        except OSError:  # the terminal went away (SIGHUP): nothing left to show it on
            pass
        self.held.clear()

    def _view(self, final: bool = False) -> Group:
        return Group(*(self._table(s, final) for s in self.shown.values()))

    def _table(self, snap: TableSnapshot, final: bool = False) -> Table:
        note = "(no events in this interval)" if not snap.rows else ""
        caption = note if final else f"{note} Ctrl-C to end".strip()
        table = Table(title=Text(table_title(snap, self.clock)), title_justify="left",
                      box=box.SIMPLE_HEAD, caption=Text(caption) if caption else None,
                      caption_justify="left", expand=True)
        nleft = left_aligned(snap)
        for i, head in enumerate(column_heads(snap)):
            is_cmd = snap.has_cmdline and i == nleft - 1
            table.add_column(head, justify="left" if i < nleft else "right",
                             no_wrap=True, overflow="ellipsis",
                             ratio=1 if is_cmd else None, min_width=12 if is_cmd else None)
        for cells in table_cells(snap, cmdline_width=None):
            table.add_row(*(Text(c) for c in cells))
        return table
