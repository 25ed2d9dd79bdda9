"""x86-64 (AT&T syntax) STAP SDT operand decoding: features.md section 3.1, rows X1-X19.

Contract: `parse_operand(token)` decodes one `[-]SIZE[f]@OPERAND` token into an
`ArgOperand`; it never raises. Register names map to x86-64 register identities
(planrunner/registers.py) through `GPRS` only (never through operand text). Forms BPF cannot
read (SSE/x87/MMX registers, memory relative to a segment other than %fs:) are
`Unreadable`; text not understood is `Undecodable` with the 0-based column where
decoding stopped. Memory forms: `DISP(%BASE,%INDEX,SCALE)` (`Mem`), `sym(%rip)`
(`RipRel`), a symbol without %rip in non-PIC code (`table(,%rax,4)`, `SymMem`), a
local-dynamic `var@dtpoff(%rax)` (`SymMem`), and `%fs:` thread-local memory
(`%fs:var@tpoff`, `%fs:-4`, `%fs:16(%rax)`: `TlsMem`).
"""

from __future__ import annotations

import re

from planrunner.registers import X86Reg
from planrunner.usdt.model import (
    ArgOperand,
    Const,
    Mem,
    Operand,
    Reg,
    RipRel,
    SymMem,
    TlsMem,
    Undecodable,
    Unreadable,
)
from planrunner.usdt.operands.common import Prefix, PrefixError, parse_int, parse_prefix

_LEGACY = ("ax", "bx", "cx", "dx")
_INDEX = ("si", "di", "bp", "sp")


def _gpr_table() -> dict[str, tuple[X86Reg, int, int]]:
    """register name -> (the 64-bit register, width in bytes, shift)."""
    t: dict[str, tuple[X86Reg, int, int]] = {}
    for f in _LEGACY:
        r = X86Reg("r" + f)
        t["r" + f] = (r, 8, 0)
        t["e" + f] = (r, 4, 0)
        t[f] = (r, 2, 0)
        t[f[0] + "l"] = (r, 1, 0)
        t[f[0] + "h"] = (r, 1, 8)  # %ah %bh %ch %dh: bits 8-15
    for f in _INDEX:
        r = X86Reg("r" + f)
        t["r" + f] = (r, 8, 0)
        t["e" + f] = (r, 4, 0)
        t[f] = (r, 2, 0)
        t[f + "l"] = (r, 1, 0)  # %sil %dil %bpl %spl
    for n in range(8, 16):
        f = f"r{n}"
        r = X86Reg(f)
        t[f] = (r, 8, 0)
        t[f + "d"] = (r, 4, 0)
        t[f + "w"] = (r, 2, 0)
        t[f + "b"] = (r, 1, 0)
        t[f + "l"] = (r, 1, 0)  # Intel-style alias gas also accepts
    t["rip"] = (X86Reg.RIP, 8, 0)
    t["eip"] = (X86Reg.RIP, 4, 0)
    return t


GPRS: dict[str, tuple[X86Reg, int, int]] = _gpr_table()

_UNREADABLE = (
    (re.compile(r"xmm([0-9]|[12][0-9]|3[01])"), "SSE register"),
    (re.compile(r"[yz]mm([0-9]|[12][0-9]|3[01])"), "AVX register"),
    (re.compile(r"st(\([0-7]\)|[0-7])?"), "x87 register"),
    (re.compile(r"mm[0-7]"), "MMX register"),
    (re.compile(r"k[0-7]"), "AVX-512 mask register"),
    (re.compile(r"[c-gs]s"), "segment register"),
    (re.compile(r"(cr|dr)[0-9]+"), "control/debug register"),
)
_SEGMENT = re.compile(r"%[c-gs]s:")
_REGNAME = re.compile(r"%([a-z][a-z0-9]*(\([0-7]\))?)")
_SYMBOL = re.compile(r"[A-Za-z_.$][A-Za-z0-9_.$]*")
_TERM = re.compile(r"([+-]?)([^+-]+)")
_RELOCS = ("tpoff", "dtpoff")


def parse_operand(token: str) -> ArgOperand:
    pre = parse_prefix(token)
    if isinstance(pre, PrefixError):
        return ArgOperand(token, pre.size, pre.signed, pre.is_float,
                          Undecodable(pre.reason, pre.column))
    op, implied = _parse_body(token[pre.body_at:], pre.body_at)
    return _with_size(token, pre, op, implied)


def _with_size(token: str, pre: Prefix, op: Operand, implied: int) -> ArgOperand:
    if pre.size is not None:
        return ArgOperand(token, pre.size, pre.signed, pre.is_float, op)
    # No `SIZE@` (STAP_PROBE_ASM, old notes): a register implies its width, else a long.
    return ArgOperand(token, implied, False, False, op)


def _parse_body(body: str, col: int) -> tuple[Operand, int]:
    if not body:
        return Undecodable("empty operand", col), 8
    if body.startswith("$"):
        return _parse_const(body, col), 8
    if body.startswith("%fs:"):
        return _parse_memory(body[4:], col + 4, tls=True), 8
    if _SEGMENT.match(body):
        return Unreadable(f"segment-relative memory ({body[:4]}): only %fs: (the x86-64 "
                          "thread pointer) is read"), 8
    if body.startswith("%"):
        return _parse_register(body, col)
    return _parse_memory(body, col, tls=False), 8


