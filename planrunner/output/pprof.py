"""The `pprof` output: each count output keyed by a stack becomes a gzipped
`profile.proto` file, as `go tool pprof`, Parca, Pyroscope and speedscope read it.

- commands/pprof_check.py `check_pprof(program, path, outputs)` runs before anything
  is attached: it refuses `-f pprof` to stdout (binary, `check_destination`), with
  print outputs, tables, and aggregations that are not `count` or have no ustack/kstack
  in `by` (a UsageError naming the output), and gives each output's file
  (`pprof_paths`, as CSV does: one output and `-o FILE` is that file; `-o DIR/` gives
  `DIR/OUTPUT.pb.gz`, `-o BASE.pb.gz` `BASE.OUTPUT.pb.gz`).
- `PprofFilesView` sums each output's snapshots (disjoint intervals: an `every:`
  output's map is reset each interval) and writes its profile at close; an output
  that saw nothing still gets a file, with no samples.

Samples: one per row; values `samples/count` and, for a `profile:` probe,
`cpu/nanoseconds` (count x the sampling period, 1e9 / hz), with `period_type`
cpu/nanoseconds. Locations are the row's kernel frames then its user frames, leaf
first (the folded output's order, reversed: profile.proto wants the leaf at
location_id[0]); a known symbol is the location's Function, with the source file and
first line of its entry, and the location's line, from the module's DWARF line table
where it has one (stacks/lines.py; a line in another file than the function's, code
inlined from a header, is left at 0: Line has no file of its own); a CPython frame is
its function (qualified name, .py file) at its line, a location without a mapping. The
other key members (comm, pid, ...) become sample labels.
Mappings: a user frame's mapping is the one of its process the symbolizer found the
address in (start, limit, file offset, path, build-id: stacks/frame.py); a kernel
module's is made up from the addresses seen (lowest to highest + 1, file offset 0; the
build-id of the running kernel or module, from /sys), as is a user module's whose
mapping is unknown (no build-id), and `[jit]`'s, which holds every frame named from a
perf map (its function that name, no file); other addresses in no file are
locations without a mapping. A mapping claims `has_functions` when each of its
locations has a name, so that a reader can symbolize the others from the file itself.
"""

from __future__ import annotations

import gzip
import os
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from planrunner.errors import PlanError, UsageError
from planrunner.output.destination import open_binary, safe_name
from planrunner.output.pprof_proto import Label, ProfileBuilder
from planrunner.stacks.formats import KERNEL_HALF

if TYPE_CHECKING:  # `run` checks before attaching; records.py loads with the view
    from planrunner.records import AggRow, AggSnapshot, Stack, TableSnapshot
    from planrunner.stacks.frame import Frame
    from planrunner.stacks.lines import LineTable

SUFFIX = ".pb.gz"
LOST = "[stack lost]"
_KERNEL_IDS: dict[str, str] = {}  # "[kernel.kallsyms]" or "[ext4]" -> build-id ("" unknown)


@dataclass(frozen=True, slots=True)
class PprofOutput:
    """One output written as a profile: its file and sampling period (None: not a
    `profile:` probe, so no cpu/nanoseconds)."""

    name: str
    path: str
    period_ns: int | None


def check_destination(path: str | None) -> str:
    """`-o path` for -f pprof: a file or directory, never stdout (a UsageError)."""
    if path is None or path == "-":
        raise UsageError("-f pprof writes a binary file (gzipped profile.proto), not to "
                         "stdout",
                         hints=("add -o FILE.pb.gz (several outputs: -o DIR/ or "
                                "-o BASE.pb.gz gives BASE.OUTPUT.pb.gz), then "
                                "`go tool pprof -top FILE.pb.gz`",))
    return path


def pprof_paths(path: str, outputs: Sequence[str]) -> dict[str, str]:
    """Output name -> file, for `-o FILE` (one output), `-o DIR/` or `-o BASE[.pb.gz]`."""
    if path.endswith("/") or os.path.isdir(path):
        return {o: os.path.join(path, f"{safe_name(o)}{SUFFIX}") for o in outputs}
    if len(outputs) == 1:
        return {outputs[0]: path}
    base = path.removesuffix(SUFFIX).removesuffix(".pb").removesuffix(".gz")
    return {o: f"{base}.{safe_name(o)}{SUFFIX}" for o in outputs}


