"""The Plan model: what `plan/build.py` produces from a validated plan file.

Frozen data, no logic. Every node keeps the Span of the plan text it came from.
Expressions are parsed (expr.ast) but not yet type-checked: their types depend on
the resolved binaries (operand widths), so checking happens at resolve time.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from planrunner.diagnostics import Span
from planrunner.probe_kinds import KindName

if TYPE_CHECKING:
    from planrunner.expr.ast import Expr

ParamType = Literal["int", "number", "string", "duration", "bool"]
SpanScope = Literal["process", "global"]
ProbeKind = KindName  # probe_kinds.py: what each kind is
UnwindMode = Literal["auto", "fp", "dwarf"]
OutputKind = Literal["print", "count", "sum", "min", "max", "avg", "hist", "lhist"]
ValueType = Literal["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
                    "pointer", "bool", "string"]


@dataclass(frozen=True, slots=True)
class ParamSpec:
    """A declared plan param: its type, default (converted) and help."""

    name: str
    type: ParamType
    default: object | None  # already converted: int, float, str, bool, duration as int ns
    required: bool
    help: str
    span: Span


@dataclass(frozen=True, slots=True)
class TargetSpec:
    """A target binary of the plan, after ${param} substitution."""

    name: str
    binary: str  # after ${param} substitution; path, name on PATH, or library short name
    build_id: str | None
    span: Span  # the `binary:` value
    optional: bool = False  # not found: its probes are left out with a warning


@dataclass(frozen=True, slots=True)
class ArgSpec:
    """A declared probe argument: position, name, type and string size."""

    index: int  # 1-based position (arg1 is index 1)
    name: str | None  # None: only reachable as argN
    type: ValueType | None  # None: derived from the operand (usdt) or int64 (uprobe)
    size: int | None  # string capacity (content bytes), None: settings.string_size
    length: Expr | None  # string read of exactly this many bytes (not NUL-terminated)
    span: Span
    type_span: Span | None = None  # the `type:` value, when declared


@dataclass(frozen=True, slots=True)
class StackSpec:
    """`stack:` of a plan or a probe: how `ustack` is captured and unwound."""

    unwind: UnwindMode = "auto"
    bytes: int = 16384  # dwarf/auto: user stack copied per event
    # dwarf/auto: CPython frames read in BPF at the event, merged into the native frames
    python: bool = True
    python_frames: int = 32  # at most this many Python frames per stack


@dataclass(frozen=True, slots=True)
class ProbeSpec:
    """One entry of `probes:`: its kind, where it attaches, args and condition."""

    name: str
    kind: ProbeKind
    span: Span  # the probe's key in `probes:`
    spec_span: Span  # the kind's value, e.g. the "pg:postgresql:query__start" scalar
    target: str | None = None  # target name (usdt, uprobe, uretprobe)
    provider: str | None = None  # usdt; None when omitted (must then be unique)
    probe: str | None = None  # usdt probe name
    symbol: str | None = None  # uprobe/uretprobe symbol (mangled or demangled)
    offset: int = 0  # uprobe SYMBOL+OFFSET
    category: str | None = None  # tracepoint
    event: str | None = None  # tracepoint
    begin: str | None = None  # span: probe names
    end: str | None = None  # the first end when there are several (`ends`)
    ends: tuple[str, ...] = ()  # span: `end: [free, realloc]`, any of which ends it
    key: Expr | None = None  # span key (the begin's when key_end is set), None = tid
    key_end: Expr | None = None  # span: the end's own key (`key: {begin: .., end: ..}`)
    # span: where `begin:` and `end:` are written, for errors about one side
    side_spans: tuple[Span, ...] | None = None  # begin's, then each end's
    span_scope: SpanScope = "process"  # span: pair only within a process, or "global"
    nested: bool = False  # span: a stack of open begins per key (calls nest)
    # nested span: values an end must share with the begin it closes (`match:`)
    match: tuple[Expr, ...] = ()
    args: tuple[ArgSpec, ...] = ()
    retval: ArgSpec | None = None  # uretprobe
    where: Expr | None = None
    hz: int | None = None  # profile: samples per second per CPU
    period_ns: int | None = None  # interval
    stack: StackSpec | None = None  # None: the plan's
    # tracepoint: fires in every process, whatever --pid/-c/--comm/--cgroup narrow
    all_processes: bool = False

    @property
    def end_names(self) -> tuple[str, ...]:
        """A span's ends: the events any of which closes it."""
        return self.ends or ((self.end,) if self.end is not None else ())

    @property
    def is_set(self) -> bool:
        """A probe set: its symbol, USDT provider or name, or tracepoint category or
        event is a shell glob (`libc:str*`), matched when resolved (resolve/sets.py)."""
        parts = (self.symbol, self.provider, self.probe, self.category, self.event)
        return any(is_glob(p) for p in parts if p)


