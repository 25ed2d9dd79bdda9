"""USDT data model: probes, their sites (locations) and decoded argument operands.

Pure data. Operand parsers (usdt/operands/) produce `ArgOperand`s; the ELF reader
produces `NoteRecord`s (elf/stapsdt.py); resolution groups them into `UsdtProbe`s.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from planrunner.registers import Register

# --- operands ---------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Const:
    """An immediate: `$5`, `$-1`, aarch64 `5`. Stored as the exact integer written."""

    value: int


@dataclass(frozen=True, slots=True)
class Reg:
    """The value of a register. `reg` is which register of the binary's architecture
    (planrunner/registers.py: the 64-bit one `%eax` and `%ah` are views of, `x1` for
    `w1`), taken from the arch's own table, never from user text; the member of
    `struct pt_regs` that holds it is C, named by render/operand_c.py. `shift` is 8 for
    the x86 high-byte registers `%ah %bh %ch %dh` (bits 8-15), else 0."""

    reg: Register
    name: str  # the register as written, e.g. "eax", "r8d", "ah", "w1"
    shift: int = 0


@dataclass(frozen=True, slots=True)
class Mem:
    """Memory at `base + index*scale + disp` (SIZE bytes are loaded from user memory)."""

    base: Reg | None
    disp: int = 0
    index: Reg | None = None
    scale: int = 1


@dataclass(frozen=True, slots=True)
class RipRel:
    """A global read rip-relative: `sym+off(%rip)`. `address` (the symbol's link-time
    vaddr + offset) is filled in at resolve time from the symbol table; at run time
    the thunk rebases it with `ctx->ip - site_pc`, so no pid is needed."""

    symbol: str
    offset: int = 0
    address: int | None = None


@dataclass(frozen=True, slots=True)
class SymMem:
    """Memory at `symbol + offset + base + index*scale` without %rip: what non-PIC code
    writes for a global indexed by registers (`table(,%rax,4)`, `stab+16(,%rcx,8)`,
    `ctab(%rdi)`, `big-8(,%rdi,8)`), and, with `reloc="dtpoff"`, a local-dynamic
    thread-local in a shared library (`sarr@dtpoff(%rax,%rbx,8)`: %rax holds the
    module's TLS block, the symbol is its offset there).

    `value` is filled in at resolve time from the symbol table: for `reloc="addr"` the
    symbol's link-time vaddr + offset, rebased at run time like `RipRel` (`ctx->ip -
    site_pc`, 0 in non-PIE code); for `reloc="dtpoff"` the symbol's offset in its
    module's TLS block + offset, used as is. A literal base (`0x404040(,%rcx,4)`) is a
    plain `Mem` with no base register: an absolute address, never rebased."""

    symbol: str
    offset: int = 0
    base: Reg | None = None
    index: Reg | None = None
    scale: int = 1
    reloc: Literal["addr", "dtpoff"] = "addr"
    value: int | None = None


@dataclass(frozen=True, slots=True)
class TlsMem:
    """Thread-local memory: `%fs:` on x86-64, at `thread pointer + tpoff(symbol) + disp
    + base + index*scale` (`%fs:tv@tpoff`, `%fs:0xfffffffffffffffc`, `%fs:16(%rax)`,
    `%fs:(%rax,%rdi,8)`, `%fs:sarr@tpoff(,%rdi,8)`).

    `disp` is the literal displacement as a signed 64-bit value (gas prints -4 as
    `0xfffffffffffffffc`). `symbol` names a local-exec variable (`var@tpoff`); its
    `tpoff` (the variable's offset from the thread pointer, negative on x86-64) is
    filled in at resolve time from the symbol table and the PT_TLS header
    (elf/tls.py). The thread pointer is the task's `thread.fsbase`, read in BPF at an
    offset taken from the running kernel's BTF (elf/btf.py)."""

    disp: int = 0
    base: Reg | None = None
    index: Reg | None = None
    scale: int = 1
    symbol: str | None = None
    tpoff: int | None = None


@dataclass(frozen=True, slots=True)
class Unreadable:
    """A decoded operand that BPF cannot read (`%xmm0`, `%gs:`, `%st0`, `v0`)."""

    reason: str


@dataclass(frozen=True, slots=True)
class Undecodable:
    """Text no parser understands. Kept in place so argument indexes never shift."""

    reason: str
    column: int = 0  # 0-based position in `ArgOperand.text` where decoding failed


Operand = Const | Reg | Mem | RipRel | SymMem | TlsMem | Unreadable | Undecodable


@dataclass(frozen=True, slots=True)
class ArgOperand:
    """One `[-]SIZE[f]@OPERAND` of a note. `size` in bytes (8 when omitted)."""

    text: str
    size: int
    signed: bool
    is_float: bool
    operand: Operand

    @property
    def readable(self) -> bool:
        return not isinstance(self.operand, Unreadable | Undecodable)


# --- probes and sites -------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class ProbeSite:
    """One location of a probe in one binary.

    `pc` is the note's address after the `.stapsdt.base` adjustment (a link-time vaddr);
    `file_offset` is what uprobes attach to; `semaphore_offset` is the file offset of the
    semaphore (the kernel's ref_ctr_offset), 0 when the site has none.
    """

    pc: int
    file_offset: int
    semaphore: int  # semaphore vaddr, 0 when none
    semaphore_offset: int
    args_text: str
    args: tuple[ArgOperand, ...]


@dataclass(frozen=True, slots=True)
class UsdtProbe:
    """A USDT probe (provider:name) of one ELF file, with its sites."""

    path: str
    provider: str
    name: str
    sites: tuple[ProbeSite, ...]

    @property
    def qualified(self) -> str:
        return f"{self.provider}:{self.name}"

    @property
    def arg_count(self) -> int:
        return max((len(s.args) for s in self.sites), default=0)
