"""Source lines of one module, by link-time address, from its DWARF line table.

`LineTable.load(path, build_id)` reads `.debug_line` (pyelftools' line programs) of the
file, else of its build-id debug file (symtab.debug_file: Debian's -dbgsym packages);
`lookup(vaddr)` -> (file, line) or None. Used for pprof's Line.line (output/pprof.py),
read once per module at the end of a run. A module without line tables (most
distribution builds without their debug package) has an empty table; one whose
`.debug_line` is larger than MAX_LINE_BYTES is not read (pyelftools would take minutes
over a large library) and has an empty table too.
"""

from __future__ import annotations

import bisect
import os
from dataclasses import dataclass
from typing import Any

from planrunner.stacks.symtab import DEBUG_ROOT, debug_file

MAX_LINE_BYTES = 8 << 20


@dataclass(frozen=True, slots=True)
class LineTable:
    addresses: tuple[int, ...]  # sorted row addresses
    rows: tuple[tuple[str, int] | None, ...]  # (file, line); None: a sequence's end

    def lookup(self, vaddr: int) -> tuple[str, int] | None:
        i = bisect.bisect_right(self.addresses, vaddr) - 1
        return self.rows[i] if i >= 0 else None

    @classmethod
    def load(cls, path: str | None, build_id: str | None = None,
             debug_root: str = DEBUG_ROOT) -> LineTable:
        """path None: only the build-id debug file (the mapped file is not trusted)."""
        for candidate in (path, debug_file(build_id, debug_root)):
            if candidate:
                table = _read(candidate)
                if table.addresses:
                    return table
        return cls((), ())


def _read(path: str) -> LineTable:
    from elftools.common.exceptions import ELFError
    from elftools.elf.elffile import ELFFile

    rows: dict[int, tuple[str, int] | None] = {}
    try:
        with open(path, "rb") as fh:
            elf = ELFFile(fh)
            sec = elf.get_section_by_name(".debug_line")
            if sec is None or sec.data_size > MAX_LINE_BYTES or not elf.has_dwarf_info():
                return LineTable((), ())
            dwarf = elf.get_dwarf_info()
            for cu in dwarf.iter_CUs():
                program = dwarf.line_program_for_CU(cu)
                if program is not None:
                    _rows(program, rows)
    except (OSError, ELFError, ValueError, KeyError, IndexError, AssertionError):
        return LineTable((), ())  # no table rather than a wrong one
    addresses = sorted(rows)
    return LineTable(tuple(addresses), tuple(rows[a] for a in addresses))


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
