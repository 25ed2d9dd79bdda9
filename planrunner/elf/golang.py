"""Go programs: how to recognise one, which of its functions use Go's register ABI, and
where a uprobe may sit in such a function.

- A Go binary has a `.go.buildinfo` or `.gopclntab` section.
- Its functions are listed in `.gopclntab` (Go 1.18+ layout, magic 0xfffffff0/1): entry
  address and name of every Go function, even in a stripped binary. A function there
  whose ELF symbol does not end in `.abi0` uses the register ABI (ABIInternal, Go
  1.17+): integer arguments and results in RAX, RBX, RCX, RDI, RSI, R8, R9, R10, R11;
  an `.abi0` one (assembly) takes its arguments on the stack. A function not listed
  (C code linked by cgo) keeps the C ABI.
- Entry: the prologue compares SP with the goroutine's stack guard
  (`CMP RSP|R12, [R14+0x10]; JBE more`) and the `more` path calls runtime.morestack,
  then jumps back to the entry: a uprobe at offset 0 fires twice when the stack grows.
  The entry probe goes on the instruction after the JBE, where the arguments are still
  in their registers (the check writes only R12).
- Return: a uretprobe replaces the return address on the goroutine stack, which the
  runtime walks and copies ("unexpected return pc", exit 2). A Go function's return is
  probed by uprobes on each of its RET instructions instead (as OBI/Beyla and Pixie do).

Decoding uses capstone (Debian's python3-capstone), as elf/instructions.py does.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from typing import Literal

from planrunner.elf.instructions import read_code, x86_64_decoder
from planrunner.elf.reader import open_binary, sections, vaddr_to_offset
from planrunner.errors import ResolveError
from planrunner.registers import X86Reg

GO_SECTIONS = (".go.buildinfo", ".gopclntab")
# Go's integer argument and result registers, in ABI order
GO_INT_REGS = (X86Reg.RAX, X86Reg.RBX, X86Reg.RCX, X86Reg.RDI, X86Reg.RSI, X86Reg.R8,
               X86Reg.R9, X86Reg.R10, X86Reg.R11)
# `goroutine` in a Go function's probes: R14, which holds the current g in ABIInternal code
# (the address of the goroutine's runtime.g: unique among live goroutines), read as if
# it were the argument after the nine integer registers
GOROUTINE_INDEX = len(GO_INT_REGS) + 1
GOROUTINE_REG = X86Reg.R14
_PCLNTAB_118 = (0xFFFFFFF0, 0xFFFFFFF1)  # Go 1.18-1.19, 1.20+: the same header
STACK_GUARD_OPERAND = "[r14 + 0x10]"  # g.stackguard0 (R14 holds the current g)
PROLOGUE_WINDOW = 8  # the stack check is among a function's first instructions

Abi = Literal["c", "go", "go-abi0"]


@dataclass(frozen=True, slots=True)
class GoFunction:
    """One function of the Go function table."""

    name: str
    entry: int  # link-time vaddr
    end: int  # the next function's entry


@dataclass(frozen=True, slots=True)
class GoSites:
    """Where a Go function's probes sit, as offsets from its entry."""

    entry: int  # after the stack check; 0 when there is none (a leaf without a frame)
    returns: tuple[int, ...]  # every RET
    checked: bool  # the prologue checks the stack guard


def is_go(path: str) -> bool:
    return any(s.name in GO_SECTIONS for s in sections(path))


_FUNCS: dict[tuple[str, int, int, int], dict[int, GoFunction]] = {}


def go_functions(path: str) -> dict[int, GoFunction]:
    """The Go functions of `path` by entry vaddr (empty when it is no Go binary).
    ResolveError for a .gopclntab this reader does not know (Go before 1.18)."""
    st = os.stat(path)
    key = (path, st.st_dev, st.st_ino, st.st_mtime_ns)
    funcs = _FUNCS.get(key)
    if funcs is None:
        funcs = _FUNCS[key] = _read_pclntab(path)
    return funcs


