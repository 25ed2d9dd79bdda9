"""The typed expression tree produced by `check` and consumed by `lower_c`.

Every node is a frozen dataclass with `.type` (a planrunner.expr.types Type) and `.span`
(the span of the source node it came from). Spans do not take part in equality. Names
have been resolved: a scope symbol with a constant value became a constant node, others a
`TRef` carrying a symbolic reference (`Ref`: an argument of the probe, a builtin, the
span's latency, a value captured at the span's begin). Nothing here is C: render/ alone
decides what C holds each reference, and string constants reach C only through its
literal escaper.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from planrunner.diagnostics import Span
from planrunner.expr.types import (
    BOOL,
    UINT64,
    BoolType,
    IntType,
    StackKind,
    StrType,
    SymType,
    Type,
)

Builtin = Literal["pid", "tid", "uid", "gid", "cpu", "ts", "comm", "func"]


@dataclass(frozen=True, slots=True)
class ArgRef:
    """Argument `index` of the probe the expression runs in (1-based; 0 is `retval`)."""

    index: int


@dataclass(frozen=True, slots=True)
class BuiltinRef:
    """A value of the event itself (the thread, the clock, the CPU...)."""

    name: Builtin


@dataclass(frozen=True, slots=True)
class LatencyRef:
    """Span `span`'s latency: the end event's time minus the begin event's, in ns."""

    span: str = ""


@dataclass(frozen=True, slots=True)
class CaptureRef:
    """`begin.NAME` of span `span`: `expr` (checked in the begin probe's scope) is stored
    when the span begins and read back when it ends."""

    name: str
    expr: TExpr
    span: str = ""


@dataclass(frozen=True, slots=True)
class DepthRef:
    """The call depth of nested span `span` at this event (0 = outermost): the depth of
    the pair a begin opens or an end closes."""

    span: str


@dataclass(frozen=True, slots=True)
class StackRef:
    """The user or kernel call stack at the event (how many frames is in the type)."""

    kind: StackKind


@dataclass(frozen=True, slots=True)
class ParamRef:
    """A plan param used as data: its value is written into the program's params map
    at load (render/params.py), so another value needs no new compile. `value` is this
    run's; where the checker needs a constant (a shift count, a divisor, a frame count)
    it takes `value` and adds `name` to `pins`, and the param is compiled in as a
    literal everywhere instead."""

    name: str
    value: int
    pins: set[str] = field(compare=False, hash=False, repr=False)


Ref = ArgRef | BuiltinRef | LatencyRef | CaptureRef | DepthRef | StackRef | ParamRef


@dataclass(frozen=True, slots=True)
class TIntConst:
    """A typed integer constant."""

    value: int  # within type's range
    type: IntType
    span: Span = field(compare=False)


@dataclass(frozen=True, slots=True)
class TBoolConst:
    """A typed boolean constant."""

    value: bool
    span: Span = field(compare=False)
    type: BoolType = BOOL


@dataclass(frozen=True, slots=True)
class TStrConst:
    """A typed string constant."""

    value: bytes  # no NUL byte
    span: Span = field(compare=False)

    @property
    def type(self) -> StrType:
        return StrType(len(self.value) + 1)


@dataclass(frozen=True, slots=True)
class TRef:
    """A typed reference to a value the probe offers."""

    name: str  # the plan name (for messages only; never emitted)
    ref: Ref
    type: Type
    span: Span = field(compare=False)


@dataclass(frozen=True, slots=True)
class TUnary:
    """A typed unary operation."""

    op: str  # "!" (type bool), "-" or "~" (type: the operand promoted to 64 bits)
    operand: TExpr
    type: Type
    span: Span = field(compare=False)


@dataclass(frozen=True, slots=True)
class TBinary:
    """An integer or bool operation. `operand_type` is what both sides are converted to
    before the operation (an IntType, BOOL for bool-with-bool, None for && and ||)."""

    op: str
    left: TExpr
    right: TExpr
    type: Type
    operand_type: Type | None
    span: Span = field(compare=False)


@dataclass(frozen=True, slots=True)
class TStrEq:
    """`==`/`!=` on string contents; `right` is a TStrConst whenever either side is."""

    op: str
    left: TExpr
    right: TExpr
    span: Span = field(compare=False)
    type: BoolType = BOOL


@dataclass(frozen=True, slots=True)
class TStrRead:
    """`str(addr)` / `str(addr, n)`: read user memory into a buffer of `cap + 1` bytes.
    `length` None: a NUL-terminated read of at most `cap` bytes. Otherwise exactly
    `min(length, cap)` bytes (negative lengths read nothing), then a NUL."""

    addr: TExpr
    cap: int
    length: TExpr | None
    span: Span = field(compare=False)

    @property
    def type(self) -> StrType:
        return StrType(self.cap + 1)


@dataclass(frozen=True, slots=True)
class TStrTest:
    """`contains` or `startswith` of a string and a literal."""

    func: str  # "contains" or "startswith"
    subject: TExpr  # a string
    needle: bytes  # the literal (no NUL)
    span: Span = field(compare=False)
    type: BoolType = BOOL


@dataclass(frozen=True, slots=True)
class TUsym:
    """`usym(addr)`: the code address `addr` (a 64-bit integer) of the process the event
    is in, to be named in user space (runtime/stacks.py) as `symbol+offset`."""

    addr: TExpr
    span: Span = field(compare=False)

    @property
    def type(self) -> SymType:
        return SymType()


@dataclass(frozen=True, slots=True)
class TUserWord:
    """`u64(addr)`: the 8 bytes of the traced process's memory at `addr`, read when the
    probe fires (0 when they cannot be read)."""

    addr: TExpr
    span: Span = field(compare=False)
    type: IntType = UINT64


TExpr = (TIntConst | TBoolConst | TStrConst | TRef | TUnary | TBinary | TStrEq | TStrRead
         | TStrTest | TUsym | TUserWord)


def children(t: TExpr) -> tuple[TExpr, ...]:
    """The direct sub-expressions of `t`, in source order (a capture's begin-side
    expression is not a child: it runs in another probe)."""
    if isinstance(t, TUnary):
        return (t.operand,)
    if isinstance(t, TBinary | TStrEq):
        return (t.left, t.right)
    if isinstance(t, TStrRead):
        return (t.addr,) if t.length is None else (t.addr, t.length)
    if isinstance(t, TStrTest):
        return (t.subject,)
    if isinstance(t, TUsym | TUserWord):
        return (t.addr,)
    return ()


def names_symbols(t: TExpr) -> bool:
    """Whether `t` holds a `usym(...)` anywhere."""
    stack = [t]
    while stack:
        node = stack.pop()
        if isinstance(node, TUsym):
            return True
        stack.extend(children(node))
    return False


def refs(t: TExpr) -> list[Ref]:
    """Every reference in `t`, in source order, repeats included."""
    out: list[Ref] = []
    stack = [t]
    while stack:
        node = stack.pop()
        if isinstance(node, TRef):
            out.append(node.ref)
        stack.extend(reversed(children(node)))
    return out
