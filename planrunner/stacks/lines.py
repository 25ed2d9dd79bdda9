"""Source lines of one module, by link-time address, from its DWARF line table.

`LineTable.load(path, build_id)` opens the file, else its build-id debug file
(symtab.debug_file: Debian's -dbgsym packages), whichever has `.debug_info` and
`.debug_line`; `lookup(vaddr)` -> (file, line) or None. Used for pprof's lines
(output/pprof.py) at the end of a run. Only the compilation units that hold the
addresses looked up are decoded (found through `.debug_aranges`: libc's whole line
table takes pyelftools seconds, one unit milliseconds); a module without aranges is
decoded whole when its `.debug_line` is at most MAX_LINE_BYTES, else it has no lines.
A module without line tables (most distribution builds without their debug package)
has none. File names are as the line table gives them (relative to the build
directory when the compiler was given a relative path).
"""

from __future__ import annotations

import bisect
import os
from typing import Any

from planrunner.stacks.symtab import DEBUG_ROOT, debug_file

MAX_LINE_BYTES = 4 << 20
_Rows = tuple[tuple[int, ...], tuple[tuple[str, int] | None, ...]]
_NONE: _Rows = ((), ())


class LineTable:
    """The line rows of one module, decoded a compilation unit at a time."""

    def __init__(self, dwarf: Any = None, handle: Any = None) -> None:
        self._dwarf = dwarf
        self._handle = handle  # the open file pyelftools reads from
        self._aranges: Any = None
        self._units: dict[int, _Rows] = {}  # CU offset -> rows
        self._whole: _Rows | None = None  # every unit, when there are no aranges

    @classmethod
    def load(cls, path: str | None, build_id: str | None = None,
             debug_root: str = DEBUG_ROOT) -> LineTable:
        """path None: only the build-id debug file (the mapped file is not trusted)."""
        for candidate in (path, debug_file(build_id, debug_root)):
            if candidate:
                table = _open(candidate)
                if table is not None:
                    return table
        return cls()

    @property
    def empty(self) -> bool:
        return self._dwarf is None

    def lookup(self, vaddr: int) -> tuple[str, int] | None:
        if self._dwarf is None:
            return None
        try:
            rows = self._rows_for(vaddr)
        except Exception:  # noqa: BLE001 - pyelftools on a damaged file: no line, not a crash
            return None
        addresses, values = rows
        i = bisect.bisect_right(addresses, vaddr) - 1
        return values[i] if i >= 0 else None

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None

    def _rows_for(self, vaddr: int) -> _Rows:
        if self._whole is not None:
            return self._whole
        if self._aranges is None:
            self._aranges = self._dwarf.get_aranges() or False
        if self._aranges is False:
            self._whole = _decode(self._dwarf, self._dwarf.iter_CUs()) \
                if self._line_bytes() <= MAX_LINE_BYTES else _NONE
            return self._whole
        offset = self._aranges.cu_offset_at_addr(vaddr)
        if offset is None:
            return _NONE
        rows = self._units.get(offset)
        if rows is None:
            rows = self._units[offset] = _decode(self._dwarf,
                                                 [self._dwarf.get_CU_at(offset)])
        return rows

    def _line_bytes(self) -> int:
        sec = self._dwarf.debug_line_sec
        return int(sec.size) if sec is not None else 0


def _open(path: str) -> LineTable | None:
    from elftools.common.exceptions import ELFError
    from elftools.elf.elffile import ELFFile

    try:
        handle = open(path, "rb")  # noqa: SIM115 - kept open: units decode on demand
    except OSError:
        return None
    try:
        elf = ELFFile(handle)
        if (elf.get_section_by_name(".debug_line") is None
                or elf.get_section_by_name(".debug_info") is None):
            handle.close()
            return None
        return LineTable(elf.get_dwarf_info(), handle)
    except (ELFError, ValueError, KeyError, IndexError, AssertionError):
        handle.close()
        return None


def _decode(dwarf: Any, units: Any) -> _Rows:
    rows: dict[int, tuple[str, int] | None] = {}
    for cu in units:
        program = dwarf.line_program_for_CU(cu)
        if program is not None:
            _rows(program, rows)
    addresses = sorted(rows)
    return tuple(addresses), tuple(rows[a] for a in addresses)


def _rows(program: Any, rows: dict[int, tuple[str, int] | None]) -> None:
    version = program.header["version"]
    files, dirs = program.header["file_entry"], program.header["include_directory"]
    base = 0 if version >= 5 else 1  # DWARF 5 numbers files and directories from 0
    names: dict[int, str] = {}

    def name(index: int) -> str:
        got = names.get(index)
        if got is None:
            try:
                entry = files[index - base]
                file = entry.name.decode("utf-8", "replace")
                d = entry.dir_index - base
                if not os.path.isabs(file) and 0 <= d < len(dirs) and (version >= 5
                                                                       or entry.dir_index):
                    file = os.path.join(dirs[d].decode("utf-8", "replace"), file)
            except (IndexError, AttributeError):
                file = ""
            got = names[index] = file
        return got

    for entry in program.get_entries():
        state = entry.state
        if state is None:
            continue
        if state.end_sequence:
            rows.setdefault(state.address, None)  # a later sequence may start here
        else:
            rows[state.address] = (name(state.file), state.line)