def _parse_const(body: str, col: int) -> Operand:
    value = parse_int(body[1:])
    if value is not None:
        return Const(value)
    if _SYMBOL.fullmatch(body[1:]):
        return Undecodable("a symbol's address as an immediate is not supported", col)
    return Undecodable("expected an integer after '$'", col + 1)


def _register(name: str) -> Reg | Unreadable | None:
    if name in GPRS:
        reg, _, shift = GPRS[name]
        return Reg(reg, name, shift)
    for pattern, reason in _UNREADABLE:
        if pattern.fullmatch(name):
            return Unreadable(reason)
    return None


def _parse_register(body: str, col: int) -> tuple[Operand, int]:
    m = _REGNAME.fullmatch(body)
    if m is None:
        return Undecodable("malformed register", col), 8
    reg = _register(m.group(1))
    if reg is None:
        return Undecodable(f"unknown register %{m.group(1)}", col), 8
    width = GPRS[m.group(1)][1] if isinstance(reg, Reg) else 8
    return reg, width


def _parse_memory(body: str, col: int, *, tls: bool) -> Operand:
    if not body:
        return Undecodable("empty operand", col)
    open_at = body.find("(")
    if open_at < 0:  # an absolute address: `sym`, `0x404040`, `%fs:var@tpoff`, `%fs:-4`
        if _parse_disp(body) is None:
            return Undecodable("expected $CONST, %REG or DISP(%BASE,%INDEX,SCALE)", col)
        return _memory(body, col, None, None, 1, tls)
    if not body.endswith(")"):
        return Undecodable("expected $CONST, %REG or DISP(%BASE,%INDEX,SCALE)", col)
    disp_text, inner = body[:open_at], body[open_at + 1:-1]
    parts = [p.strip() for p in inner.split(",")]
    if len(parts) > 3:
        return Undecodable("too many parts in memory operand", col + open_at)
    inner_col = col + open_at + 1
    base = _address_reg(parts[0], inner_col, allow_rip=not tls) if parts[0] else None
    if isinstance(base, Undecodable):
        return base
    index: Reg | None = None
    scale = None
    if len(parts) > 1:
        index_col = inner_col + len(parts[0]) + 1
        got = _address_reg(parts[1], index_col, allow_rip=False)
        if isinstance(got, Undecodable):
            return got
        index = got
        scale = parse_int(parts[2]) if len(parts) == 3 else 1
        if scale not in (1, 2, 4, 8):
            return Undecodable("scale must be 1, 2, 4 or 8", index_col + len(parts[1]) + 1)
    if base is None and index is None:
        return Undecodable("memory operand without a register", inner_col)
    return _memory(disp_text, col, base, index, scale or 1, tls)


def _memory(disp_text: str, col: int, base: Reg | None, index: Reg | None,
            scale: int, tls: bool) -> Operand:
    disp = _parse_disp(disp_text)
    if disp is None:
        return Undecodable("malformed displacement", col)
    symbol, reloc, offset = disp
    if tls:
        if reloc not in ("", "tpoff"):
            return Undecodable(f"@{reloc} cannot be used with %fs:", col)
        if symbol is not None and reloc != "tpoff":
            return Undecodable("a symbol after %fs: must be a thread-local offset (var@tpoff)",
                               col)
        return TlsMem(_signed64(offset), base, index, scale, symbol)
    if reloc not in ("", "dtpoff"):
        return Undecodable(f"@{reloc} is only meaningful after %fs:", col)
    if base is not None and base.reg is X86Reg.RIP:
        if index is not None:
            return Undecodable("%rip cannot be used with an index register", col)
        if symbol is None or reloc:
            return Undecodable("rip-relative operand without a symbol", col)
        return RipRel(symbol, offset)
    if symbol is not None:
        if reloc == "dtpoff" and base is None:
            return Undecodable("var@dtpoff needs the module's TLS block in a base register",
                               col)
        return SymMem(symbol, offset, base, index, scale, "dtpoff" if reloc else "addr")
    return Mem(base, offset, index, scale)


def _signed64(value: int) -> int:
    """`0xfffffffffffffffc` -> -4: an address displacement wraps at 64 bits."""
    value &= (1 << 64) - 1
    return value - (1 << 64) if value >> 63 else value


def _address_reg(text: str, col: int, *, allow_rip: bool) -> Reg | Undecodable:
    if not text.startswith("%"):
        return Undecodable("expected a register", col)
    name = text[1:]
    if name in GPRS and GPRS[name][1] == 8 and (allow_rip or name != "rip"):
        return Reg(GPRS[name][0], name)
    if name in GPRS:
        return Undecodable(f"%{name} cannot be used as an address register here", col)
    return Undecodable(f"unknown register %{name}", col)


def _parse_disp(text: str) -> tuple[str | None, str, int] | None:
    """`-8`, `0x10`, `sym`, `sym+8`, `24+sym`, `sym-2`, `var@tpoff`, `var@dtpoff+8`
    -> (symbol or None, relocation ("", "tpoff" or "dtpoff"), offset)."""
    text = text.strip()
    if not text:
        return None, "", 0
    terms = _TERM.findall(text)
    if "".join(s + t for s, t in terms) != text:
        return None
    symbol: str | None = None
    reloc = ""
    offset = 0
    for sign, term in terms:
        value = parse_int(term)
        name, at, rel = term.partition("@")
        if value is not None:
            offset += -value if sign == "-" else value
        elif (_SYMBOL.fullmatch(name) and symbol is None and sign != "-"
              and (not at or rel in _RELOCS)):
            symbol, reloc = name, rel
        else:
            return None
    return symbol, reloc, offset