def function_abi(path: str, name: str, vaddr: int) -> Abi:
    """The calling convention of function `name` at `vaddr` of `path`."""
    if not is_go(path):
        return "c"
    if vaddr not in go_functions(path):
        return "c"  # C code linked into the Go program (cgo)
    return "go-abi0" if name.endswith(".abi0") else "go"


def go_sites(path: str, start: int, size: int, machine: str) -> GoSites:
    """The entry and return probe places of the Go function at `start` (`size` bytes)."""
    if machine != "EM_X86_64":
        raise ResolveError(f"Go functions are traced on x86-64 only, not {machine}")
    code = read_code(path, start, size)
    decoder = x86_64_decoder("placing probes in a Go function", "nothing else: a Go "
                             "function's entry and returns are found by decoding it")
    insns = list(decoder.disasm_lite(code, 0))
    returns = tuple(o for o, _n, mnemonic, _ops in insns if mnemonic == "ret")
    entry, checked = _after_stack_check(insns)
    return GoSites(entry, returns, checked)


def _after_stack_check(insns: list[tuple[int, int, str, str]]) -> tuple[int, bool]:
    """(offset of the instruction after the prologue's JBE, True), or (0, False) when
    the function has no stack check (or one that is not the runtime's morestack path)."""
    head = insns[:PROLOGUE_WINDOW]
    for i, (_o, _n, mnemonic, ops) in enumerate(head[:-2]):
        if mnemonic != "cmp" or not ops.endswith(STACK_GUARD_OPERAND):
            continue
        o, n, jump, target = head[i + 1]
        if jump not in ("jbe", "jna") or not _restarts(insns, int(target, 16)):
            return 0, False
        return o + n, True
    return 0, False


def _restarts(insns: list[tuple[int, int, str, str]], target: int) -> bool:
    """Whether the code at `target` calls morestack and jumps back to the entry."""
    after = [i for i in insns if i[0] >= target]
    for _o, _n, mnemonic, ops in after[:16]:
        if mnemonic == "jmp":
            return ops == "0"
    return False


# --- .gopclntab -------------------------------------------------------------------------

def _read_pclntab(path: str) -> dict[int, GoFunction]:
    sec = next((s for s in sections(path) if s.name == ".gopclntab"), None)
    if sec is None:
        return {}
    info = open_binary(path)
    fd = os.open(path, os.O_RDONLY)
    try:
        data = os.pread(fd, sec.size, sec.offset if sec.offset else
                        vaddr_to_offset(info, sec.addr))
    finally:
        os.close(fd)
    order = "<" if info.little_endian else ">"
    try:
        return _parse_pclntab(data, order, path)
    except (struct.error, IndexError, UnicodeDecodeError) as exc:
        raise ResolveError(f"{path}: malformed .gopclntab section: {exc}") from None


def _parse_pclntab(data: bytes, order: str, path: str) -> dict[int, GoFunction]:
    magic, ptr_size = struct.unpack_from(order + "I", data, 0)[0], data[7]
    if magic not in _PCLNTAB_118 or ptr_size != 8:
        raise ResolveError(
            f"{path} is a Go program whose function table (.gopclntab, magic {magic:#x}) "
            "this planrunner cannot read: Go 1.18 or later is needed",
            hints=("rebuild the program with Go 1.18 or later, or probe it as C code "
                   "(argument registers and return probes would then be wrong)",))
    words = struct.unpack_from(order + "8Q", data, 8)
    nfunc, _nfiles, text_start, funcname_off, _cu, _file, _pc, pcln_off = words
    out: dict[int, GoFunction] = {}
    table = struct.unpack_from(f"{order}{2 * (nfunc + 1)}I", data, pcln_off)
    for k in range(nfunc):
        entry_off, func_off = table[2 * k], table[2 * k + 1]
        name_off = struct.unpack_from(order + "i", data, pcln_off + func_off + 4)[0]
        start = funcname_off + name_off
        name = data[start:data.index(b"\0", start)].decode()
        out[text_start + entry_off] = GoFunction(name, text_start + entry_off,
                                                 text_start + table[2 * k + 2])
    return out
