"""The untyped expression tree, as parsed.

Every node is a frozen dataclass with a `span` (its exact columns in the plan file). Spans
do not take part in equality, so two parses of differently spaced text compare equal.
`to_source(expr)` renders a tree back to text with only the parentheses precedence needs;
`parse_expression(to_source(e))` gives back `e` (a property the tests check).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from planrunner.diagnostics import Span

# Binary operators, loosest first; C precedence, all left-associative.
BINARY_LEVELS: tuple[tuple[str, ...], ...] = (
    ("||",), ("&&",), ("|",), ("^",), ("&",), ("==", "!="), ("<", "<=", ">", ">="),
    ("<<", ">>"), ("+", "-"), ("*", "/", "%"),
)
PRECEDENCE: dict[str, int] = {op: i for i, ops in enumerate(BINARY_LEVELS) for op in ops}
UNARY_OPS = ("!", "-", "~")
UNARY_PRECEDENCE = len(BINARY_LEVELS)
ATOM_PRECEDENCE = UNARY_PRECEDENCE + 1


@dataclass(frozen=True, slots=True)
class IntLit:
    """An integer literal."""

    value: int  # non-negative; `-5` is Unary("-", IntLit(5))
    span: Span = field(compare=False)


@dataclass(frozen=True, slots=True)
class StrLit:
    """A string literal."""

    value: bytes  # decoded escapes, UTF-8 for non-ASCII text; never contains NUL
    span: Span = field(compare=False)


@dataclass(frozen=True, slots=True)
class BoolLit:
    """`true` or `false`."""

    value: bool
    span: Span = field(compare=False)


@dataclass(frozen=True, slots=True)
class DurationLit:
    """A duration literal (`10ms`), in ns."""

    ns: int
    span: Span = field(compare=False)


@dataclass(frozen=True, slots=True)
class Name:
    """A name, possibly dotted (`begin.query`)."""

    ident: str  # [A-Za-z_][A-Za-z0-9_]*, possibly dotted: `begin.query`
    span: Span = field(compare=False)


@dataclass(frozen=True, slots=True)
class Unary:
    """A unary operator applied to one operand."""

    op: str  # one of UNARY_OPS
    operand: Expr
    span: Span = field(compare=False)


@dataclass(frozen=True, slots=True)
class Binary:
    """A binary operator and its operands."""

    op: str  # a key of PRECEDENCE
    left: Expr
    right: Expr
    span: Span = field(compare=False)
    op_span: Span | None = field(default=None, compare=False)  # the operator itself


@dataclass(frozen=True, slots=True)
class Call:
    """A function call as written."""

    func: str  # as written; the checker decides whether it is a known function
    args: tuple[Expr, ...]
    span: Span = field(compare=False)
    func_span: Span | None = field(default=None, compare=False)


Expr = IntLit | StrLit | BoolLit | DurationLit | Name | Unary | Binary | Call


def precedence(expr: Expr) -> int:
    if isinstance(expr, Binary):
        return PRECEDENCE[expr.op]
    if isinstance(expr, Unary):
        return UNARY_PRECEDENCE
    return ATOM_PRECEDENCE


def string_source(value: bytes) -> str:
    """A plan-language string literal for `value` (printable ASCII kept, the rest \\xNN)."""
    out = ['"']
    for byte in value:
        ch = chr(byte)
        if ch in '"\\':
            out.append("\\" + ch)
        elif 0x20 <= byte < 0x7F:
            out.append(ch)
        else:
            out.append(f"\\x{byte:02x}")
    out.append('"')
    return "".join(out)


def to_source(expr: Expr) -> str:
    """Text that parses back to `expr`, with parentheses only where precedence needs them."""
    if isinstance(expr, IntLit):
        return str(expr.value)
    if isinstance(expr, DurationLit):
        return f"{expr.ns}ns"
    if isinstance(expr, BoolLit):
        return "true" if expr.value else "false"
    if isinstance(expr, StrLit):
        return string_source(expr.value)
    if isinstance(expr, Name):
        return expr.ident
    if isinstance(expr, Unary):
        inner = to_source(expr.operand)
        if precedence(expr.operand) < UNARY_PRECEDENCE:
            inner = f"({inner})"
        return f"{expr.op}{inner}"
    if isinstance(expr, Binary):
        prec = PRECEDENCE[expr.op]
        left, right = to_source(expr.left), to_source(expr.right)
        if precedence(expr.left) < prec:
            left = f"({left})"
        if precedence(expr.right) <= prec:  # left-associative: a - (b - c) keeps its parens
            right = f"({right})"
        return f"{left} {expr.op} {right}"
    if isinstance(expr, Call):
        return f"{expr.func}({', '.join(to_source(a) for a in expr.args)})"
    raise TypeError(f"not an expression node: {expr!r}")


def to_parenthesised(expr: Expr) -> str:
    """Text with every unary and binary operation in parentheses (for precedence tests)."""
    if isinstance(expr, Unary):
        return f"({expr.op}{to_parenthesised(expr.operand)})"
    if isinstance(expr, Binary):
        return f"({to_parenthesised(expr.left)} {expr.op} {to_parenthesised(expr.right)})"
    if isinstance(expr, Call):
        return f"{expr.func}({', '.join(to_parenthesised(a) for a in expr.args)})"
    return to_source(expr)
