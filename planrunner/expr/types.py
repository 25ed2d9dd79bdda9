"""Types of the expression language.

- `IntType(bits, signed)`: an integer of 8/16/32/64 bits. Arithmetic is 64-bit: both
  operands are first widened to 64 bits; the result is unsigned only when an operand is
  `uint64` (a narrower unsigned value fits in int64). This is C's usual arithmetic
  conversion applied after promoting everything to (unsigned) long long.
- `StrType(size)`: a char buffer of `size` bytes holding a NUL-terminated string, so at
  most `size - 1` bytes of content (`capacity`).
- `BoolType()`: the result of comparisons and `&&`/`||`/`!`; 0 or 1 in C.
- `StackType(kind, limit)`: a call stack; `SymType()`: an address named as a symbol
  (`usym(addr)`). Neither takes an operator: they are printed or are `by` keys.
Durations are `UINT64` nanoseconds with the unit "ns" (`DURATION`). A unit is a note on
the type, not part of it: it takes no part in equality, and it survives only `+` and `-`
of two values with that unit (`latency / 1000` has none). Output titles read it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

Unit = Literal["ns"]


@dataclass(frozen=True, slots=True)
class IntType:
    """An integer type: width, sign and unit."""

    bits: int
    signed: bool
    unit: Unit | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if self.bits not in (8, 16, 32, 64):
            raise ValueError(f"unsupported integer width {self.bits}")

    @property
    def min(self) -> int:
        return -(1 << (self.bits - 1)) if self.signed else 0

    @property
    def max(self) -> int:
        return (1 << (self.bits - 1)) - 1 if self.signed else (1 << self.bits) - 1

    def contains(self, value: int) -> bool:
        return self.min <= value <= self.max

    def wrap(self, value: int) -> int:
        """`value` reduced modulo 2**bits into this type's range (C conversion)."""
        value &= (1 << self.bits) - 1
        if self.signed and value > self.max:
            value -= 1 << self.bits
        return value

    def __str__(self) -> str:
        return f"{'' if self.signed else 'u'}int{self.bits}"


@dataclass(frozen=True, slots=True)
class StrType:
    """A string buffer of `size` bytes, the NUL included."""

    size: int  # buffer bytes, the NUL included

    def __post_init__(self) -> None:
        if self.size < 1:
            raise ValueError(f"string buffer size must be at least 1, got {self.size}")

    @property
    def capacity(self) -> int:
        return self.size - 1

    def __str__(self) -> str:
        return f"string (up to {self.capacity} bytes)"


@dataclass(frozen=True, slots=True)
class BoolType:
    """The boolean type."""

    def __str__(self) -> str:
        return "bool"


StackKind = Literal["user", "kernel"]
MAX_STACK_FRAMES = 127  # what the kernel's stack walk keeps (PERF_MAX_STACK_DEPTH)
DEFAULT_FRAMES: dict[StackKind, int] = {"user": 64, "kernel": 32}


@dataclass(frozen=True, slots=True)
class StackType:
    """The call stack at the event (`ustack`, `kstack(N)`): its innermost `limit` frames.
    A stack can be printed and be a `by` key; no operator takes one."""

    kind: StackKind
    limit: int

    def __str__(self) -> str:
        return f"{self.kind} stack (up to {self.limit} frames)"


@dataclass(frozen=True, slots=True)
class SymType:
    """`usym(addr)`: a code address of the traced process, shown as the symbol it falls
    in (`worker+0x0`), named in user space with the process's module maps. In C it is
    the address; the record or key also carries the pid. Like a stack, it can be
    printed and be a `by` key; no operator takes one."""

    def __str__(self) -> str:
        return "user symbol"


Type = IntType | StrType | BoolType | StackType | SymType

INT8, INT16, INT32, INT64 = (IntType(b, True) for b in (8, 16, 32, 64))
UINT8, UINT16, UINT32, UINT64 = (IntType(b, False) for b in (8, 16, 32, 64))
BOOL = BoolType()
DURATION = IntType(64, False, "ns")


def arithmetic_result(a: IntType, b: IntType) -> IntType:
    """The common 64-bit type of a binary arithmetic, bitwise or comparison operation."""
    if (not a.signed and a.bits == 64) or (not b.signed and b.bits == 64):
        return UINT64
    return INT64


def with_unit(t: IntType, a: IntType, b: IntType) -> IntType:
    """`t` (the result of `a + b` or `a - b`) keeping the unit both operands share."""
    if a.unit is not None and a.unit == b.unit:
        return IntType(t.bits, t.signed, a.unit)
    return t


def promoted(a: IntType) -> IntType:
    """The 64-bit type a lone operand (unary op, shift's left side) is widened to."""
    return UINT64 if (not a.signed and a.bits == 64) else INT64


def describe(t: Type) -> str:
    return str(t)
