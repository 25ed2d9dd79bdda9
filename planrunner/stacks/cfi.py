"""DWARF call frame information of one module, looked up by link-time address.

`module_cfi(path)` -> ModuleCfi, cached per file (by build-id, else path/dev/inode/mtime);
`ModuleCfi.row_at(vaddr)` -> the `CfaRow` in force at `vaddr` (CFA rule, register
rules, return-address column), or None when no FDE covers it.

pyelftools parses and decodes the CFI (CallFrameInfo, FDE.get_decoded()); what this
module adds is laziness, because parsing all of libc's `.eh_frame` takes ~0.35 s:
- `.eh_frame` is indexed through `.eh_frame_hdr`'s sorted (initial location, FDE address)
  table (read with struct: a few microseconds per entry); only the FDE a pc falls in is
  parsed, by pyelftools, and its decoded table is kept. When the header is absent or
  uses an encoding other than the usual datarel|sdata4, every entry is parsed once.
- `.debug_frame` (in the file, rarely in stripped binaries) is parsed whole, on first need.
DWARF expressions are not evaluated: a CFA given by an expression yields a row whose
`cfa_reg` is None, and register rules keep their kind so the unwinder can refuse them.
"""

from __future__ import annotations

import bisect
import functools
import io
import os
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from planrunner.elf.reader import open_binary, sections
from planrunner.errors import ResolveError

DW_EH_PE_omit = 0xFF
DW_EH_PE_udata4 = 0x03
DW_EH_PE_sdata4 = 0x0B
DW_EH_PE_pcrel = 0x10
DW_EH_PE_datarel = 0x30


@dataclass(frozen=True, slots=True)
class CfaRow:
    """One decoded CFI row. rules: DWARF regno -> (kind, argument); kinds are pyelftools'
    RegisterRule names (OFFSET, VAL_OFFSET, REGISTER, SAME_VALUE, UNDEFINED, EXPRESSION,
    VAL_EXPRESSION, ARCHITECTURAL)."""

    cfa_reg: int | None  # None: the CFA is a DWARF expression
    cfa_offset: int
    rules: dict[int, tuple[str, Any]]
    ra: int  # return-address column of the CIE


@dataclass(frozen=True, slots=True)
class _Fde:
    start: int
    end: int
    pcs: tuple[int, ...]
    rows: tuple[CfaRow, ...]


ROWS_KEPT = 1 << 16  # rows remembered per module by address (ModuleCfi.row_at)


