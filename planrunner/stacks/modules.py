"""Which file an address of a process belongs to, and at which link-time address.

`snapshot(pid, start_time)` reads /proc/PID/maps once into `ProcessModules`: one
`Mapping` per mapping; a file-backed one has the module's identity (path, build-id, dev,
inode) and its load bias (runtime address - link-time vaddr, from the file's PT_LOAD
headers); `[vdso]` is read from this process's copy (vdso.py, `Mapping.file`); the others
(anonymous, [heap], JIT code) have neither identity nor bias.
`modules_from_maps(text)` builds the same from saved maps text (a dump, a test).

`ProcessRegistry` keeps one snapshot per (pid, start time), taken when the pid is first
seen (`observe`), and refreshes it only when an address falls outside every known
mapping (`find`), at most every `min_refresh_interval` seconds, while /proc/PID/stat
still shows the same start time; a changed
/proc/PID/exe (dev, inode) means an exec: the new snapshot is tried first, the older ones
remain for stacks captured before; `reread` takes a new snapshot at once (a process
that fires its first event, seen before: a -c command read right after its exec, before
the loader mapped its libraries). A pid that now names another process (other start
time), or none, is never read again: its stacks symbolize from the snapshot, whose files
are still on disk. Paths are as the kernel shows them (no /proc/PID/root prefix).
"""

from __future__ import annotations

import bisect
import os
import time
from dataclasses import dataclass, field, replace

from planrunner.elf.procmaps import MappedObject, parse_maps
from planrunner.elf.procmaps import start_time as process_start_time
from planrunner.elf.reader import open_binary
from planrunner.errors import ResolveError
from planrunner.stacks.vdso import vdso_file


@dataclass(frozen=True, slots=True)
class Mapping:
    """One executable mapping of a process, with what its file says about it."""

    start: int
    end: int
    file_offset: int
    perms: str
    path: str
    dev: int  # os.makedev(major, minor), comparable with st_dev
    inode: int
    build_id: str | None
    bias: int | None  # runtime - link-time address; None when the file cannot be read
    file: str = ""  # where to read the module when not at `path` ([vdso]: vdso.py)

    @property
    def executable(self) -> bool:
        return "x" in self.perms

    @property
    def source(self) -> str:
        """The path to read the module's CFI and symbols from."""
        return self.file or self.path

    def to_vaddr(self, addr: int) -> int | None:
        return None if self.bias is None else addr - self.bias


