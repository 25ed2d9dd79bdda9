"""Output views: how print records and aggregation snapshots reach the user.

`VIEWS` maps a `--format` name to the module and class of its view;
`make_view(name, stream, schemas)` imports that one module alone (a run imports only the
view it prints with: json_lines.py pulls in json) and builds the view. Every view
implements `planrunner.output.base.View` and writes only to the stream it is given. One
module per view: text.py (+ text_agg.py, histogram.py, clock.py, template.py),
json_lines.py, csv_table.py, folded.py (stacks only; also the flame graph tap of
`run --flamegraph`). `-f pprof` writes files, not a stream: pprof.py, wired by
commands/run.py.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from typing import TYPE_CHECKING, TextIO

from planrunner.errors import UsageError
from planrunner.output.base import View

if TYPE_CHECKING:  # `run` imports this package before attaching: records.py after
    from planrunner.records import PrintSchema

# --format name -> (module under planrunner.output, view class)
VIEWS: dict[str, tuple[str, str]] = {"text": ("text", "TextView"),
                                     "json": ("json_lines", "JsonView"),
                                     "csv": ("csv_table", "CsvView"),
                                     "folded": ("folded", "FoldedView")}

__all__ = ["VIEWS", "View", "make_view", "view_class"]


def make_view(name: str, stream: TextIO, schemas: Sequence[PrintSchema],
              **options: object) -> View:
    """The view called `name` writing to `stream`. `options` go to the view's constructor
    (the text view takes `tz`, default local time). A `format` template that
    `template.check_format` rejects raises ValueError: the plan validator reports those
    first."""
    module, cls = view_class(name)
    view: View = getattr(importlib.import_module(f"planrunner.output.{module}"), cls)(
        stream, schemas, **options)
    return view


def view_class(name: str) -> tuple[str, str]:
    """(module under planrunner.output, class) of the view called `name`; UsageError
    for a name that is none."""
    where = VIEWS.get(name)
    if where is None:
        from planrunner.diagnostics import did_you_mean

        guess = did_you_mean(name, list(VIEWS))
        hints = (f"did you mean '{guess}'?",) if guess else ()
        raise UsageError(f"unknown output format '{name}' (choose from: {', '.join(VIEWS)})",
                         hints=hints)
    return where