class ModuleCfi:
    """CFI of one ELF file; see the module docstring."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._eh: Any = None  # pyelftools CallFrameInfo over .eh_frame
        self._hdr_starts: list[int] = []
        self._hdr_offsets: list[int] = []
        self._full: list[tuple[int, int, Any]] | None = None  # (start, end, FDE), sorted
        self._full_starts: list[int] = []
        self._debug: list[tuple[int, int, Any]] | None = None
        self._debug_starts: list[int] = []
        self._decoded: dict[tuple[str, int], _Fde | None] = {}
        self.fde_parses = 0  # FDEs parsed and decoded (for cost reports and tests)
        # vaddr -> its row: a profile unwinds the same few return addresses over and over
        self._rows: dict[int, CfaRow | None] = {}
        self._load()

    @property
    def function_starts(self) -> list[int]:
        """Initial locations of the `.eh_frame` FDEs (sorted): one per function, symbols
        or not (fp_detect samples them)."""
        if self._hdr_starts:
            return self._hdr_starts
        return [s for s, _, _ in self._eh_entries()]

    def rows_of(self, vaddr: int) -> tuple[CfaRow, ...]:
        """All rows of the FDE covering `vaddr` (empty when none does)."""
        fde = self._fde_at(vaddr)
        return fde.rows if fde is not None else ()

    def row_span(self, vaddr: int) -> tuple[int, int, CfaRow] | None:
        """The row covering `vaddr` and the addresses it covers, [lo, hi)."""
        fde = self._fde_at(vaddr)
        if fde is None:
            return None
        i = bisect.bisect_right(fde.pcs, vaddr) - 1
        if i < 0:
            return None
        hi = fde.pcs[i + 1] if i + 1 < len(fde.pcs) else fde.end
        return fde.pcs[i], hi, fde.rows[i]

    def row_at(self, vaddr: int) -> CfaRow | None:
        if vaddr in self._rows:
            return self._rows[vaddr]
        span = self.row_span(vaddr)
        row = span[2] if span is not None else None
        if len(self._rows) < ROWS_KEPT:
            self._rows[vaddr] = row
        return row

    # --- lookup -------------------------------------------------------------------------

    def _fde_at(self, vaddr: int) -> _Fde | None:
        if self._eh is not None:
            if self._hdr_starts:
                i = bisect.bisect_right(self._hdr_starts, vaddr) - 1
                if i >= 0:
                    fde = self._decode("eh", self._hdr_offsets[i],
                                       lambda off: self._eh._parse_entry_at(off))
                    if fde is not None and fde.start <= vaddr < fde.end:
                        return fde
            else:
                hit = _find(self._eh_entries(), self._full_starts, vaddr)
                if hit is not None:
                    return self._decode("eh", hit.offset, lambda _: hit)
        entries = self._debug_entries()
        hit = _find(entries, self._debug_starts, vaddr)
        if hit is not None:
            return self._decode("debug", hit.offset, lambda _: hit)
        return None

    def _decode(self, kind: str, offset: int, parse: Callable[[int], Any]) -> _Fde | None:
        key = (kind, offset)
        if key in self._decoded:
            return self._decoded[key]
        self.fde_parses += 1
        try:
            fde = _convert(parse(offset))
        except Exception:  # noqa: BLE001 - pyelftools raises many kinds on odd CFI
            # (an opcode it does not know, e.g. in mariadbd): that function is not unwound
            fde = None
        self._decoded[key] = fde
        return fde

    # --- loading ------------------------------------------------------------------------

    def _load(self) -> None:
        from elftools.dwarf.callframe import CallFrameInfo

        info = open_binary(self.path)
        secs = {s.name: s for s in sections(self.path)}
        self._structs = _structs(info.little_endian, info.elfclass)
        self._little = info.little_endian
        eh = secs.get(".eh_frame")
        if eh is not None and eh.size:
            data = _read(self.path, eh.offset, eh.size)
            self._eh = CallFrameInfo(io.BytesIO(data), len(data), eh.addr, self._structs,
                                     for_eh_frame=True)
            hdr = secs.get(".eh_frame_hdr")
            if hdr is not None and hasattr(self._eh, "_parse_entry_at"):
                self._index_hdr(_read(self.path, hdr.offset, hdr.size), hdr.addr, eh.addr)
        dbg = secs.get(".debug_frame")
        self._debug_sec = dbg if dbg is not None and dbg.size else None

    def _index_hdr(self, hdr: bytes, hdr_addr: int, eh_addr: int) -> None:
        """Read `.eh_frame_hdr`'s binary search table (LSB: version 1, then the encodings of
        eh_frame_ptr, fde_count and the table). Only the layout every linker writes
        (table datarel|sdata4, count udata4) is read; anything else leaves the index empty
        and the whole section is parsed instead."""
        if len(hdr) < 12 or hdr[0] != 1:
            return
        count_enc, table_enc = hdr[2], hdr[3]
        if count_enc != DW_EH_PE_udata4 or table_enc != (DW_EH_PE_datarel | DW_EH_PE_sdata4):
            return
        e = "<" if self._little else ">"
        (count,) = struct.unpack_from(e + "I", hdr, 8)
        table = hdr[12:12 + 8 * count]
        if len(table) < 8 * count:
            return
        starts: list[int] = []
        offsets: list[int] = []
        for loc, fde in struct.iter_unpack(e + "ii", table):
            starts.append(hdr_addr + loc)
            offsets.append(hdr_addr + fde - eh_addr)
        self._hdr_starts, self._hdr_offsets = starts, offsets

    def _eh_entries(self) -> list[tuple[int, int, Any]]:
        if self._full is None:
            self._full = _fdes(self._eh.get_entries()) if self._eh is not None else []
            self._full_starts = [s for s, _, _ in self._full]
        return self._full

    def _debug_entries(self) -> list[tuple[int, int, Any]]:
        if self._debug is None:
            self._debug = []
            if self._debug_sec is not None:
                from elftools.dwarf.callframe import CallFrameInfo
                sec = self._debug_sec
                data = _read(self.path, sec.offset, sec.size)
                cfi = CallFrameInfo(io.BytesIO(data), len(data), sec.addr, self._structs)
                self._debug = _fdes(cfi.get_entries())
            self._debug_starts = [s for s, _, _ in self._debug]
        return self._debug


_CACHE: dict[object, ModuleCfi] = {}


def module_cfi(path: str, build_id: str | None = None) -> ModuleCfi:
    """The CFI of `path`, parsed at most once per file identity. ResolveError when the
    file is not a readable ELF."""
    key: object
    if build_id is None:
        build_id = open_binary(path).build_id
    if build_id:
        key = ("build-id", build_id)
    else:
        try:
            st = os.stat(path)
        except OSError as exc:
            raise ResolveError(f"cannot read {path}: {exc.strerror}") from None
        key = (path, st.st_dev, st.st_ino, st.st_mtime_ns)
    cfi = _CACHE.get(key)
    if cfi is None:
        cfi = _CACHE[key] = ModuleCfi(path)
    return cfi


def clear_cache() -> None:
    _CACHE.clear()


def _convert(entry: Any) -> _Fde | None:
    """A pyelftools FDE -> its rows; None for a CIE or a ZERO terminator."""
    if getattr(entry, "cie", None) is None:
        return None
    start = entry.header["initial_location"]
    ra = entry.cie.header["return_address_register"]
    pcs: list[int] = []
    rows: list[CfaRow] = []
    for line in entry.get_decoded().table:
        cfa = line["cfa"]
        rules = {reg: (rule.type, rule.arg) for reg, rule in line.items()
                 if isinstance(reg, int)}
        pcs.append(line["pc"])
        rows.append(CfaRow(cfa.reg if cfa.expr is None else None, cfa.offset or 0, rules, ra))
    return _Fde(start, start + entry.header["address_range"], tuple(pcs), tuple(rows))


def _fdes(entries: list[Any]) -> list[tuple[int, int, Any]]:
    out = []
    for entry in entries:
        if getattr(entry, "cie", None) is not None:
            start = entry.header["initial_location"]
            out.append((start, start + entry.header["address_range"], entry))
    out.sort(key=lambda x: x[0])
    return out


def _find(entries: list[tuple[int, int, Any]], starts: list[int], vaddr: int) -> Any:
    i = bisect.bisect_right(starts, vaddr) - 1
    if i >= 0 and vaddr < entries[i][1]:
        return entries[i][2]
    return None


@functools.cache
def _structs(little_endian: bool, elfclass: int) -> Any:
    """Building pyelftools' structs costs milliseconds: once per (byte order, class)."""
    from elftools.dwarf.structs import DWARFStructs
    return DWARFStructs(little_endian=little_endian, dwarf_format=32,
                        address_size=8 if elfclass == 2 else 4)


def _read(path: str, offset: int, size: int) -> bytes:
    with open(path, "rb") as fh:
        fh.seek(offset)
        return fh.read(size)
