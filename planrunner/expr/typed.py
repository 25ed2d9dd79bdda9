"""The typed expression tree produced by `check` and consumed by `lower_c`.

Every node is a frozen dataclass with `.type` (a planrunner.expr.types Type) and `.span`
(the span of the source node it came from). Spans do not take part in equality. Names
have been resolved: a scope symbol with a constant value became a constant node, others a
`TVar` carrying the renderer's C expression. Nothing here holds user text destined for C
except string constants, which only `lower_c.c_string_literal` ever emits.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from planrunner.diagnostics import Span
from planrunner.expr.types import BOOL, BoolType, IntType, StrType, Type


@dataclass(frozen=True, slots=True)
class TIntConst:
    value: int  # within type's range
    type: IntType
    span: Span = field(compare=False)


@dataclass(frozen=True, slots=True)
class TBoolConst:
    value: bool
    span: Span = field(compare=False)
    type: BoolType = BOOL


@dataclass(frozen=True, slots=True)
class TStrConst:
    value: bytes  # no NUL byte
    span: Span = field(compare=False)

    @property
    def type(self) -> StrType:
        return StrType(len(self.value) + 1)


@dataclass(frozen=True, slots=True)
class TVar:
    name: str  # the plan name (for messages only; never emitted)
    c_expr: str  # chosen by the renderer
    type: Type
    span: Span = field(compare=False)


@dataclass(frozen=True, slots=True)
class TUnary:
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
    func: str  # "contains" or "startswith"
    subject: TExpr  # a string
    needle: bytes  # the literal (no NUL)
    span: Span = field(compare=False)
    type: BoolType = BOOL


TExpr = TIntConst | TBoolConst | TStrConst | TVar | TUnary | TBinary | TStrEq | TStrRead | TStrTest
