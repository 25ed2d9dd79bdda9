"""Lower a decoded USDT operand to BPF C statements that read it from `struct pt_regs *ctx`.

Contract: `lower_operand(arg, site_pc, machine, dest)` returns C statements (one per list
item, already indented inside any block they open) that assign the argument's value to the
C lvalue `dest`. The caller declares `dest` with `dest_type(arg)`:
- `__s64` for signed integer arguments (`-N@`): the SIZE-byte value sign-extended;
- `__u64` for unsigned integer arguments and for float arguments (`Nf@`): the SIZE-byte
  value zero-extended; for floats these are the raw IEEE-754 bits, to be reinterpreted by
  the caller as `float` (4f) or `double` (8f).

Only generated text reaches C: register members come from each architecture's own table,
integers are formatted here, and operand text is never emitted. Memory is read with
`bpf_probe_read_user` into a temporary of exactly SIZE bytes. A rip-relative global is read
at `ctx->ip - SITE_PC + ADDRESS`: in a uprobe handler `ctx->ip` is the probe's runtime
address, so the difference is the load bias (works for PIE and shared libraries, no pid).
Unreadable/undecodable operands and a `RipRel` without an address raise ValueError: the
resolver must have refused them with a user-facing error before rendering.
"""

from __future__ import annotations

import re

from planrunner.usdt.model import ArgOperand, Const, Mem, Reg, RipRel
from planrunner.usdt.operands import aarch64, const_value, x86_64

# machine -> (allowed pt_regs members, instruction-pointer member)
_ARCH: dict[str, tuple[frozenset[str], str]] = {
    "EM_X86_64": (x86_64.PT_REGS_FIELDS, "ip"),
    "EM_AARCH64": (aarch64.PT_REGS_FIELDS, "pc"),
}
_DEST = re.compile(r"[A-Za-z_]\w*((->|\.)[A-Za-z_]\w*|\[\d+\])*")
_TMP = "_pr_v"
_INT64_MIN = -(1 << 63)


def dest_type(arg: ArgOperand) -> str:
    """The C type the caller declares `dest` with."""
    return "__s64" if arg.signed and not arg.is_float else "__u64"


def _ctype(size: int, signed: bool) -> str:
    if size not in (1, 2, 4, 8):
        raise ValueError(f"unsupported operand size {size}")
    return f"__{'s' if signed else 'u'}{size * 8}"


def lower_operand(arg: ArgOperand, site_pc: int, machine: str, dest: str) -> list[str]:
    if machine not in _ARCH:
        raise ValueError(f"no operand lowering for {machine}")
    if not _DEST.fullmatch(dest):
        raise ValueError(f"refusing to emit C for destination {dest!r}")
    if not arg.readable:
        raise ValueError(f"operand {arg.text!r} is not readable: {arg.operand}")
    signed = arg.signed and not arg.is_float
    op = arg.operand
    if isinstance(op, Const):
        return [f"{dest} = {_const_literal(arg, signed)};"]
    if isinstance(op, Reg):
        value = _reg_value(op, machine)
        return [f"{dest} = {_extend(value, arg.size, signed)};"]
    if isinstance(op, Mem):
        return _load(_mem_address(op, machine), arg.size, signed, dest)
    if isinstance(op, RipRel):
        return _load(_rip_address(op, site_pc, machine), arg.size, signed, dest)
    raise ValueError(f"unknown operand kind {type(op).__name__}")


def _const_literal(arg: ArgOperand, signed: bool) -> str:
    value = const_value(arg)
    if signed:
        if value == _INT64_MIN:  # `-9223372036854775808LL` would overflow before negation
            return "(-9223372036854775807LL - 1)"
        return f"{value}LL"
    if value < 0:  # a float constant marked signed: keep the raw bits unsigned
        value &= (1 << (arg.size * 8)) - 1
    return f"{value}ULL"


def _field(reg: Reg, machine: str) -> str:
    fields, _ = _ARCH[machine]
    if reg.field not in fields:
        raise ValueError(f"register member {reg.field!r} is not in the {machine} pt_regs table")
    return f"ctx->{reg.field}"


def _reg_value(reg: Reg, machine: str) -> str:
    value = _field(reg, machine)
    if reg.shift not in (0, 8):
        raise ValueError(f"unsupported register shift {reg.shift}")
    return f"({value} >> {reg.shift})" if reg.shift else value


def _extend(value: str, size: int, signed: bool) -> str:
    wide = "__s64" if signed else "__u64"
    if size == 8:
        return f"({wide}){value}"
    return f"({wide})({_ctype(size, signed)}){value}"


def _uint(value: int) -> str:
    return f"{value}ULL"


def _mem_address(mem: Mem, machine: str) -> str:
    terms: list[str] = []
    if mem.base is not None:
        terms.append(f"(__u64){_field(mem.base, machine)}")
    if mem.index is not None:
        if mem.scale not in (1, 2, 4, 8):
            raise ValueError(f"unsupported scale {mem.scale}")
        index = f"(__u64){_field(mem.index, machine)}"
        terms.append(index if mem.scale == 1 else f"{index} * {mem.scale}")
    if not terms:
        raise ValueError("memory operand without a register")
    expr = " + ".join(terms)
    if mem.disp > 0:
        expr += f" + {_uint(mem.disp)}"
    elif mem.disp < 0:
        expr += f" - {_uint(-mem.disp)}"
    return expr


def _rip_address(rip: RipRel, site_pc: int, machine: str) -> str:
    if rip.address is None:
        raise ValueError(f"rip-relative operand {rip.symbol!r} has no resolved address")
    if site_pc < 0 or rip.address < 0:
        raise ValueError("addresses must be non-negative")
    _, ip = _ARCH[machine]
    return f"(__u64)ctx->{ip} - {site_pc:#x}ULL + {rip.address:#x}ULL"


def _load(address: str, size: int, signed: bool, dest: str) -> list[str]:
    return [
        "{",
        f"    {_ctype(size, signed)} {_TMP} = 0;",
        f"    bpf_probe_read_user(&{_TMP}, sizeof({_TMP}), (void *)({address}));",
        f"    {dest} = {_extend(_TMP, 8, signed)};",
        "}",
    ]
