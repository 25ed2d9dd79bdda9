"""The function symbols of one module, by link-time address.

`ModuleSymbols.load(path, build_id, debug_root)` merges every source found:
  1. the file's own `.symtab` and `.dynsym` (planrunner/elf/symbols.py's reader);
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
from dataclasses import dataclass, field

from planrunner.elf.reader import sections
from planrunner.elf.symbols import Symbol, find_symbols
from planrunner.errors import ResolveError

DEBUG_ROOT = "/usr/lib/debug"
_FUNC_TYPES = ("STT_FUNC", "STT_GNU_IFUNC")
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
        i = bisect.bisect_right(self.starts, vaddr) - 1
        for j in range(i, max(i - _NESTED, -1), -1):
            if vaddr < self.ends[j]:
                return self.names[j], self.starts[j]
        return None

    @classmethod
    def load(cls, path: str | None, build_id: str | None = None,
             debug_root: str = DEBUG_ROOT) -> ModuleSymbols:
        """path None: only the build-id debug file (the mapped file is not trusted)."""
        ranked: list[tuple[int, list[Symbol]]] = []
        sources: list[str] = []
        own = _safe(path) if path else []
        if own:
            ranked.append((1, own))
            sources.append("symtab")
        mini = minidebuginfo_symbols(path) if path else []
        if mini:
            ranked.append((2, mini))
            sources.append("gnu_debugdata")
        debug = debug_file(build_id, debug_root)
        if debug is not None:
            syms = _safe(debug)
            if syms:
                ranked.append((2, syms))
                sources.append("build-id:" + debug)
        return cls.from_symbols(ranked, tuple(sources))

    @classmethod
    def from_symbols(cls, ranked: list[tuple[int, list[Symbol]]],
                     sources: tuple[str, ...] = ()) -> ModuleSymbols:
        best: dict[int, tuple[tuple[int, int, int, int], str, int]] = {}
        for rank, syms in ranked:
            for s in syms:
                if s.type not in _FUNC_TYPES and not (s.type == "STT_NOTYPE" and s.size):
                    continue
                if not s.value:
                    continue
                score = (-rank, int(s.hidden), len(s.name) - len(s.name.lstrip("_")),
                         len(s.name))
                have = best.get(s.value)
                if have is None or score < have[0]:
                    size = max(s.size, have[2] if have else 0)
                    best[s.value] = (score, s.name, size)
                elif s.size > have[2]:
                    best[s.value] = (have[0], have[1], s.size)
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
    try:
        sec = next((s for s in sections(path) if s.name == ".gnu_debugdata"), None)
    except ResolveError:
        return []
    if sec is None or not sec.size:
        return []
    try:
        with open(path, "rb") as fh:
            fh.seek(sec.offset)
            elf = lzma.decompress(fh.read(sec.size))
    except (OSError, lzma.LZMAError):
        return []
    fd = os.memfd_create("gnu_debugdata", os.MFD_CLOEXEC)
    try:
        view = memoryview(elf)
        while view:
            view = view[os.write(fd, view):]
        return _safe(f"/proc/self/fd/{fd}")
    finally:
        os.close(fd)


def _safe(path: str) -> list[Symbol]:
    try:
        return list(find_symbols(path))
    except ResolveError:
        return []
