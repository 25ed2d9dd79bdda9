"""aarch64 STAP SDT operand decoding: features.md section 3.2, rows A1-A11.

Contract: `parse_operand(token)` decodes one `[-]SIZE[f]@OPERAND` token into an
`ArgOperand`; it never raises. Registers map to aarch64 register identities
(planrunner/registers.py) through `register()` only. `wN` is the 32-bit view of `xN`
(SIZE governs how much is taken). SIMD/FP registers are `Unreadable`, and so are
offsets the linker completes (`[x0, #:tprel_lo12_nc:tv]`: a thread-local
variable at the thread pointer tpidr_el0; `[x1, #:lo12:sym]`), with the reason.
"""

from __future__ import annotations

import re

from planrunner.registers import Arm64Reg, arm64_x
from planrunner.usdt.model import ArgOperand, Const, Mem, Operand, Reg, Undecodable, Unreadable
from planrunner.usdt.operands.common import PrefixError, parse_int, parse_prefix

_GPR = re.compile(r"([xw])([0-9]|[12][0-9]|3[01])")
_SIMD = re.compile(r"[vdsqhb]([0-9]|[12][0-9]|3[01])")
_LSL = re.compile(r"lsl\s*#?([0-3])")
# An assembler relocation operator in an offset: `#:tprel_lo12_nc:tv`, `:lo12:sym`.
_RELOC = re.compile(r"#?:([a-z0-9_]+):([A-Za-z_.$][A-Za-z0-9_.$]*)")


def register(name: str) -> Reg | Unreadable | Const | None:
    """A register name as written -> Reg (or Const(0) for the zero register)."""
    m = _GPR.fullmatch(name)
    if m is not None:
        n = int(m.group(2))
        return Reg(Arm64Reg.SP if n == 31 else arm64_x(n), name)
    if name in ("sp", "wsp"):
        return Reg(Arm64Reg.SP, name)
    if name in ("lr", "fp"):
        return Reg(Arm64Reg.X30 if name == "lr" else Arm64Reg.X29, name)
    if name in ("xzr", "wzr"):
        return Const(0)
    if _SIMD.fullmatch(name):
        return Unreadable("SIMD/FP register")
    return None


def parse_operand(token: str) -> ArgOperand:
    pre = parse_prefix(token)
    if isinstance(pre, PrefixError):
        return ArgOperand(token, pre.size, pre.signed, pre.is_float,
                          Undecodable(pre.reason, pre.column))
    op = _parse_body(token[pre.body_at:], pre.body_at)
    if pre.size is None:
        width = 4 if isinstance(op, Reg) and op.name.startswith("w") else 8
        return ArgOperand(token, width, False, False, op)
    return ArgOperand(token, pre.size, pre.signed, pre.is_float, op)


def _parse_body(body: str, col: int) -> Operand:
    if not body:
        return Undecodable("empty operand", col)
    if body.startswith("["):
        return _parse_memory(body, col)
    value = parse_int(body[1:] if body.startswith("#") else body)
    if value is not None:
        return Const(value)
    reg = register(body)
    if reg is None:
        return Undecodable(f"unknown register or constant '{body}'", col)
    return reg


def _parse_memory(body: str, col: int) -> Operand:
    if not body.endswith("]"):
        return Undecodable("expected ']' at the end of a memory operand", col + len(body))
    parts = [p.strip() for p in body[1:-1].split(",")]
    base = _address_reg(parts[0])
    if base is None:
        return Undecodable("expected a base register", col + 1)
    if len(parts) == 1:
        return Mem(base)
    raw = body[1:-1].split(",")
    at = col + 2 + len(raw[0]) + len(raw[1]) - len(raw[1].lstrip())
    second = parts[1]
    reloc = _RELOC.fullmatch(second)
    if reloc is not None and len(parts) == 2:
        return _relocated(reloc.group(1), reloc.group(2))
    disp = parse_int(second[1:] if second.startswith("#") else second)
    if disp is not None and len(parts) == 2:
        return Mem(base, disp)
    if second.startswith("w"):
        return Undecodable("extended 32-bit index registers (wN, sxtw/uxtw) are not supported",
                           at)
    index = _address_reg(second)
    if index is None or index.reg is Arm64Reg.SP:
        return Undecodable("expected an offset or an index register", at)
    if len(parts) == 2:
        return Mem(base, 0, index, 1)
    lsl = _LSL.fullmatch(parts[2]) if len(parts) == 3 else None
    if lsl is None:
        third_at = col + body.find(parts[2], at - col + len(second))
        return Undecodable("only 'lsl #N' index shifts are supported", third_at)
    return Mem(base, 0, index, 1 << int(lsl.group(1)))


def _relocated(operator: str, symbol: str) -> Unreadable:
    """`[xN, #:OP:sym]`: xN holds the high part of an address the linker completes."""
    if "tprel" in operator or "dtprel" in operator or "tls" in operator:
        return Unreadable(f"thread-local variable '{symbol}' (:{operator}: offset from "
                          "the thread pointer tpidr_el0): not readable on aarch64 yet")
    return Unreadable(f"symbol-relative offset (:{operator}:{symbol}): not readable yet")


def _address_reg(text: str) -> Reg | None:
    reg = register(text)
    if isinstance(reg, Reg) and not reg.name.startswith("w"):
        return reg
    return None