# A sample's identity: its labels and its frames, leaf first.
_Key = tuple[tuple[tuple[str, object], ...], tuple["Frame", ...]]


class PprofFilesView:
    """One profile per output, each in its own file (opened up front: an unwritable
    path fails before tracing), written at close."""

    def __init__(self, outputs: Sequence[PprofOutput], plan_name: str) -> None:
        self.outputs = {o.name: o for o in outputs}
        self.plan_name = plan_name
        self.streams = {o.name: open_binary(o.path) for o in outputs}
        self.counts: dict[str, Counter[_Key]] = {o.name: Counter() for o in outputs}
        self.span: dict[str, tuple[float | None, float]] = {}
        self.dropped: Counter[str] = Counter()
        self.closed = False

    def record(self, rec: dict[str, object]) -> None:
        pass  # check_pprof refused print outputs

    def records(self, batch: Sequence[dict[str, object]]) -> None:
        pass

    def table(self, snap: TableSnapshot) -> None:
        pass  # check_pprof refused tables

    def lost(self, count: int, reason: str) -> None:
        pass  # the session reports losses on stderr

    def aggregate(self, snap: AggSnapshot) -> None:
        counts = self.counts.get(snap.output)
        if counts is None:
            return
        for row in snap.rows:
            key = _sample_key(row)
            if key is not None and row.total() > 0:
                counts[key] += row.total()
        first = self.span.get(snap.output, (snap.interval_start, 0.0))[0]
        self.span[snap.output] = (first, snap.interval_end)
        self.dropped[snap.output] += snap.dropped

    def flush(self) -> None:
        pass  # written at close

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        failed: list[str] = []
        for name, stream in self.streams.items():
            try:
                stream.write(gzip.compress(self.encode(name), mtime=0))
                stream.close()
            except OSError as exc:  # disk full, a file system gone: said, not a traceback
                failed.append(f"{self.outputs[name].path}: {exc.strerror or exc}")
        if failed:
            raise PlanError(f"cannot write the profile {'; '.join(failed)}")

    def encode(self, name: str) -> bytes:
        """Output `name`'s profile.proto (not gzipped)."""
        output = self.outputs[name]
        start, end = self.span.get(name, (None, 0.0))
        return encode_profile(self.counts[name], output.period_ns, start, end,
                              [f"planrunner plan {self.plan_name}, output {name}"]
                              + ([f"{self.dropped[name]} updates lost: map full"]
                                 if self.dropped[name] else []))


def _sample_key(row: AggRow) -> _Key | None:
    from planrunner.records import Stack

    stacks = [v for _, v in row.key if isinstance(v, Stack)]
    if not stacks:
        return None
    kernel = [f for s in stacks if s.kind == "kernel" for f in _with_loss(s)]
    user = [f for s in stacks if s.kind != "kernel" for f in _with_loss(s)]
    labels = tuple((k, v) for k, v in row.key if not isinstance(v, Stack)
                   and not k.startswith("_"))
    return labels, (*kernel, *user)


def _with_loss(stack: Stack) -> tuple[Frame, ...]:
    """A stack's frames, and one named `[stack lost]` outermost when it could not be
    captured or unwound further (as the text view shows it): the sample does not
    pretend to be whole."""
    if not stack.lost:
        return stack.frames
    from planrunner.stacks.frame import Frame

    return (*stack.frames, Frame(0, LOST, 0, ""))


