"""The registers planrunner reads values from, as identities of each architecture.

A USDT operand (usdt/operands/), a function's argument or result (resolve/sites.py)
and Go's register ABI (elf/golang.py) name a register by one of these; which member
of the kernel's `struct pt_regs` holds it is C, said by render/operand_c.py alone.
The value is the register's 64-bit name as an assembler writes it."""

from __future__ import annotations

from enum import Enum


class X86Reg(Enum):
    """x86-64 general-purpose registers (and %rip)."""

    RAX = "rax"
    RBX = "rbx"
    RCX = "rcx"
    RDX = "rdx"
    RSI = "rsi"
    RDI = "rdi"
    RBP = "rbp"
    RSP = "rsp"
    R8 = "r8"
    R9 = "r9"
    R10 = "r10"
    R11 = "r11"
    R12 = "r12"
    R13 = "r13"
    R14 = "r14"
    R15 = "r15"
    RIP = "rip"


class Arm64Reg(Enum):
    """aarch64 general-purpose registers x0-x30 (x29 is fp, x30 lr), sp and pc."""

    X0 = "x0"
    X1 = "x1"
    X2 = "x2"
    X3 = "x3"
    X4 = "x4"
    X5 = "x5"
    X6 = "x6"
    X7 = "x7"
    X8 = "x8"
    X9 = "x9"
    X10 = "x10"
    X11 = "x11"
    X12 = "x12"
    X13 = "x13"
    X14 = "x14"
    X15 = "x15"
    X16 = "x16"
    X17 = "x17"
    X18 = "x18"
    X19 = "x19"
    X20 = "x20"
    X21 = "x21"
    X22 = "x22"
    X23 = "x23"
    X24 = "x24"
    X25 = "x25"
    X26 = "x26"
    X27 = "x27"
    X28 = "x28"
    X29 = "x29"
    X30 = "x30"
    SP = "sp"
    PC = "pc"


Register = X86Reg | Arm64Reg


def arm64_x(n: int) -> Arm64Reg:
    """x`n` (0-30)."""
    if not 0 <= n <= 30:
        raise ValueError(f"no register x{n}")
    return Arm64Reg(f"x{n}")
