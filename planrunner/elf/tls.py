"""Thread-local storage offsets of an ELF module, for `%fs:var@tpoff` operands.

In a linked executable or shared object, an STT_TLS symbol's st_value is its offset in
the module's TLS block (the PT_TLS image). x86-64 uses TLS variant II: the executable's
block sits just below the thread pointer, so a local-exec variable lives at

    tpoff = st_value - round_up(PT_TLS p_memsz, PT_TLS p_align)

bytes from the thread pointer (negative): the value the linker writes for
R_X86_64_TPOFF32 (bfd's elf_x86_64_tpoff: address - aligned TLS size - TLS segment
start) and where glibc places the main program's block (_dl_determine_tlsoffset, with
the segment's first byte aligned, as ld lays it out). `var@dtpoff` (local-dynamic,
shared objects) is st_value itself: the offset from the start of the module's block.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from planrunner.errors import ResolveError

PT_TLS = 7


@dataclass(frozen=True, slots=True)
class TlsSegment:
    vaddr: int
    memsz: int
    align: int

    @property
    def block_size(self) -> int:
        """p_memsz rounded up to p_align: the distance from the block to the thread pointer."""
        align = max(self.align, 1)
        return (self.memsz + align - 1) // align * align


def tls_segment(path: str) -> TlsSegment | None:
    """The PT_TLS program header of `path` (None when the module has no TLS)."""
    from elftools.common.exceptions import ELFError
    from elftools.elf.elffile import ELFFile

    try:
        with open(path, "rb") as fh:
            for seg in ELFFile(fh).iter_segments():
                if seg["p_type"] == "PT_TLS":
                    return TlsSegment(seg["p_vaddr"], seg["p_memsz"], seg["p_align"])
    except (OSError, ELFError, struct.error) as exc:
        raise ResolveError(f"cannot read the program headers of {path}: {exc}") from None
    return None


def x86_64_tpoff(st_value: int, segment: TlsSegment) -> int:
    """The offset from the thread pointer of the executable's TLS variable at st_value."""
    return st_value - segment.block_size