def encode_profile(counts: Counter[_Key], period_ns: int | None, start: float | None,
                   end: float, comments: Sequence[str] = ()) -> bytes:
    """The profile of `counts` ((labels, frames leaf first) -> count)."""
    types = [("samples", "count")] + ([("cpu", "nanoseconds")] if period_ns else [])
    prof = ProfileBuilder(types)
    if period_ns:
        prof.period_type = (prof.string("cpu"), prof.string("nanoseconds"))
        prof.period = period_ns
        prof.default_sample_type = prof.string("cpu")
    if start is not None:
        prof.time_nanos = int(start * 1e9)
        prof.duration_nanos = max(0, int((end - start) * 1e9))
    prof.comments = [prof.string(c) for c in comments]
    ordered = sorted(counts.items(), key=lambda kv: (-kv[1], repr(kv[0])))
    # Made-up ranges for modules without a known mapping (kernel modules): the
    # addresses seen in each.
    spans: dict[str, tuple[int, int]] = {}
    for (_, frames), _n in ordered:
        for f in frames:
            if f.mapping is None and f.module and f.kind in ("native", "jit"):
                lo, hi = spans.get(f.module, (f.address, f.address))
                spans[f.module] = (min(lo, f.address), max(hi, f.address))
    named: dict[int, bool] = {}  # mapping id -> each of its locations has a name
    lines = _Lines()
    for (labels, frames), n in ordered:
        # mapping ids in the order of the outermost user frames first: mapping[0]
        # should be the main binary (profile.proto), _start's
        mids = {id(f): _mapping_id(prof, f, spans) for f in reversed(frames)
                if f.address < KERNEL_HALF}
        locations = []
        first_user = next((i for i, f in enumerate(frames) if f.address < KERNEL_HALF), -1)
        for i, f in enumerate(frames):
            mid = mids[id(f)] if id(f) in mids else _mapping_id(prof, f, spans)
            fid, line = 0, 0
            if f.kind == "python":  # its function in its .py file, at its line
                fid = prof.function(f.symbol or "?", f.module, 0)
                line = f.line or 0
            elif f.symbol is not None:
                # the function's file and first line are its entry's; the pc at the
                # event is its own place, a return address's call the byte before it.
                # A line of another file (code inlined from a header) is left out:
                # Line has no file of its own, it would read as the function's file.
                entry = lines.find(f, f.address - f.offset)
                here = lines.find(f, f.address if i == first_user else f.address - 1)
                fid = prof.function(f.symbol, entry[0] if entry else "",
                                    entry[1] if entry else 0)
                if entry and here and here[0] == entry[0]:
                    line = here[1]
                    prof.lined_mappings.add(mid)
            locations.append(prof.location(mid, f.address, fid, line))
            if mid:
                named[mid] = named.get(mid, True) and fid != 0
        values = [n] + ([n * period_ns] if period_ns else [])
        prof.sample(locations, values, [_label(k, v) for k, v in labels])
    lines.close()
    prof.unnamed_mappings = {mid for mid, ok in named.items() if not ok}
    return prof.encode()


class _Lines:
    """Source lines of user frames (stacks/lines.py), one table per module file."""

    def __init__(self) -> None:
        self.tables: dict[tuple[str, str | None], LineTable] = {}

    def find(self, f: Frame, address: int) -> tuple[str, int] | None:
        m = f.mapping
        if m is None or m.bias is None:
            return None
        key = (m.source, m.build_id)
        table = self.tables.get(key)
        if table is None:
            from planrunner.stacks.lines import LineTable
            from planrunner.stacks.symbolize import same_file

            table = self.tables[key] = LineTable.load(m.source if same_file(m) else None,
                                                      m.build_id)
        return table.lookup(address - m.bias)

    def close(self) -> None:
        for table in self.tables.values():
            table.close()


def _mapping_id(prof: ProfileBuilder, f: Frame, spans: dict[str, tuple[int, int]]) -> int:
    m = f.mapping
    if m is not None:
        return prof.mapping(m.start, m.end, m.file_offset, m.path, m.build_id or "")
    if not f.module or f.kind not in ("native", "jit"):
        return 0  # an address in no file (anonymous memory, JIT code), a Python frame
    lo, hi = spans[f.module]
    build_id = ""
    if f.address >= KERNEL_HALF:  # the running kernel's or module's, from /sys
        from planrunner.stacks.kallsyms import kernel_build_id

        build_id = _KERNEL_IDS.get(f.module) or _KERNEL_IDS.setdefault(
            f.module, kernel_build_id(f.module))
    return prof.mapping(lo, hi + 1, 0, f.module, build_id)


def _label(key: str, value: object) -> Label:
    if isinstance(value, bool):
        return Label(key, num=int(value))
    if isinstance(value, int):
        return Label(key, num=value)
    return Label(key, str_value=str(value))
