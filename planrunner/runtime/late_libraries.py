"""With --pid: notice when the process maps one of the plan's binaries after the start
(a library it dlopen()s), so its probe sites are reported active and, in poke mode,
their semaphores raised.

How: every loop turn (runtime/session.py, POLL_MS apart), `MapsWatcher.poll()` reads
/proc/PID/maps and looks for mappings of the plan's files by (st_dev, st_ino). Chosen
over a uprobe on the dynamic linker's r_brk/_dl_debug_state because it needs no extra
BPF program and no knowledge of the libc in use (musl, static binaries, containers),
and it also sees mmap()s that do not go through the dynamic linker. Its cost is one
read of the maps file per turn (~20 us for 100 mappings).

The uprobes themselves are attached up front, by inode, filtered on the pid: the kernel
installs them when the file is mapped, with no window in which a call is missed. Only
what the kernel cannot do for us (announce, poke semaphores) waits for the poll, so a
semaphore raised by hand can miss the first POLL_MS of a late library's life.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass

from planrunner.elf.procmaps import MappedObject, parse_maps

DevIno = tuple[int, int]


@dataclass(frozen=True, slots=True)
class Mapped:
    """A plan binary that appeared in the process's maps since the last poll."""

    key: DevIno
    display: str
    start: int  # lowest address it is mapped at


def file_key(path: str) -> DevIno | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _maps_dev(dev: int) -> str:
    return f"{os.major(dev):02x}:{os.minor(dev):02x}"


class MapsWatcher:
    """Tracks which of `binaries` ({(st_dev, st_ino): display name}) `pid` has mapped."""

    def __init__(self, pid: int, binaries: dict[DevIno, str]) -> None:
        self.pid = pid
        self._want = {(_maps_dev(dev), ino): (dev, ino) for dev, ino in binaries}
        self._names = binaries
        self._mapped: dict[DevIno, int] = {}  # key -> lowest start address now mapped
        self.readable = False  # the last poll read the maps (the process was there)

    def mapped(self) -> set[DevIno]:
        return set(self._mapped)

    def poll(self) -> list[Mapped]:
        """New mappings of plan binaries since the last call (an unmapped and remapped
        library counts again: dlclose() then dlopen() gives fresh semaphores)."""
        try:
            with open(f"/proc/{self.pid}/maps", encoding="utf-8", errors="replace") as fh:
                text = fh.read()
        except OSError:
            self.readable = False
            return []
        self.readable = bool(text)  # a zombie's maps are empty
        return self._update(_lowest(self._want, parse_maps(text)))

    def _update(self, now: dict[DevIno, int]) -> list[Mapped]:
        new = [Mapped(k, self._names[k], start) for k, start in now.items()
               if self._mapped.get(k) != start]
        self._mapped = now
        return new


def _lowest(want: dict[tuple[str, int], DevIno], maps: Iterable[MappedObject]
            ) -> dict[DevIno, int]:
    out: dict[DevIno, int] = {}
    for m in maps:
        key = want.get((m.dev, m.inode))
        if key is not None and (key not in out or m.start < out[key]):
            out[key] = m.start
    return out
