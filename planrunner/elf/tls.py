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
from typing import Any

from planrunner import inputs
from planrunner.errors import ResolveError

PT_TLS = 7
DF_1_PIE = 0x08000000


@dataclass(frozen=True, slots=True)
class TlsSegment:
    vaddr: int
    memsz: int
    align: int
    executable: bool = True  # the module is a program (ET_EXEC, PIE), not a library

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
            inputs.opened_fd(path, fh.fileno())
            elf = ELFFile(fh)
            segs = list(elf.iter_segments())
            tls = [s for s in segs if s["p_type"] == "PT_TLS"]
            if not tls:
                return None
            return TlsSegment(tls[0]["p_vaddr"], tls[0]["p_memsz"], tls[0]["p_align"],
                              _is_program(elf, segs))
    except (OSError, ELFError, struct.error) as exc:
        raise ResolveError(f"cannot read the program headers of {path}: {exc}") from None


def _is_program(elf: Any, segs: list[Any]) -> bool:
    """ET_EXEC, or ET_DYN with an interpreter or DF_1_PIE (a PIE): the module whose TLS
    block sits right below the thread pointer. A shared library's block is placed at
    load time, so `var@tpoff` means nothing there."""
    if elf["e_type"] == "ET_EXEC" or any(s["p_type"] == "PT_INTERP" for s in segs):
        return True
    for seg in segs:
        if seg["p_type"] == "PT_DYNAMIC":
            for tag in seg.iter_tags():
                if tag.entry.d_tag == "DT_FLAGS_1" and tag.entry.d_val & DF_1_PIE:
                    return True
    return False


def x86_64_tpoff(st_value: int, segment: TlsSegment) -> int:
    """The offset from the thread pointer of the executable's TLS variable at st_value."""
    return st_value - segment.block_size
