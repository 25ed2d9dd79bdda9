"""USDT data model: probes, their sites (locations) and decoded argument operands.

Pure data. Operand parsers (usdt/operands/) produce `ArgOperand`s; the ELF reader
produces `NoteRecord`s (elf/stapsdt.py); resolution groups them into `UsdtProbe`s.
"""

from __future__ import annotations

from dataclasses import dataclass

# --- operands ---------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Const:
    """An immediate: `$5`, `$-1`, aarch64 `5`. Stored as the exact integer written."""

    value: int


@dataclass(frozen=True, slots=True)
class Reg:
    """The value of a register. `field` is the C member of `struct pt_regs` for the
    binary's architecture (x86-64: `ax`, `r8`, `sp`...; aarch64: `regs[3]`, `sp`),
    taken from the arch's own table, never from user text. `shift` is 8 for the x86
    high-byte registers `%ah %bh %ch %dh` (bits 8-15), else 0."""

    field: str
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
class Unreadable:
    """A decoded operand that BPF cannot read from pt_regs (`%xmm0`, `%fs:`, `%st0`, `v0`)."""

    reason: str


@dataclass(frozen=True, slots=True)
class Undecodable:
    """Text no parser understands. Kept in place so argument indexes never shift."""

    reason: str
    column: int = 0  # 0-based position in `ArgOperand.text` where decoding failed


Operand = Const | Reg | Mem | RipRel | Unreadable | Undecodable


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
