"""Architecture-neutral pieces of operand decoding.

Contract: `split_args` cuts a note's argument string into operand texts (bracket-aware,
any run of whitespace separates); `parse_prefix` reads the `[-]SIZE[f]@` prefix;
`parse_int` reads an assembler integer (decimal, 0x hex, 0 octal, optional sign).
Nothing here raises on bad input: callers turn `None`/`PrefixError` into `Undecodable`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

READABLE_SIZES = (1, 2, 4, 8)

_PREFIX = re.compile(r"(-?)(\d+)(f?)@")
# Something that looks like a size prefix but is not one, e.g. `8x@%rax`, `-@%rax`.
_BAD_PREFIX = re.compile(r"-?\d*[A-Za-z]*@")
_INT = re.compile(r"[+-]?(0[xX][0-9a-fA-F]+|0[0-7]*|[1-9][0-9]*)")


def split_args(text: str) -> list[tuple[str, int]]:
    """Split on whitespace outside `[]`/`()`; return (token, offset in `text`) pairs."""
    tokens: list[tuple[str, int]] = []
    depth = 0
    start: int | None = None
    for i, ch in enumerate(text):
        if ch.isspace() and depth == 0:
            if start is not None:
                tokens.append((text[start:i], start))
                start = None
            continue
        if start is None:
            start = i
        if ch in "[(":
            depth += 1
        elif ch in "])" and depth > 0:
            depth -= 1
    if start is not None:
        tokens.append((text[start:], start))
    return tokens


@dataclass(frozen=True, slots=True)
class Prefix:
    """The `[-]SIZE[f]@` prefix of an operand."""

    size: int | None  # None when the text has no `SIZE@` prefix
    signed: bool
    is_float: bool
    body_at: int  # offset of the operand proper inside the token


@dataclass(frozen=True, slots=True)
class PrefixError:
    """A prefix that could not be decoded, and where."""

    reason: str
    column: int
    size: int = 8
    signed: bool = False
    is_float: bool = False


def parse_prefix(token: str) -> Prefix | PrefixError:
    m = _PREFIX.match(token)
    if m is None:
        if _BAD_PREFIX.match(token):
            return PrefixError("malformed size prefix (expected [-]SIZE[f]@)", 0)
        return Prefix(None, False, False, 0)
    signed, is_float = m.group(1) == "-", m.group(3) == "f"
    size = int(m.group(2))
    if size not in READABLE_SIZES:
        return PrefixError(
            f"unsupported argument size {size} (only 1, 2, 4 and 8 bytes can be read)",
            m.start(2), size, signed, is_float)
    return Prefix(size, signed, is_float, m.end())


def parse_int(text: str) -> int | None:
    """An assembler integer literal, or None if `text` is not exactly one."""
    if not _INT.fullmatch(text):
        return None
    neg = text.startswith("-")
    digits = text.lstrip("+-")
    if digits[:2].lower() == "0x":
        value = int(digits[2:], 16)
    elif len(digits) > 1 and digits.startswith("0"):
        value = int(digits[1:], 8)
    else:
        value = int(digits)
    return -value if neg else value


def effective_const(value: int, size: int, signed: bool) -> int:
    """The constant as a SIZE-byte value read with the argument's sign.

    GCC prints a 32-bit `0xffffffff` as `$-1`, and clang may print 64-bit values above
    INT64_MAX in unsigned decimal; truncating to SIZE and re-extending gives the value
    the program passed either way."""
    bits = size * 8
    value &= (1 << bits) - 1
    if signed and value >> (bits - 1):
        value -= 1 << bits
    return value
