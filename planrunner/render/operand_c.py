"""Lower a decoded USDT operand to BPF C statements that read it from `struct pt_regs *ctx`.

Contract: `lower_operand(arg, site_pc, machine, dest)` returns C statements (one per list
item, already indented inside any block they open) that assign the argument's value to the
C lvalue `dest`. The caller declares `dest` with `dest_type(arg)`:
- `__s64` for signed integer arguments (`-N@`): the SIZE-byte value sign-extended;
- `__u64` for unsigned integer arguments and for float arguments (`Nf@`): the SIZE-byte
  value zero-extended; for floats these are the raw IEEE-754 bits, to be reinterpreted by
  the caller as `float` (4f) or `double` (8f).

Only generated text reaches C: the `struct pt_regs` member of each register (the operand
model names registers by identity, planrunner/registers.py) comes from this module's
table of each architecture, the only place that names them; integers are formatted
here, and operand text is never emitted. Memory is read with `bpf_probe_read_user` into
a temporary of exactly SIZE bytes. A rip-relative global is read
at `ctx->ip - SITE_PC + ADDRESS`: in a uprobe handler `ctx->ip` is the probe's runtime
address, so the difference is the load bias (works for PIE and shared libraries, no pid).
A global named without %rip (`SymMem`, non-PIC code: `table(,%rax,4)`) is rebased the
same way; a local-dynamic `var@dtpoff(%rax)` adds the variable's offset in its module's
TLS block to the registers. Thread-local memory (`TlsMem`, `%fs:...`) is read at the
current task's thread pointer, `task->thread.fsbase` (x86-64), loaded with
`bpf_probe_read_kernel` at `PR_TASK_FSBASE_OFFSET`: a macro the C only names, because
the offset is the running kernel's (its BTF), not a header's. `runtime_constants(arg)`
lists the macros an operand's C needs, each with its kernel member (elf/btf.py); the
loader defines them (`-DNAME=N`), so the rendered text stays the same on every host.
`thread.fsbase` is what the kernel last saved: glibc sets the FS base with arch_prctl,
which writes it; a program changing it itself with WRFSBASE (FSGSBASE CPUs) would be
seen only after its next context switch.
Unreadable/undecodable operands and a `RipRel`/`SymMem`/`TlsMem` without its resolved
value raise ValueError: the resolver must have refused them with a user-facing error
before rendering.
"""

from __future__ import annotations

import re

from planrunner.elf.btf import THREAD_POINTER
from planrunner.registers import Arm64Reg, Register, X86Reg, arm64_x
from planrunner.render.model import RuntimeConstant
from planrunner.usdt.model import ArgOperand, Const, Mem, Reg, RipRel, SymMem, TlsMem
from planrunner.usdt.operands import const_value

# The kernel's `struct pt_regs` member holding each register (arch/x86/include/asm/
# ptrace.h; arm64's user_pt_regs: regs[31], sp, pc).
_X86_64_MEMBERS: dict[Register, str] = {
    X86Reg.RAX: "ax", X86Reg.RBX: "bx", X86Reg.RCX: "cx", X86Reg.RDX: "dx",
    X86Reg.RSI: "si", X86Reg.RDI: "di", X86Reg.RBP: "bp", X86Reg.RSP: "sp",
    X86Reg.R8: "r8", X86Reg.R9: "r9", X86Reg.R10: "r10", X86Reg.R11: "r11",
    X86Reg.R12: "r12", X86Reg.R13: "r13", X86Reg.R14: "r14", X86Reg.R15: "r15",
    X86Reg.RIP: "ip",
}
_AARCH64_MEMBERS: dict[Register, str] = {
    **{arm64_x(n): f"regs[{n}]" for n in range(31)}, Arm64Reg.SP: "sp", Arm64Reg.PC: "pc"}
# machine -> (its registers' members, its instruction pointer)
_ARCH: dict[str, tuple[dict[Register, str], Register]] = {
    "EM_X86_64": (_X86_64_MEMBERS, X86Reg.RIP),
    "EM_AARCH64": (_AARCH64_MEMBERS, Arm64Reg.PC),
}
_DEST = re.compile(r"[A-Za-z_]\w*((->|\.)[A-Za-z_]\w*|\[\d+\])*")
_TMP = "_pr_v"
_TP = "_pr_tp"
TASK_FSBASE_OFFSET = RuntimeConstant("PR_TASK_FSBASE_OFFSET", THREAD_POINTER)
_INT64_MIN = -(1 << 63)


def dest_type(arg: ArgOperand) -> str:
    """The C type the caller declares `dest` with."""
    return "__s64" if arg.signed and not arg.is_float else "__u64"


