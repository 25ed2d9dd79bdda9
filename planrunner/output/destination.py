"""Where `run`'s output goes: `open_view(format, path, ...)` -> a View, which closes
the files it opened when it is closed.

One stream holds one CSV table, so `--format csv` with several outputs writes one file
per output: `-o DIR/` (an existing directory, or a path ending in '/') gives
`DIR/OUTPUT.csv`, `-o BASE.csv` (or `-o BASE`) gives `BASE.OUTPUT.csv`, and losses go
to `BASE.lost.csv` if there are any. To stdout, CSV with several outputs is refused
(a usage error) instead of a second header row in the middle of the stream. With one
output, `-o FILE.csv` is that output's file (losses in `FILE.lost.csv`); on stdout the
losses are left to stderr, where the session reports them anyway.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, BinaryIO, TextIO, TypeVar

from planrunner.errors import PlanError, UsageError
from planrunner.output.base import DeferredView, View, ViewWrapper

if TYPE_CHECKING:  # `run` imports this module before attaching, the views after
    from planrunner.output.csv_table import CsvView
    from planrunner.records import AggSnapshot, PrintSchema, TableSnapshot

_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")
_F = TypeVar("_F", TextIO, BinaryIO)


def open_view(fmt: str, path: str | None, stdout: TextIO,
              schemas: Sequence[PrintSchema] | Callable[[], Sequence[PrintSchema]],
              outputs: Sequence[str], stderr: TextIO | None = None,
              **options: object) -> View:
    """The view for `--format fmt` and `-o path` (None or '-': stdout); `outputs` are
    the plan's output names in plan order. Given `schemas` as a function that returns
    them, a view on one stream (all but CSV files) is built on first use (DeferredView),
    once what can fail or write here is done: the format checked, the file opened."""
    from planrunner.output import make_view, view_class

    to_stdout = path in (None, "-")
    if fmt == "csv" and len(outputs) > 1:
        if to_stdout:
            raise UsageError(
                f"--format csv with {len(outputs)} outputs needs one file per output, "
                "not stdout (one CSV stream holds one table)",
                hints=("-o DIR/ writes DIR/OUTPUT.csv; -o BASE.csv writes BASE.OUTPUT.csv "
                       f"(outputs: {', '.join(outputs)})",
                       "or --format json: one stream, each line names its output"))
        files = csv_paths(str(path), outputs)
        view = CsvFilesView(str(path), files, _given(schemas))
        if stderr is not None:
            stderr.write(f"planrunner: CSV, one file per output: {', '.join(files.values())}\n")
        return view
    if fmt == "csv" and not to_stdout:  # one output: -o FILE.csv is its file
        files = csv_paths(str(path), outputs) if _is_dir(str(path)) else \
            {o: str(path) for o in outputs}
        return CsvFilesView(str(path), files, _given(schemas))
    stream = stdout if to_stdout else _open(str(path))
    view_class(fmt)

    def build() -> View:
        view = make_view(fmt, stream, _given(schemas), **options)
        return _TableOnly(view) if fmt == "csv" else view

    return _Closing(DeferredView(build) if callable(schemas) else build(),
                    None if to_stdout else stream)


def _given(schemas: Sequence[PrintSchema] | Callable[[], Sequence[PrintSchema]]
           ) -> Sequence[PrintSchema]:
    return schemas() if callable(schemas) else schemas


def _is_dir(path: str) -> bool:
    return path.endswith("/") or os.path.isdir(path)


def csv_paths(path: str, outputs: Sequence[str]) -> dict[str, str]:
    """Output name -> file, for `-o DIR/` or `-o BASE[.csv]`."""
    if _is_dir(path):
        return {o: os.path.join(path, f"{safe_name(o)}.csv") for o in outputs}
    base = path[:-4] if path.endswith(".csv") else path
    return {o: f"{base}.{safe_name(o)}.csv" for o in outputs}


def safe_name(name: str) -> str:
    """An output's name as part of a file name (CSV, pprof: one file per output)."""
    return _UNSAFE.sub("_", name) or "_"