def is_glob(text: str) -> bool:
    """Whether `text` is a shell glob (fnmatch's `*`, `?`, `[...]`), not a plain name.
    A C++ `operator[]` is a name: a glob's `[` opens a class holding a character."""
    return "*" in text or "?" in text or re.search(r"\[[^\]]", text) is not None \
        and "operator[]" not in text


@dataclass(frozen=True, slots=True)
class FieldSpec:
    """One field of an output: its record key and expression."""

    key: str  # the record key (`begin.query` -> `query`, `latency` -> `latency_ns`)
    expr: Expr
    span: Span


@dataclass(frozen=True, slots=True)
class OutputSpec:
    """One entry of `outputs:`: print or an aggregation of one probe."""

    index: int
    name: str  # `name:`, else its probe's name (build_outputs._unnamed)
    kind: OutputKind
    probe: str
    span: Span  # the output entry
    probe_span: Span  # the `print: X` / `count: X` value
    fields: tuple[FieldSpec, ...] = ()  # print
    by: tuple[FieldSpec, ...] = ()  # aggregations
    value: Expr | None = None  # sum/min/max/avg/hist/lhist
    where: Expr | None = None
    every_ns: int | None = None
    top: int | None = None
    # count/sum of a span: its begins still open, added at the begin and taken off at
    # the end in the kernel, never reset (`open: true`)
    open: bool = False
    format: str | None = None  # text template for print
    lhist_min: int | None = None
    lhist_max: int | None = None
    lhist_step: int | None = None
    # print: `otlp: {kind, attributes}` for `run --otlp` (planrunner/otlp/): the span
    # kind ("" = internal) and extra attributes (name, source: a field key,
    # `first_word(KEY)` or a literal)
    otlp_kind: str = ""
    otlp_attributes: tuple[tuple[str, str], ...] = ()

    @property
    def by_keys(self) -> tuple[str, ...]:
        return tuple(f.key for f in self.by)


@dataclass(frozen=True, slots=True)
class TableColumn:
    """One column of a table: the count/sum outputs it adds (one, or one per runtime)."""

    name: str
    outputs: tuple[str, ...]  # count/sum outputs whose values the column adds
    span: Span


@dataclass(frozen=True, slots=True)
class TableSpec:
    """`table: [a, {b: [c, d]}]`: count/sum outputs sharing their `by` keys, joined into
    one row per key, a column per output (or per group of outputs it adds). The outputs
    it joins print only through it."""

    index: int
    name: str  # `name:`, else `table` (build_outputs._unnamed)
    columns: tuple[TableColumn, ...]  # in the table's order
    sort: str  # the column rows are sorted by (largest first); default the first
    rate: bool  # per-second rates over the interval instead of the interval's totals
    key_fields: tuple[str, ...]  # the shared `by` keys
    span: Span  # the output entry
    table_span: Span  # the `table: [...]` value
    every_ns: int | None = None
    top: int | None = None


@dataclass(frozen=True, slots=True)
class Settings:
    """Plan-wide limits (`settings:`)."""

    string_size: int = 128
    map_size: int = 10240
    ringbuf_pages: int | None = None  # None: sized from the print records (render/program.py)
    span_depth: int = 64
    max_sites: int = 1000


@dataclass(frozen=True, slots=True)
class Plan:
    """A plan file checked and built: params bound, targets, probes and outputs."""

    path: str
    source_text: str
    name: str
    description: str
    params: tuple[ParamSpec, ...]
    # bound: defaults overridden by --set, converted; read-only (a MappingProxyType)
    param_values: Mapping[str, object]
    targets: tuple[TargetSpec, ...]
    probes: tuple[ProbeSpec, ...]
    outputs: tuple[OutputSpec, ...]
    settings: Settings = field(default_factory=Settings)
    stack: StackSpec = field(default_factory=StackSpec)
    # params expanded into the plan's text by `${name}` (their values are the program's
    # shape; the others are used by name in expressions, and may be data: resolve/scope.py)
    substituted_params: frozenset[str] = frozenset()

    def stack_of(self, probe: ProbeSpec) -> StackSpec:
        """The stack capture a probe uses: its own `stack:`, else the plan's."""
        return probe.stack or self.stack
    tables: tuple[TableSpec, ...] = ()  # `table:` entries of `outputs:` (not in `outputs`)

    def joined(self) -> dict[str, str]:
        """Output name -> the table that joins it."""
        return {o: t.name for t in self.tables for c in t.columns for o in c.outputs}

    def probe(self, name: str) -> ProbeSpec:
        return next(p for p in self.probes if p.name == name)

    def target(self, name: str) -> TargetSpec:
        return next(t for t in self.targets if t.name == name)
