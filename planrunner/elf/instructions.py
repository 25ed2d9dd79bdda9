"""Where instructions start in a function: a uprobe at `SYMBOL+OFFSET` must sit on one.

A uprobe replaces the byte at its address with a breakpoint; in the middle of an
instruction that corrupts the instruction (wrong results or SIGSEGV in the target,
and in every process that maps the library when the probe is system-wide). So a
non-zero offset is checked before anything is attached:

- x86-64 (variable length): the function is decoded from its start with capstone, a
  maintained disassembler (Debian's python3-capstone), imported only here and only
  when an offset is non-zero;
- aarch64 (fixed 4-byte instructions): the offset must be a multiple of 4.

`check_offset` raises ResolveError (unlocated; the caller places it at the plan's spec)
naming the nearest instruction starts on either side.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from planrunner import inputs
from planrunner.elf.reader import vaddr_to_offset
from planrunner.errors import ResolveError

MAX_X86_INSN = 15  # the longest x86 instruction, in bytes
AARCH64_INSN = 4


def instructions(code: bytes, machine: str, limit: int) -> tuple[tuple[int, int], ...]:
    """(offset, length) of the instructions of `code` (a function's bytes, from its start)
    that start at or before `limit`, decoding linearly from offset 0. On x86-64 decoding
    stops at the first bytes that are not a whole instruction: what came before is
    returned."""
    if machine == "EM_AARCH64":  # fixed width: no decoding needed
        return tuple((o, AARCH64_INSN) for o in range(0, limit + 1, AARCH64_INSN))
    if machine != "EM_X86_64":
        raise ResolveError(f"cannot check instruction boundaries on {machine}")
    md = x86_64_decoder()
    out = []
    for address, length, _mnemonic, _operands in md.disasm_lite(code, 0):
        if address > limit:
            break
        out.append((address, length))
    return tuple(out)


def check_offset(path: str, name: str, start: int, size: int, offset: int,
                 machine: str) -> None:
    """Refuse `name+offset` (function at vaddr `start`, `size` bytes, 0 if unknown) unless
    an instruction starts there."""
    if offset == 0:
        return
    code = b""
    if machine != "EM_AARCH64":
        # enough for the instruction covering `offset` and the whole one after it
        end = offset + 2 * MAX_X86_INSN
        code = read_code(path, start, min(end, size) if size else end)
    insns = instructions(code, machine, offset + MAX_X86_INSN)
    starts = [o for o, _length in insns]
    if offset in starts:
        return
    if not any(o < offset < o + length for o, length in insns):
        decoded = f"+{starts[-1]}" if starts else "the first instruction"
        raise ResolveError(
            f"offset {offset} of '{name}' cannot be checked: its code does not decode as "
            f"x86-64 instructions past {decoded}",
            hints=("a uprobe must start at an instruction boundary; check the offset "
                   f"with `objdump -d --start-address={start:#x} {path}`",))
    before, after = nearest(starts, offset, size or None)
    near = ", ".join(f"+{o}" for o in (before, after) if o is not None)
    raise ResolveError(
        f"offset {offset} of '{name}' is inside an instruction; nearest instruction "
        f"starts: {near}",
        hints=("a uprobe in the middle of an instruction corrupts it (wrong results or a "
               "crash in the traced program): use an offset where an instruction starts",
               f"`objdump -d --start-address={start:#x} --stop-address="
               f"{start + offset + MAX_X86_INSN:#x} {path}` shows them"))


def nearest(starts: Sequence[int], offset: int,
            size: int | None) -> tuple[int | None, int | None]:
    """The last instruction start before `offset` and the first after it (None: none, or
    past the function's end)."""
    before = max((s for s in starts if s < offset), default=None)
    after = min((s for s in starts if s > offset), default=None)
    if after is not None and size is not None and after >= size:
        after = None
    return before, after


def read_code(path: str, vaddr: int, length: int) -> bytes:
    fd = os.open(path, os.O_RDONLY)
    try:
        inputs.opened_fd(path, fd)
        return os.pread(fd, length, vaddr_to_offset(path, vaddr))
    finally:
        os.close(fd)


def x86_64_decoder(purpose: str = "checking a uprobe's +OFFSET",
                   instead: str = "probe the function's entry (no +OFFSET)") -> Any:
    """A capstone.Cs for x86-64 (capstone ships no type information)."""
    try:
        import capstone
    except ImportError:
        raise ResolveError(
            f"{purpose} needs the capstone disassembler, which is not installed",
            hints=("apt-get install python3-capstone (or pip install capstone), or "
                   f"{instead}",)) from None
    md = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)
    md.detail = False
    return md


# Prefixes that may come before an EVEX-encoded instruction (segment overrides, address
# size); 0x62 after them is EVEX in 64-bit mode (BOUND does not exist there).
_EVEX_LEAD = frozenset({0x26, 0x2E, 0x36, 0x3E, 0x64, 0x65, 0x67})


def starts_evex(path: str, vaddr: int, machine: str) -> bool:
    """Whether the instruction at `vaddr` is EVEX-encoded (AVX-512: glibc's evex
    memset, strchr, strchrnul, rawmemchr, wcschr start with one). A uprobe on such an
    instruction is single-stepped wrongly by the kernel: measured on Linux 6.18 (AMD
    EPYC), strchr then returned a wrong pointer on every call and memset filled
    wrong bytes, so the traced program computed garbage (BENCHMARKS.md, "Issue 29")."""
    if machine != "EM_X86_64":
        return False
    code = read_code(path, vaddr, MAX_X86_INSN)
    for byte in code:
        if byte not in _EVEX_LEAD:
            return byte == 0x62
    return False


# Legacy prefixes (lock, rep, operand and address size, segments)
_PREFIXES = frozenset({0xF0, 0xF2, 0xF3, 0x66, 0x67, 0x26, 0x2E, 0x36, 0x3E, 0x64, 0x65})


def starts_locked(path: str, vaddr: int, machine: str) -> bool:
    """Whether the instruction at `vaddr` has a `lock` prefix: the kernel refuses a
    uprobe there (ENOTSUPP; libc's pthread_spin_lock starts with `lock decl`). Known
    before attaching, a set leaves the function out instead of splitting its link to
    find it (runtime/attach_sets.py: ~1 s for libc's 1,880 functions)."""
    if machine != "EM_X86_64":
        return False
    for byte in read_code(path, vaddr, MAX_X86_INSN):
        if byte == 0xF0:
            return True
        if byte not in _PREFIXES:
            return False
    return False


def evex_error(name: str, path: str, vaddr: int, machine: str) -> ResolveError:
    """The refusal of a uprobe at an EVEX instruction, naming the next instruction."""
    code = read_code(path, vaddr, 2 * MAX_X86_INSN)
    insns = instructions(code, machine, MAX_X86_INSN)
    after = f"+{insns[1][0]}" if len(insns) > 1 else "a later instruction"
    return ResolveError(
        f"'{name}' starts with an AVX-512 (EVEX) instruction at {vaddr:#x}: the kernel "
        "executes a uprobe's instruction of that kind wrongly, and the traced program "
        "would compute wrong results", hints=(
            f"probe {name}{after} (the next instruction): its arguments are still in "
            "their registers when the first instruction only reads them",))