def _writable(path: str, opener: Callable[[str], _F]) -> _F:
    """`opener(path)` once its directory exists; a PlanError naming the file if not."""
    parent = os.path.dirname(path)
    try:
        if parent:
            os.makedirs(parent, exist_ok=True)
        return opener(path)
    except OSError as exc:
        raise PlanError(f"cannot write {path}: {exc.strerror or exc}") from None


def _open(path: str) -> TextIO:
    return _writable(path, lambda p: open(p, "w", encoding="utf-8", newline=""))


def open_binary(path: str) -> BinaryIO:
    return _writable(path, lambda p: open(p, "wb"))


class _Closing(ViewWrapper):
    """A view that also closes the file it writes to."""

    def __init__(self, inner: View, stream: TextIO | None) -> None:
        super().__init__(inner)
        self.stream = stream

    def close(self) -> None:
        self.inner.close()
        if self.stream is not None and not self.stream.closed:
            self.stream.close()


class _TableOnly(_Closing):
    """A single CSV stream on stdout: its one table only, never a `lost` table after it
    (the session reports losses and full maps on stderr)."""

    def __init__(self, inner: View) -> None:
        super().__init__(inner, None)

    def aggregate(self, snap: AggSnapshot) -> None:
        self.inner.aggregate(replace(snap, dropped=0))

    def table(self, snap: TableSnapshot) -> None:
        self.inner.table(replace(snap, dropped=0))

    def lost(self, count: int, reason: str) -> None:
        pass


class CsvFilesView:
    """One CsvView per output, each in its own file (opened up front, so an output
    that saw nothing still leaves its file); losses, and keys a full aggregation map
    dropped, in a file of their own (`lost`), opened when there are any."""

    def __init__(self, path: str, files: dict[str, str],
                 schemas: Sequence[PrintSchema]) -> None:
        self.path = path
        self.streams: dict[str, TextIO] = {}
        self.views: dict[str, CsvView] = {}
        by_output = {s.output: s for s in schemas}
        for name, file in files.items():
            self.streams[name] = _open(file)
            schema = [by_output[name]] if name in by_output else []
            self.views[name] = _csv_view(self.streams[name], schema)
        self.lost_view: CsvView | None = None

    def _view(self, output: str) -> CsvView:
        view = self.views.get(output)
        if view is None:  # an output not announced: a file of its own all the same
            self.streams[output] = _open(csv_paths(self.path, [output])[output])
            view = self.views[output] = _csv_view(self.streams[output], [])
        return view

    def record(self, rec: dict[str, object]) -> None:
        self.records((rec,))

    def records(self, batch: Sequence[dict[str, object]]) -> None:
        groups: dict[str, list[dict[str, object]]] = {}
        for rec in batch:
            groups.setdefault(str(rec["output"]), []).append(rec)
        for output, recs in groups.items():
            self._view(output).records(recs)

    def aggregate(self, snap: AggSnapshot) -> None:
        self._view(snap.output).aggregate(replace(snap, dropped=0))
        if snap.dropped:
            self._lost().lost(snap.dropped, "map full", snap.output)

    def table(self, snap: TableSnapshot) -> None:
        self._view(snap.output).table(replace(snap, dropped=0))
        if snap.dropped:
            self._lost().lost(snap.dropped, "map full", snap.output)

    def lost(self, count: int, reason: str) -> None:
        self._lost().lost(count, reason)

    def _lost(self) -> CsvView:
        if self.lost_view is None:
            name = "lost" if "lost" not in self.views else "lost_events"
            self.streams["\0lost"] = _open(csv_paths(self.path, [name])[name])
            self.lost_view = _csv_view(self.streams["\0lost"], [])
        return self.lost_view

    def flush(self) -> None:
        for stream in self.streams.values():
            stream.flush()

    def close(self) -> None:
        for view in self.views.values():
            view.close()
        if self.lost_view is not None:
            self.lost_view.close()
        for stream in self.streams.values():
            stream.close()


def _csv_view(stream: TextIO, schemas: Sequence[PrintSchema]) -> CsvView:
    from planrunner.output.csv_table import CsvView  # CSV runs only

    return CsvView(stream, schemas)
