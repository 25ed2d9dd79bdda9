"""The function symbols of one module, by link-time address.

`ModuleSymbols.load(path, build_id, debug_root)` merges every source found:
  1. the file's own `.symtab` and `.dynsym` (planrunner/elf/symbols.py's reader of code
     symbols, read_function_symbols: the names of data are never decoded);
  2. MiniDebugInfo: `.gnu_debugdata`, an xz-compressed ELF holding a `.symtab` of the
     functions `.dynsym` lacks (Fedora's scheme; Debian does not use it), decompressed
     with stdlib lzma and read by the same reader through a memfd;
  3. a separate debug file found by build-id, DEBUG_ROOT/.build-id/xx/rest.debug
     (Debian's *-dbg / *-dbgsym packages), when installed.
`lookup(vaddr)` -> (name, start) or None. A symbol covers [value, value + size); a
zero-sized one runs to the next symbol (as perf fixes up symbol ends). Where several
names share an address the debug sources win over `.dynsym`, then the name with fewer
leading underscores, then the shorter (`malloc` over `__libc_malloc`).
"""

from __future__ import annotations

import bisect
import lzma
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from planrunner.elf.reader import sections
from planrunner.elf.symbols import FunctionEntry, Symbol, find_symbols, read_function_symbols
from planrunner.errors import ResolveError

DEBUG_ROOT = "/usr/lib/debug"
_FUNC_TYPES = ("STT_FUNC", "STT_GNU_IFUNC")
T = TypeVar("T")
_NESTED = 4  # symbols looked back at for one that encloses the address


@dataclass(frozen=True, slots=True)
class ModuleSymbols:
    starts: tuple[int, ...]
    ends: tuple[int, ...]
    names: tuple[str, ...]
    sources: tuple[str, ...] = field(default=())  # which of the sources had symbols

    def lookup(self, vaddr: int) -> tuple[str, int] | None:
        """The symbol covering `vaddr`: the nearest one below it, or one of the few before
        that when the nearest is a short entry point inside a larger function (libc's
        string functions have several)."""
        hit = self._covering(vaddr)
        return None if hit is None else (self.names[hit[1]], self.starts[hit[1]])

    def span(self, vaddr: int) -> tuple[int, int] | None:
        """The addresses around `vaddr` that `lookup` names as it names `vaddr` (None: no
        symbol covers it): inside the nearest start's bucket, past the ends of the
        entries it skipped, short of the end of the one it found."""
        hit = self._covering(vaddr)
        if hit is None:
            return None
        i, j = hit
        lo = max((self.starts[i], *self.ends[j + 1:i + 1]))
        hi = min(self.ends[j], self.starts[i + 1]) if i + 1 < len(self.starts) \
            else self.ends[j]
        return lo, hi

    def _covering(self, vaddr: int) -> tuple[int, int] | None:
        """(the nearest start's index, the covering symbol's index) for `lookup`."""
        i = bisect.bisect_right(self.starts, vaddr) - 1
        for j in range(i, max(i - _NESTED, -1), -1):
            if vaddr < self.ends[j]:
                return i, j
        return None

    @classmethod
    def load(cls, path: str | None, build_id: str | None = None,
             debug_root: str = DEBUG_ROOT) -> ModuleSymbols:
        """path None: only the build-id debug file (the mapped file is not trusted)."""
        ranked: list[tuple[int, list[FunctionEntry]]] = []
        sources: list[str] = []
        own, named = _safe(path) if path else ([], False)
        if named:
            ranked.append((1, own))
            sources.append("symtab")
        none: tuple[list[FunctionEntry], bool] = ([], False)
        mini, named = _in_debugdata(path, _safe, none) if path else none
        if named:
            ranked.append((2, mini))
            sources.append("gnu_debugdata")
        debug = debug_file(build_id, debug_root)
        if debug is not None:
            syms, named = _safe(debug)
            if named:
                ranked.append((2, syms))
                sources.append("build-id:" + debug)
        return cls.from_entries(ranked, tuple(sources))

    @classmethod
    def from_symbols(cls, ranked: list[tuple[int, list[Symbol]]],
                     sources: tuple[str, ...] = ()) -> ModuleSymbols:
        """From Symbol lists (any type: only code is kept), best rank first."""
        return cls.from_entries(
            [(rank, [(s.name, s.value, s.size, s.hidden) for s in syms
                     if (s.type in _FUNC_TYPES or (s.type == "STT_NOTYPE" and s.size))
                     and s.value])
             for rank, syms in ranked], sources)

    @classmethod
    def from_entries(cls, ranked: list[tuple[int, list[FunctionEntry]]],
                     sources: tuple[str, ...] = ()) -> ModuleSymbols:
        """From code symbols (elf/symbols.read_function_symbols' tuples)."""
        best: dict[int, tuple[tuple[int, int, int, int], str, int]] = {}
        for rank, syms in ranked:
            for name, value, size, hidden in syms:
                have = best.get(value)
                score = (-rank, int(hidden), len(name) - len(name.lstrip("_")), len(name))
                if have is None or score < have[0]:
                    best[value] = (score, name, max(size, have[2] if have else 0))
                elif size > have[2]:
                    best[value] = (have[0], have[1], size)
        starts = sorted(best)
        ends = []
        for i, start in enumerate(starts):
            size = best[start][2]
            nxt = starts[i + 1] if i + 1 < len(starts) else start + max(size, 1)
            ends.append(start + size if size else nxt)
        return cls(tuple(starts), tuple(ends), tuple(best[s][1] for s in starts), sources)


def debug_file(build_id: str | None, debug_root: str = DEBUG_ROOT) -> str | None:
    if not build_id or len(build_id) < 3:
        return None
    path = os.path.join(debug_root, ".build-id", build_id[:2], build_id[2:] + ".debug")
    return path if os.path.isfile(path) else None


def minidebuginfo_symbols(path: str) -> list[Symbol]:
    """The symbols of `path`'s `.gnu_debugdata` ([] when it has none or it is corrupt)."""
    return _in_debugdata(path, _all_symbols, [])


def _in_debugdata(path: str, read: Callable[[str], T], empty: T) -> T:
    """`read` over the ELF file in `path`'s `.gnu_debugdata` (`empty` without one)."""
    try:
        sec = next((s for s in sections(path) if s.name == ".gnu_debugdata"), None)
    except ResolveError:
        return empty
    if sec is None or not sec.size:
        return empty
    try:
        with open(path, "rb") as fh:
            fh.seek(sec.offset)
            elf = lzma.decompress(fh.read(sec.size))
    except (OSError, lzma.LZMAError):
        return empty
    fd = os.memfd_create("gnu_debugdata", os.MFD_CLOEXEC)
    try:
        view = memoryview(elf)
        while view:
            view = view[os.write(fd, view):]
        return read(f"/proc/self/fd/{fd}")
    finally:
        os.close(fd)


def _all_symbols(path: str) -> list[Symbol]:
    try:
        return list(find_symbols(path))
    except ResolveError:
        return []


def _safe(path: str) -> tuple[list[FunctionEntry], bool]:
    """The code symbols of `path`, and whether it has any symbol (the source counts)."""
    try:
        return read_function_symbols(path)
    except ResolveError:
        return [], False
