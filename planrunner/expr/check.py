"""Type checker: untyped `Expr` + a `Scope` -> typed tree (planrunner.expr.typed).

Contract:
- `check(expr, scope, *, string_size)` returns a typed tree of any type; `check_condition`
  also requires a bool or an integer (non-zero is true; for `where:`); `check_value`
  requires an integer (aggregation values). All raise ExpressionError listing every error
  found in the expression (an operand that failed does not cause follow-on errors).
- `string_size` is the content capacity of `str(x)` (settings.string_size): `str(x)` has
  type `StrType(string_size + 1)`; `str(x, N)` with a constant N has `StrType(N + 1)`
  (1 <= N <= MAX_STR_CAP); `str(x, n)` with a run-time n reads `min(n, string_size)` bytes.
Rules (see types.py for integer conversions):
- `+ - * / % << >> & | ^ ~ -x` need integers (`& | ^` also take two bools); a constant
  divisor of 0 and a constant shift count outside 0..63 are errors;
- `< <= > >=` need integers; `== !=` take two integers, two bools or two strings (string
  contents are compared; two run-time strings are compared bounded by the smaller buffer);
  comparing an unsigned 64-bit value with a negative constant is an error (always false);
- `&& || !` take bools or integers; results are bool;
- `usym(x)` and `u64(x)` need an integer (a named value of fewer than 64 bits cannot be an
  address); `u64(x)` is the uint64 in the traced process's memory at x (0 if unreadable);
  its result, like a stack, is only printed or grouped by (no operator, no condition);
- a string literal compared with or searched in a string longer than it can hold is an
  error (it could never match).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from planrunner.diagnostics import Diagnostic, Span, did_you_mean
from planrunner.errors import ExpressionError
from planrunner.expr import ast as A
from planrunner.expr import typed as T
from planrunner.expr.types import (
    BOOL,
    DURATION,
    INT64,
    MAX_STACK_FRAMES,
    UINT64,
    BoolType,
    IntType,
    StackKind,
    StackType,
    StrType,
    SymType,
    Type,
    arithmetic_result,
    promoted,
    with_unit,
)

MAX_STR_CAP = 4096  # largest constant cap in str(x, N)
FUNCTIONS: dict[str, tuple[int, int]] = {"str": (1, 2), "contains": (2, 2),
                                         "startswith": (2, 2), "ustack": (0, 1),
                                         "kstack": (0, 1), "usym": (1, 1), "u64": (1, 1)}
STACKS: dict[str, StackKind] = {"ustack": "user", "kstack": "kernel"}
ARITHMETIC = ("+", "-", "*", "/", "%")
SHIFTS = ("<<", ">>")
BITWISE = ("&", "|", "^")
ORDERING = ("<", "<=", ">", ">=")
EQUALITY = ("==", "!=")
LOGICAL = ("&&", "||")


@dataclass(frozen=True, slots=True)
class Symbol:
    """What a name means here: a run-time value (`ref`, a symbolic reference that the
    renderer maps to C) or a constant (`const_value`: int, bool, str/bytes; durations as
    int ns)."""

    type: Type
    ref: T.Ref | None
    const_value: object | None = None


class Scope(Protocol):
    def lookup(self, name: str) -> Symbol | None: ...

    def names(self) -> Iterable[str]: ...


class _Failed:
    """Placeholder for a subtree that already produced an error."""

    __slots__ = ("span",)

    def __init__(self, span: Span) -> None:
        self.span = span


def check(expr: A.Expr, scope: Scope, *, string_size: int) -> T.TExpr:
    return _Checker(scope, string_size).run(expr, None)


def check_condition(expr: A.Expr, scope: Scope, *, string_size: int) -> T.TExpr:
    return _Checker(scope, string_size).run(expr, "condition")


def check_value(expr: A.Expr, scope: Scope, *, string_size: int) -> T.TExpr:
    return _Checker(scope, string_size).run(expr, "value")


_NUMBER_TEXT = re.compile(rb"\s*[-+]?(0[xX][0-9a-fA-F]+|[0-9]+)\s*")


def _literal_vs_number_hint(source: str, typ: IntType, op: str, literal: bytes) -> str:
    """The hint for a string literal compared with a number: the number unquoted when the
    literal spells one; else, for a 64-bit value (maybe a char *), str() of it."""
    if _NUMBER_TEXT.fullmatch(literal):
        number = literal.decode().strip()
        return (f"a string literal compared with a number: write the number without "
                f"quotes, `{source} {op} {number}`")
    if typ.bits == 64:
        return f"to compare the string at an address, read it first: str({source})"
    return (f"a string literal compared with a number: this {typ.bits}-bit value is never "
            "the address of a string; compare it with a number")


def _desc(t: T.TExpr) -> str:
    """How a typed operand is named in messages."""
    return "string literal" if isinstance(t, T.TStrConst) else str(t.type)


# Values that are only printed or grouped by: no operator or condition takes one.
SHOWN_ONLY = (StackType, SymType)


def _kind(t: Type) -> str:
    if isinstance(t, StackType):
        return "a stack"
    if isinstance(t, SymType):
        return "a user symbol"
    return "an integer" if isinstance(t, IntType) else "a string" if isinstance(
        t, StrType) else "a bool"


class _Checker:
    def __init__(self, scope: Scope, string_size: int) -> None:
        if string_size < 1:
            raise ValueError("string_size must be positive")
        self.scope = scope
        self.string_size = string_size
        self.errors: list[Diagnostic] = []

    def run(self, expr: A.Expr, want: str | None) -> T.TExpr:
        result = self.visit(expr)
        if not isinstance(result, _Failed):
            self.want(result, want)
        if self.errors:
            raise ExpressionError(self.errors)
        assert not isinstance(result, _Failed)
        return result

    def want(self, t: T.TExpr, want: str | None) -> None:
        if want == "condition" and isinstance(t.type, SHOWN_ONLY):
            self.error(f"a condition must be a bool or an integer, got {t.type}", t.span,
                       f"{_kind(t.type)} can be printed or be a `by` key")
        elif want == "condition" and isinstance(t.type, StrType):
            self.error(f"a condition must be a bool or an integer, got {t.type}", t.span,
                       'compare the string (== "...") or test it with contains()/startswith()')
        elif want == "value" and not isinstance(t.type, IntType):
            self.error(f"an aggregation value must be an integer, got {t.type}", t.span)

    def error(self, message: str, span: Span, *hints: str) -> _Failed:
        self.errors.append(Diagnostic(message, span, tuple(h for h in hints if h)))
        return _Failed(span)

    def visit(self, e: A.Expr) -> T.TExpr | _Failed:
        if isinstance(e, A.IntLit):
            return T.TIntConst(e.value, INT64 if INT64.contains(e.value) else UINT64, e.span)
        if isinstance(e, A.DurationLit):
            return T.TIntConst(e.ns, DURATION, e.span)
        if isinstance(e, A.StrLit):
            return T.TStrConst(e.value, e.span)
        if isinstance(e, A.BoolLit):
            return T.TBoolConst(e.value, e.span)
        if isinstance(e, A.Name):
            return self.name(e)
        if isinstance(e, A.Unary):
            return self.unary(e)
        if isinstance(e, A.Binary):
            return self.binary(e)
        if isinstance(e, A.Call):
            return self.call(e)
        raise TypeError(f"not an expression node: {e!r}")

    # -- names ----------------------------------------------------------------------------

    def name(self, e: A.Name) -> T.TExpr | _Failed:
        sym = self.scope.lookup(e.ident)
        if sym is None:
            return self.unknown_name(e)
        if sym.const_value is not None and sym.ref is None:
            return self.constant(e, sym)
        if sym.ref is None:
            raise ValueError(f"symbol {e.ident!r} has neither a reference nor a value")
        return T.TRef(e.ident, sym.ref, sym.type, e.span)

    def unknown_name(self, e: A.Name) -> _Failed:
        names = sorted(set(self.scope.names()))
        hints = []
        if e.ident in FUNCTIONS:
            hints.append(f"{e.ident} is a function: write {e.ident}(...)")
        guess = did_you_mean(e.ident, names)
        if guess:
            hints.append(f"did you mean '{guess}'?")
        elif names and len(names) <= 16:
            hints.append("names available here: " + ", ".join(names))
        explain = getattr(self.scope, "explain_unknown", None)  # optional, scope-specific
        message = explain(e.ident) if explain else None
        return self.error(message or f"unknown name '{e.ident}'", e.span, *hints)

    def constant(self, e: A.Name, sym: Symbol) -> T.TExpr | _Failed:
        value = sym.const_value
        if isinstance(value, bool):
            return T.TBoolConst(value, e.span)
        if isinstance(value, int):
            if not isinstance(sym.type, IntType) or not sym.type.contains(value):
                raise ValueError(f"constant {e.ident!r}={value} does not fit {sym.type}")
            return T.TIntConst(value, sym.type, e.span)
        if isinstance(value, str | bytes):
            data = value.encode("utf-8") if isinstance(value, str) else value
            if b"\0" in data:
                return self.error(f"parameter '{e.ident}' contains a NUL byte", e.span)
            return T.TStrConst(data, e.span)
        return self.error(f"'{e.ident}' is a {type(value).__name__}; expressions use only "
                          "integers, durations, strings and bools", e.span)

    # -- operators ------------------------------------------------------------------------

    def unary(self, e: A.Unary) -> T.TExpr | _Failed:
        operand = self.visit(e.operand)
        if isinstance(operand, _Failed):
            return operand
        t = operand.type
        if e.op == "!":
            if isinstance(t, StrType | StackType | SymType):
                return self.error(f"operator '!' needs a bool or an integer, got {t}",
                                  operand.span)
            return T.TUnary("!", operand, BOOL, e.span)
        if not isinstance(t, IntType):
            return self.error(f"operator '{e.op}' needs an integer, got {t}", operand.span)
        result = promoted(t)
        operand = _pinned(operand)
        if isinstance(operand, T.TIntConst):  # fold, so that `-1` is a constant
            value = -operand.value if e.op == "-" else ~operand.value
            return T.TIntConst(result.wrap(value), result, e.span)
        return T.TUnary(e.op, operand, result, e.span)

    def binary(self, e: A.Binary) -> T.TExpr | _Failed:
        left, right = self.visit(e.left), self.visit(e.right)
        if isinstance(left, _Failed) or isinstance(right, _Failed):
            return _Failed(e.span)
        op = e.op
        if op in LOGICAL:
            for side, t in (("left", left), ("right", right)):
                if isinstance(t.type, StrType | StackType | SymType):
                    return self.error(f"operator '{op}' needs bools or integers, but its "
                                      f"{side} operand is a {t.type}", t.span)
            return T.TBinary(op, left, right, BOOL, None, e.span)
        if op in EQUALITY:
            return self.equality(e, left, right)
        if op in BITWISE and isinstance(left.type, BoolType) and isinstance(
                right.type, BoolType):
            return T.TBinary(op, left, right, BOOL, BOOL, e.span)
        bad = self.need_ints(e, left, right)
        if bad is not None:
            return bad
        if op in SHIFTS or op in ("/", "%"):  # a constant count or divisor is checked
            right = _pinned(right)
        assert isinstance(left.type, IntType) and isinstance(right.type, IntType)
        if op in ORDERING:
            common = arithmetic_result(left.type, right.type)
            return self.negative_vs_unsigned(e, left, right, common) or T.TBinary(
                op, left, right, BOOL, common, e.span)
        if op in SHIFTS:
            count = right
            if isinstance(count, T.TIntConst) and not 0 <= count.value <= 63:
                return self.error(f"shift count {count.value} is outside 0..63", count.span)
            result = promoted(left.type)
            return T.TBinary(op, left, right, result, result, e.span)
        if op in ("/", "%") and isinstance(right, T.TIntConst) and right.value == 0:
            what = "division" if op == "/" else "modulo"
            return self.error(f"{what} by zero", right.span)
        common = arithmetic_result(left.type, right.type)
        result = with_unit(common, left.type, right.type) if op in ("+", "-") else common
        return T.TBinary(op, left, right, result, common, e.span)

    def need_ints(self, e: A.Binary, left: T.TExpr, right: T.TExpr) -> _Failed | None:
        if isinstance(left.type, IntType) and isinstance(right.type, IntType):
            return None
        culprit = left if not isinstance(left.type, IntType) else right
        hint = ""
        if e.op in ORDERING and isinstance(left.type, StrType) and isinstance(
                right.type, StrType):
            hint = "strings can only be compared with == and !="
        elif e.op in ORDERING and BOOL in (left.type, right.type):
            hint = "comparisons do not chain: write 'a < b && b < c'"
        return self.error(f"operator '{e.op}' needs integers, got {_desc(left)} and "
                          f"{_desc(right)}", culprit.span, hint)

    def negative_vs_unsigned(self, e: A.Binary, left: T.TExpr, right: T.TExpr,
                             common: IntType) -> _Failed | None:
        if common != UINT64:
            return None
        for const, other in ((left, right), (right, left)):
            if isinstance(const, T.TIntConst) and const.value < 0:
                return self.error(f"comparing the unsigned {other.type} with the negative "
                                  f"constant {const.value} does not do what it says",
                                  const.span, "the constant would be converted to uint64")
        return None

    def equality(self, e: A.Binary, left: T.TExpr, right: T.TExpr) -> T.TExpr | _Failed:
        lt, rt = left.type, right.type
        if isinstance(lt, StrType) and isinstance(rt, StrType):
            if isinstance(left, T.TStrConst) and not isinstance(right, T.TStrConst):
                left, right = right, left
            if isinstance(right, T.TStrConst):
                bad = self.fits(left, right.value, right.span, "equal")
                if bad is not None:
                    return bad
            return T.TStrEq(e.op, left, right, e.span)
        if isinstance(lt, BoolType) and isinstance(rt, BoolType):
            return T.TBinary(e.op, left, right, BOOL, BOOL, e.span)
        if isinstance(lt, IntType) and isinstance(rt, IntType):
            common = arithmetic_result(lt, rt)
            return self.negative_vs_unsigned(e, left, right, common) or T.TBinary(
                e.op, left, right, BOOL, common, e.span)
        hint = ""
        for num, other in ((left, right), (right, left)):
            if isinstance(num.type, IntType) and isinstance(other, T.TStrConst):
                hint = _literal_vs_number_hint(
                    A.to_source(e.left if num is left else e.right), num.type, e.op,
                    other.value)
        return self.error(f"cannot compare {_desc(left)} with {_desc(right)}", e.span, hint)

    def fits(self, subject: T.TExpr, needle: bytes, span: Span, verb: str) -> _Failed | None:
        t = subject.type
        assert isinstance(t, StrType)
        if len(needle) > t.capacity:
            return self.error(f"this {len(needle)}-byte literal can never {verb} a string of "
                              f"at most {t.capacity} bytes", span,
                              "use startswith() with a prefix, or raise the string's size")
        return None

    # -- calls ----------------------------------------------------------------------------

    def call(self, e: A.Call) -> T.TExpr | _Failed:
        fspan = e.func_span or e.span
        if e.func not in FUNCTIONS:
            guess = did_you_mean(e.func, list(FUNCTIONS))
            failed = self.error(f"unknown function '{e.func}'", fspan,
                                f"did you mean '{guess}'?" if guess else "",
                                "functions: " + ", ".join(f"{f}()" for f in FUNCTIONS))
            for a in e.args:  # still report errors inside the arguments, in source order
                self.visit(a)
            return failed
        args = [self.visit(a) for a in e.args]
        lo, hi = FUNCTIONS[e.func]
        if not lo <= len(args) <= hi:
            want = f"{lo}" if lo == hi else f"{lo} or {hi}"
            return self.error(f"{e.func}() takes {want} arguments, got {len(args)}", e.span,
                              _USAGE[e.func])
        if any(isinstance(a, _Failed) for a in args):
            return _Failed(e.span)
        typed = [a for a in args if not isinstance(a, _Failed)]
        if e.func == "str":
            return self.str_call(e, typed)
        if e.func in STACKS:
            return self.stack_call(e, typed)
        if e.func == "usym":
            return self.usym_call(e, typed[0])
        if e.func == "u64":
            return self.word_call(e, typed[0])
        return self.str_test(e, typed)

    def word_call(self, e: A.Call, addr: T.TExpr) -> T.TExpr | _Failed:
        """`u64(ADDRESS)`: the 8 bytes of the process's memory at ADDRESS (a pointer
        an argument points to: posix_memalign's *memptr at its return)."""
        if not isinstance(addr.type, IntType):
            return self.error(f"u64() needs an address (an integer), got {addr.type}",
                              addr.span, _USAGE["u64"])
        if isinstance(addr, T.TRef) and addr.type.bits < 64:
            return self.error(f"u64() needs an address, but '{addr.name}' is a "
                              f"{addr.type.bits // 8}-byte {addr.type}: it cannot be a "
                              "pointer", addr.span, "declare the argument `type: pointer`")
        return T.TUserWord(addr, e.span)

    def usym_call(self, e: A.Call, addr: T.TExpr) -> T.TExpr | _Failed:
        """`usym(ADDRESS)`: a code address of the traced process, named in user space."""
        if not isinstance(addr.type, IntType):
            hint = ("usym() names a code address, such as a function pointer argument"
                    if isinstance(addr.type, StrType) else "")
            return self.error(f"usym() needs an address (an integer), got {addr.type}",
                              addr.span, hint)
        if isinstance(addr, T.TRef) and addr.type.bits < 64:
            return self.error(f"usym() needs an address, but '{addr.name}' is a "
                              f"{addr.type.bits // 8}-byte {addr.type}: it cannot be a "
                              "pointer", addr.span, "check the argument's position and "
                              "declared type (`planrunner list BINARY -vv` shows each "
                              "operand's size)")
        return T.TUsym(addr, e.span)

    def stack_call(self, e: A.Call, args: list[T.TExpr]) -> T.TExpr | _Failed:
        """`ustack(N)` / `kstack(N)`: the stack the scope offers, cut to N frames."""
        sym = self.scope.lookup(e.func)
        if sym is None or sym.ref is None or not isinstance(sym.type, StackType):
            return self.error(f"{e.func} is not available here", e.func_span or e.span)
        limit = sym.type.limit
        if args:
            n = _pinned(args[0])
            if not isinstance(n, T.TIntConst) or not 1 <= n.value <= MAX_STACK_FRAMES:
                return self.error(f"the frame count of {e.func}() must be a constant in "
                                  f"1..{MAX_STACK_FRAMES}", n.span)
            limit = n.value
        return T.TRef(e.func, sym.ref, StackType(sym.type.kind, limit), e.span)

    def str_call(self, e: A.Call, args: list[T.TExpr]) -> T.TExpr | _Failed:
        addr = args[0]
        if not isinstance(addr.type, IntType):
            hint = "it is already a string: use it directly" if isinstance(
                addr.type, StrType) else ""
            return self.error(f"str() needs an address (an integer), got {addr.type}",
                              addr.span, hint)
        if isinstance(addr, T.TRef) and addr.type.bits < 64:
            return self.error(f"str() needs an address, but '{addr.name}' is a "
                              f"{addr.type.bits // 8}-byte {addr.type}: it cannot be a pointer",
                              addr.span, "check the argument's position and declared type "
                              "(`planrunner list BINARY -vv` shows each operand's size)")
        if len(args) == 1:
            return T.TStrRead(addr, self.string_size, None, e.span)
        n = _pinned(args[1])
        if not isinstance(n.type, IntType):
            return self.error(f"the length of str() must be an integer, got {n.type}", n.span)
        if isinstance(n, T.TIntConst):
            if not 1 <= n.value <= MAX_STR_CAP:
                return self.error(f"str() size {n.value} is outside 1..{MAX_STR_CAP}", n.span)
            return T.TStrRead(addr, n.value, None, e.span)
        return T.TStrRead(addr, self.string_size, n, e.span)

    def str_test(self, e: A.Call, args: list[T.TExpr]) -> T.TExpr | _Failed:
        subject, needle = args
        if not isinstance(subject.type, StrType):
            hint = f"read it first: {e.func}(str(...), ...)" if isinstance(
                subject.type, IntType) else ""
            return self.error(f"the first argument of {e.func}() must be a string, got "
                              f"{subject.type}", subject.span, hint)
        if not isinstance(needle, T.TStrConst):
            return self.error(f"the second argument of {e.func}() must be a string literal, "
                              f"got {_kind(needle.type)} value", needle.span, _USAGE[e.func])
        verb = "be found in" if e.func == "contains" else "start"
        bad = self.fits(subject, needle.value, needle.span, verb)
        if bad is None and e.func == "contains":
            bad = self.searchable(subject, needle.value, e.span)
        return bad or T.TStrTest(e.func, subject, needle.value, e.span)

    def searchable(self, subject: T.TExpr, needle: bytes, span: Span) -> _Failed | None:
        """contains() compares the literal at every position of the string, and the
        kernel's verifier follows each comparison: past CONTAINS_MAX_STEPS of them in one
        path it refuses the program ("the sequence of 8193 jumps is too complex"), so
        say it here, located, rather than at load time."""
        t = subject.type
        assert isinstance(t, StrType)
        steps = (t.capacity - len(needle) + 1) * len(needle)
        if steps <= CONTAINS_MAX_STEPS:
            return None
        return self.error(
            f"contains() of a {len(needle)}-byte literal in a string of up to {t.capacity} "
            f"bytes makes {steps} comparisons, more than the kernel's verifier follows in "
            f"one program (about {CONTAINS_MAX_STEPS})", span,
            "lower the string's size (size: on the argument, settings.string_size or "
            "str(ADDRESS, LENGTH)), use a shorter literal, or startswith()")


# (capacity - literal + 1) * literal: measured on Linux 6.18, 256-byte strings with a
# 64-byte literal (12,352) and 4096-byte strings with a 3-byte one (12,282) fail to load,
# 2048 with 3 (6,138) and 256 with 32 (7,200) load
CONTAINS_MAX_STEPS = 8000

_USAGE = {
    "ustack": "ustack or ustack(FRAMES)",
    "usym": "usym(ADDRESS)",
    "u64": "u64(ADDRESS): the 8 bytes of memory at ADDRESS",
    "kstack": "kstack or kstack(FRAMES)",
    "str": "str(ADDRESS) or str(ADDRESS, LENGTH)",
    "contains": 'contains(STRING, "literal")',
    "startswith": 'startswith(STRING, "literal")',
}


def _pinned(t: T.TExpr) -> T.TExpr:
    """`t` as a constant where one is needed (a fold, a range or zero check), when it is
    a param used as data: its value, and the param compiled in (T.ParamRef)."""
    if isinstance(t, T.TRef) and isinstance(t.ref, T.ParamRef) and isinstance(t.type, IntType):
        t.ref.pins.add(t.ref.name)
        return T.TIntConst(t.ref.value, t.type, t.span)
    return t