@dataclass(frozen=True, slots=True)
class ProcessModules:
    """A maps snapshot: file-backed mappings sorted by start address."""

    mappings: tuple[Mapping, ...]
    pid: int = 0
    start_time: int = 0
    exe: tuple[int, int] | None = None  # (st_dev, st_ino) of /proc/PID/exe
    _starts: tuple[int, ...] = field(default=(), repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_starts", tuple(m.start for m in self.mappings))

    def find(self, addr: int) -> Mapping | None:
        i = bisect.bisect_right(self._starts, addr) - 1
        if i >= 0 and addr < self.mappings[i].end:
            return self.mappings[i]
        return None


def modules_from_maps(text: str, pid: int = 0, start_time: int = 0,
                      exe: tuple[int, int] | None = None) -> ProcessModules:
    """ProcessModules from maps text; the files named must be readable now."""
    return _build(parse_maps(text), pid, start_time, exe)


def snapshot(pid: int, start_time: int | None = None) -> ProcessModules:
    """Read /proc/PID/maps. ResolveError when the process is gone or is another one."""
    now = process_start_time(pid)
    if now is None or (start_time is not None and now != start_time):
        raise ResolveError(f"process {pid} (started at {start_time}) is gone")
    try:
        with open(f"/proc/{pid}/maps", encoding="utf-8", errors="replace") as fh:
            text = fh.read()
    except OSError as exc:
        raise ResolveError(f"cannot read /proc/{pid}/maps: {exc.strerror}") from None
    if process_start_time(pid) != now:  # the pid was reused while we read
        raise ResolveError(f"process {pid} was replaced while its maps were read")
    return _build(parse_maps(text), pid, now, exe_identity(pid))


def exe_identity(pid: int) -> tuple[int, int] | None:
    try:
        st = os.stat(f"/proc/{pid}/exe")
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


class ProcessRegistry:
    """Snapshots per (pid, start time); see the module docstring for when they are read."""

    def __init__(self, min_refresh_interval: float = 0.5) -> None:
        """min_refresh_interval: seconds between two refreshes of one process (garbage
        addresses, from a frame-pointer walk through code without them, would otherwise
        reread /proc/PID/maps on every event)."""
        self._snaps: dict[tuple[int, int], list[ProcessModules]] = {}
        self._refreshed: dict[tuple[int, int], float] = {}
        self.min_refresh_interval = min_refresh_interval

    def observe(self, pid: int, start_time: int) -> ProcessModules | None:
        """Snapshot a newly seen process; None when it is already gone (or replaced)."""
        snaps = self._snaps.get((pid, start_time))
        if snaps:
            return snaps[-1]
        try:
            snap = snapshot(pid, start_time)
        except ResolveError:
            return None
        self._snaps[(pid, start_time)] = [snap]
        return snap

    def add(self, snap: ProcessModules) -> None:
        """Register a snapshot made elsewhere (saved maps of an exited process)."""
        self._snaps.setdefault((snap.pid, snap.start_time), []).append(snap)

    def find(self, pid: int, start_time: int, addr: int) -> Mapping | None:
        """The mapping holding `addr`, refreshing the snapshot once if none does and the
        process is still the one that was seen."""
        snaps = self._snaps.get((pid, start_time))
        if not snaps:
            current = self.observe(pid, start_time)
            return current.find(addr) if current else None
        for snap in reversed(snaps):
            hit = snap.find(addr)
            if hit is not None:
                return hit
        now = time.monotonic()
        if now - self._refreshed.get((pid, start_time), -1e9) < self.min_refresh_interval:
            return None
        self._refreshed[(pid, start_time)] = now
        try:
            fresh = snapshot(pid, start_time)
        except ResolveError:
            return None
        if fresh.exe != snaps[-1].exe:
            snaps.append(fresh)  # exec: keep what came before for older stacks
        else:
            snaps[-1] = fresh  # mmap/dlopen: the new maps include the old ones
        return fresh.find(addr)

    def reread(self, pid: int, start_time: int) -> None:
        """Snapshot a known process again now (it fired its first event: what it has
        mapped since it was first seen, an exec, the libraries the loader mapped after
        the exec, are read while it still runs)."""
        snaps = self._snaps.get((pid, start_time))
        if not snaps:
            return
        try:
            fresh = snapshot(pid, start_time)
        except ResolveError:
            return
        self._refreshed[(pid, start_time)] = time.monotonic()
        if fresh.exe != snaps[-1].exe:
            snaps.append(fresh)  # exec: keep what came before for older stacks
        else:
            snaps[-1] = fresh

    def bind(self, pid: int, start_time: int) -> BoundProcess:
        """This registry seen from one process: what unwind() and symbolize() take."""
        return BoundProcess(self, pid, start_time)

    def history(self, pid: int, start_time: int) -> tuple[ProcessModules, ...]:
        """Every image the process has had, oldest first (more than one after an exec)."""
        return tuple(self._snaps.get((pid, start_time), ()))

    def modules(self, pid: int, start_time: int) -> ProcessModules | None:
        snaps = self._snaps.get((pid, start_time))
        return snaps[-1] if snaps else None

    def forget(self, pid: int, start_time: int) -> None:
        self._snaps.pop((pid, start_time), None)
        self._refreshed.pop((pid, start_time), None)


@dataclass(frozen=True, slots=True)
class BoundProcess:
    """One process (pid and start time) of a ProcessRegistry, for lookups."""

    registry: ProcessRegistry
    pid: int
    start_time: int

    def find(self, addr: int) -> Mapping | None:
        return self.registry.find(self.pid, self.start_time, addr)


def build_modules(objs: tuple[MappedObject, ...], pid: int = 0, start_time: int = 0,
                  exe: tuple[int, int] | None = None) -> ProcessModules:
    """ProcessModules from mappings known otherwise (the maps timeline, timeline.py)."""
    return _build(objs, pid, start_time, exe)


# --- internals ------------------------------------------------------------------------

def _build(objs: tuple[MappedObject, ...], pid: int, start_time: int,
           exe: tuple[int, int] | None) -> ProcessModules:
    out = []
    for m in objs:
        if m.path == "[vdso]" and (image := vdso_file()) is not None:
            build_id, bias = _identity(replace(m, path=image))
            out.append(Mapping(m.start, m.end, m.offset, m.perms, m.path, 0, 0, build_id,
                               bias, image))
            continue
        if not m.path.startswith("/") or m.inode == 0:
            # anonymous, [heap], [stack], JIT code: kept so that their addresses do not
            # look unmapped (and trigger a refresh), but they are no module
            out.append(Mapping(m.start, m.end, m.offset, m.perms, m.path, 0, 0, None, None))
            continue
        build_id, bias = _identity(m)
        major, _, minor = m.dev.partition(":")
        out.append(Mapping(m.start, m.end, m.offset, m.perms, m.path,
                           os.makedev(int(major, 16), int(minor or "0", 16)), m.inode,
                           build_id, bias))
    out.sort(key=lambda x: x.start)
    return ProcessModules(tuple(out), pid, start_time, exe)


def _identity(m: MappedObject) -> tuple[str | None, int | None]:
    """(build-id, load bias) of a mapping; (None, None) for a file that is not a readable
    ELF. The bias comes from the PT_LOAD segment whose file range holds the mapping's
    offset: link-time vaddr = offset + (p_vaddr - p_offset)."""
    try:
        info = open_binary(m.path)
    except ResolveError:
        return None, None
    for seg in info.segments:
        lo = seg.offset - seg.offset % 4096
        if lo <= m.offset < seg.offset + max(seg.filesz, 1):
            vaddr = m.offset + (seg.vaddr - seg.offset)
            return info.build_id, m.start - vaddr
    return info.build_id, None