def _ctype(size: int, signed: bool) -> str:
    if size not in (1, 2, 4, 8):
        raise ValueError(f"unsupported operand size {size}")
    return f"__{'s' if signed else 'u'}{size * 8}"


def runtime_constants(arg: ArgOperand) -> tuple[RuntimeConstant, ...]:
    """The macros the C of `arg` uses whose values only the running kernel knows."""
    return (TASK_FSBASE_OFFSET,) if isinstance(arg.operand, TlsMem) else ()


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
    if isinstance(op, SymMem):
        return _load(_sym_address(op, site_pc, machine), arg.size, signed, dest)
    if isinstance(op, TlsMem):
        return _tls_load(op, machine, arg.size, signed, dest)
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


def _member(reg: Register, machine: str) -> str:
    """`ctx->MEMBER`: where the kernel saved `reg` of a `machine` program."""
    members, _ = _ARCH[machine]
    if reg not in members:
        raise ValueError(f"register {reg!r} is not in the {machine} pt_regs table")
    return f"ctx->{members[reg]}"


def _field(reg: Reg, machine: str) -> str:
    return _member(reg.reg, machine)


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


def _register_terms(base: Reg | None, index: Reg | None, scale: int,
                    machine: str) -> list[str]:
    terms: list[str] = []
    if base is not None:
        terms.append(f"(__u64){_field(base, machine)}")
    if index is not None:
        if scale not in (1, 2, 4, 8):
            raise ValueError(f"unsupported scale {scale}")
        reg = f"(__u64){_field(index, machine)}"
        terms.append(reg if scale == 1 else f"{reg} * {scale}")
    return terms


def _plus(expr: str, disp: int) -> str:
    """`expr + N` / `expr - N` as unsigned 64-bit arithmetic (nothing for 0)."""
    if not expr:
        return _uint(disp & ((1 << 64) - 1))
    if disp > 0:
        return f"{expr} + {_uint(disp)}"
    if disp < 0:
        return f"{expr} - {_uint(-disp)}"
    return expr


def _mem_address(mem: Mem, machine: str) -> str:
    """base + index*scale + disp; with no register, `disp` is an absolute address."""
    expr = " + ".join(_register_terms(mem.base, mem.index, mem.scale, machine))
    return _plus(expr, mem.disp)


def _sym_address(sym: SymMem, site_pc: int, machine: str) -> str:
    if sym.value is None:
        raise ValueError(f"operand symbol {sym.symbol!r} has no resolved value")
    terms = _register_terms(sym.base, sym.index, sym.scale, machine)
    if sym.reloc == "dtpoff":  # an offset in the TLS block whose address is in a register
        if not terms:
            raise ValueError("a @dtpoff operand needs a register")
        return _plus(" + ".join(terms), sym.value)
    if site_pc < 0 or sym.value < 0:
        raise ValueError("addresses must be non-negative")
    ip = _member(_ARCH[machine][1], machine)
    return " + ".join([f"(__u64){ip} - {site_pc:#x}ULL + {sym.value:#x}ULL", *terms])


def _tls_load(tls: TlsMem, machine: str, size: int, signed: bool, dest: str) -> list[str]:
    if machine != "EM_X86_64":
        raise ValueError(f"no thread-pointer read for {machine}")
    if tls.symbol is not None and tls.tpoff is None:
        raise ValueError(f"thread-local operand {tls.symbol!r} has no resolved offset")
    offset = tls.disp + (tls.tpoff or 0)
    address = _plus(" + ".join([_TP, *_register_terms(tls.base, tls.index, tls.scale,
                                                       machine)]), offset)
    body = _load(address, size, signed, dest)
    fsbase = TASK_FSBASE_OFFSET.macro
    return [
        "{",
        f"    __u64 {_TP} = 0;  /* the thread pointer: current->thread.fsbase */",
        f"    bpf_probe_read_kernel(&{_TP}, sizeof({_TP}),",
        f"                          (void *)(bpf_get_current_task() + {fsbase}));",
        *["    " + line for line in body],
        "}",
    ]


def _rip_address(rip: RipRel, site_pc: int, machine: str) -> str:
    if rip.address is None:
        raise ValueError(f"rip-relative operand {rip.symbol!r} has no resolved address")
    if site_pc < 0 or rip.address < 0:
        raise ValueError("addresses must be non-negative")
    ip = _member(_ARCH[machine][1], machine)
    return f"(__u64){ip} - {site_pc:#x}ULL + {rip.address:#x}ULL"


def _load(address: str, size: int, signed: bool, dest: str) -> list[str]:
    return [
        "{",
        f"    {_ctype(size, signed)} {_TMP} = 0;",
        f"    bpf_probe_read_user(&{_TMP}, sizeof({_TMP}), (void *)({address}));",
        f"    {dest} = {_extend(_TMP, 8, signed)};",
        "}",
    ]
