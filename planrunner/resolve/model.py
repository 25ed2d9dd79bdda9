"""ResolvedPlan: the Plan bound to real binaries and the kernel's tracepoints.

Pure data produced by resolve/ and consumed by render/. Expressions are type-checked
here (their types depend on operand widths), so render never sees an unchecked name.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from planrunner.diagnostics import Diagnostic, Span
from planrunner.expr.types import IntType, StackKind, Type
from planrunner.plan.model import OutputSpec, Plan, ProbeSpec, StackSpec
from planrunner.probe_kinds import SiteKindName, kind
from planrunner.usdt.model import ArgOperand

if TYPE_CHECKING:
    from planrunner.expr.typed import CaptureRef, TExpr


@dataclass(frozen=True, slots=True)
class BinaryRef:
    """A target binary as resolved: path, name shown, build id, machine."""

    path: str  # absolute path the uprobe is attached to (through /proc/PID/root with --pid)
    display: str  # the path as users know it
    build_id: str | None
    machine: str
    # the file resolve read (st_dev, st_ino, st_size, st_mtime_ns): attach checks that
    # the path still names it (runtime/attach.py); None when unknown
    identity: tuple[int, int, int, int] | None = None


@dataclass(frozen=True, slots=True)
class TracepointField:
    """One field of a tracepoint's format."""

    name: str
    offset: int
    size: int
    signed: bool
    is_string: bool  # __data_loc char[] or char[N]
    array_len: int  # char[N] arrays: N; __data_loc: 0


@dataclass(frozen=True, slots=True)
class ResolvedSite:
    """One place a probe fires: a uprobe/uretprobe at a file offset, a tracepoint, or a
    software cpu-clock perf event (profile: `sample_hz` on every CPU; interval:
    `sample_period_ns` on one CPU)."""

    kind: SiteKindName
    probe: str  # plan probe name
    index: int  # site number within the probe
    binary: BinaryRef | None = None
    pc: int = 0
    file_offset: int = 0
    ref_ctr_offset: int = 0  # semaphore file offset (kernel ref counter), 0 = none
    semaphore: int = 0  # semaphore vaddr (for the /proc/PID/mem fallback)
    args: tuple[ArgOperand | None, ...] = ()  # by argument index (0 = retval); None = unused
    category: str = ""
    event: str = ""
    sample_hz: int = 0
    sample_period_ns: int = 0
    func: str = ""  # the function, USDT probe or tracepoint event it fires in (`func`)


@dataclass(frozen=True, slots=True)
class ArgSlot:
    """A probe argument as the body sees it."""

    index: int  # 1-based
    name: str | None
    kind: Literal["int", "string", "lstring"]  # lstring: pointer + explicit length
    bits: int  # integer width (int) or 64 (pointers of strings)
    signed: bool
    size: int  # string capacity for string/lstring
    length_expr: TExpr | None = None  # lstring


@dataclass(frozen=True, slots=True)
class CheckedField:
    """An output field with its expression typed."""

    key: str
    expr: TExpr
    span: Span


@dataclass(frozen=True, slots=True)
class ResolvedOutput:
    """An output with its expressions typed."""

    spec: OutputSpec
    fields: tuple[CheckedField, ...]
    by: tuple[CheckedField, ...]
    value: TExpr | None
    where: TExpr | None

    @property
    def value_unit(self) -> str | None:
        """The unit of the aggregated value ("ns" for durations), from its type."""
        typ = self.value.type if self.value is not None else None
        return typ.unit if isinstance(typ, IntType) else None


@dataclass(frozen=True, slots=True)
class ResolvedProbe:
    """A probe with its sites, the arguments it reads and its typed condition."""

    spec: ProbeSpec
    sites: tuple[ResolvedSite, ...]  # empty for spans
    slots: tuple[ArgSlot, ...]  # args read for this probe (usdt/uprobe/tracepoint/retval)
    where: TExpr | None
    targets: tuple[BinaryRef, ...] = ()
    # span only: begin/end probe names and the checked key expression on each side
    key_begin: TExpr | None = None
    key_end: TExpr | None = None
    tracepoint_fields: tuple[TracepointField, ...] = ()
    # span only: the begin-side values its end reads, in order of first use
    captures: tuple[CaptureRef, ...] = ()
    # nested span only: its `match:` values, each checked on (begin side, end side)
    match: tuple[tuple[TExpr, TExpr], ...] = ()
    # Every argument the probe offers, for summaries: (name, type) in argument order.
    offered: tuple[tuple[str, str], ...] = ()
    notes: tuple[str, ...] = ()  # what resolution did that the plan does not say
    # The stacks the thunks capture (from the StackRefs of every expression that runs
    # in this probe), and how a user stack is captured.
    stacks: tuple[StackKind, ...] = ()
    stack: StackSpec = StackSpec()
    # uprobes: the function's calling convention, "c" or Go's "go"/"go-abi0"
    # (elf/golang.py); "" for the other kinds
    abi: str = ""

    @property
    def one_program(self) -> bool:
        """A uprobe set whose sites differ only in where they are (C functions: the
        same argument registers): one compiled thunk serves them all, each function
        told by its attach cookie (render/program.py makes one AttachSet)."""
        return self.spec.is_set and kind(self.spec.kind).function and self.abi == "c"

    @property
    def compiled_sites(self) -> int:
        """The BPF functions its sites compile to (what settings.max_sites bounds)."""
        return 1 if self.one_program else len(self.sites)


@dataclass(frozen=True, slots=True)
class ResolvedPlan:
    """A plan checked against the real binaries: what render needs."""

    plan: Plan
    probes: tuple[ResolvedProbe, ...]
    outputs: tuple[ResolvedOutput, ...]
    pid: int | None = None
    # located, in plan order: declared types that disagree with operands, probes that
    # will not fire unless the process is started a certain way (resolve/preflight.py)
    warnings: tuple[Diagnostic, ...] = ()
    # (probe, what its preflight warning says): said again at exit when it fired nothing
    gated: tuple[tuple[str, str], ...] = ()
    # params the program reads as data (resolve/scope.py Constants), by name: (name, type)
    data_params: tuple[tuple[str, Type], ...] = ()
    # params whose value (within its data class) never shapes the program (run_cache.py)
    value_params: frozenset[str] = frozenset()
    # the params compiled in as constants (resolve/scope.py Constants.pins: shared with
    # the typed expressions' ParamRefs, so a param added here renders as its value)
    param_pins: set[str] = field(default_factory=set, compare=False)
    # the span probes of `probes`, in order (render asks for them per probe: found once)
    spans: tuple[ResolvedProbe, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "spans", tuple(p for p in self.probes
                                                if kind(p.spec.kind).pairs))

    def probe(self, name: str) -> ResolvedProbe:
        return next(p for p in self.probes if p.spec.name == name)
