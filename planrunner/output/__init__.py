"""Output views: how print records and aggregation snapshots reach the user.

`VIEWS` maps a `--format` name to its view class; `make_view(name, stream, schemas)`
builds one. Every view implements `planrunner.output.base.View` and writes only to the
stream it is given. One module per view: text.py (+ text_agg.py, histogram.py,
clock.py, template.py), json_lines.py, csv_table.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TextIO

from planrunner.diagnostics import did_you_mean
from planrunner.errors import UsageError
from planrunner.output.base import View
from planrunner.output.csv_table import CsvView
from planrunner.output.json_lines import JsonView
from planrunner.output.template import check_format
from planrunner.output.text import TextView
from planrunner.records import PrintSchema

VIEWS: dict[str, type] = {"text": TextView, "json": JsonView, "csv": CsvView}

__all__ = ["VIEWS", "View", "check_format", "make_view"]


def make_view(name: str, stream: TextIO, schemas: Sequence[PrintSchema],
              **options: object) -> View:
    """The view called `name` writing to `stream`. `options` go to the view's constructor
    (the text view takes `tz`, default local time). A `format` template that
    `check_format` rejects raises ValueError: the plan validator reports those first."""
    cls = VIEWS.get(name)
    if cls is None:
        guess = did_you_mean(name, list(VIEWS))
        hints = (f"did you mean '{guess}'?",) if guess else ()
        raise UsageError(f"unknown output format '{name}' (choose from: {', '.join(VIEWS)})",
                         hints=hints)
    view: View = cls(stream, schemas, **options)
    return view
