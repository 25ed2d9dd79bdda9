"""JIT symbols from perf maps: `/tmp/perf-PID.map`, as Node (`--perf-basic-prof`), Java
(`jcmd PID Compiler.perfmap`) and CPython 3.12+ (`-X perf`) write them for `perf`.

A line is `START SIZE NAME` (START and SIZE in hex, with or without `0x`; NAME the rest
of the line, spaces included). `PerfMap` reads one process's file and answers
`find(addr) -> JitSymbol | None`:

- JITs append as they compile, so an address not found re-reads the file from where the
  last read ended (at most every `min_reread` seconds: a walk through code the map does
  not name would otherwise stat it per frame); a partial last line (the JIT is
  mid-write) is left for the next read; a file rewritten from the start (`jcmd PID
  Compiler.perfmap` again: shorter, or other bytes where the last read ended) is read
  anew;
- a region compiled again later (freed code reused) is named by its newest line; a
  lookup for an event (`find(addr, at_ns)`, CLOCK_MONOTONIC ns) that happened after the
  last read began re-reads first, found or not: the line of code placed over freed code
  since is read before the freed code's line can name it. A line appended between the
  event and that read (the reader's latency, ~50 ms) still wins: the file has no times;
- bounded: at most `MAX_BYTES` of the file and `MAX_LINES` lines are taken, lines
  longer than `MAX_LINE` are skipped (a name is cut at `MAX_NAME` bytes);
- the file is opened through `/proc/PID/root/tmp/perf-NSPID.map` (NSPID: the pid in the
  process's own pid namespace, the last `NSpid:` of /proc/PID/status), so a process in
  a container is read where it wrote; the file stays open, so a process that has exited
  since is still read (its map, in its /tmp, outlives it).

`PerfMaps` keeps one `PerfMap` per pid and notices pid reuse by the start time in
/proc/PID/stat, checked when the map is (re)opened and at most every `min_reread`
seconds on a miss (a process without a map: every `absent_reread`, 5x that, when it
is looked for again; JIT code run in between is not named): a pid reused within that
time, or a process that exited before its map was first opened, can be misnamed or not
named (a stale /tmp/perf-PID.map of an earlier process with the pid is refused when
it is older than the process).
"""

from __future__ import annotations

import bisect
import os
import time
from dataclasses import dataclass
from typing import BinaryIO

from planrunner.elf.procmaps import start_time as process_start_time

MAX_BYTES = 64 << 20  # what is read of one file
MAX_LINES = 1_000_000  # symbols kept per process
MAX_LINE = 4096  # a longer line is skipped (no JIT writes one)
MAX_NAME = 1024
TAIL = 64  # bytes compared to tell an append from a rewrite
BACKTRACK = 16  # overlapping regions looked at behind a lookup's position
MAX_OPEN = 256  # perf maps held open at once (the oldest closed beyond)


@dataclass(frozen=True, slots=True)
class JitSymbol:
    start: int
    size: int
    name: str

    @property
    def end(self) -> int:
        return self.start + self.size


def parse_line(line: bytes) -> JitSymbol | None:
    """`START SIZE NAME` -> JitSymbol; None for a line that is not one."""
    parts = line.rstrip(b"\r\n").split(None, 2)
    if len(parts) < 3:
        return None
    try:
        start, size = int(parts[0], 16), int(parts[1], 16)
    except ValueError:
        return None
    if size <= 0 or start < 0:
        return None
    return JitSymbol(start, size, _name(parts[2]))


def _name(raw: bytes) -> str:
    return raw[:MAX_NAME].decode("utf-8", "replace").strip()


class PerfMap:
    """One process's perf map, read incrementally (see the module docstring)."""

    def __init__(self, fh: BinaryIO, min_reread: float = 0.05) -> None:
        self._fh = fh
        self.min_reread = min_reread
        self.offset = 0  # bytes consumed (whole lines only)
        self.lines = 0
        self.truncated = False  # a cap was reached: later lines are not read
        # (start, seq, end, name as written)
        self._symbols: list[tuple[int, int, int, bytes]] = []
        self._starts: list[int] = []
        self._recent: list[tuple[int, int, int, bytes]] = []  # merged in later (_merge)
        self._recent_starts: list[int] = []
        self._pending: list[tuple[int, int, int, bytes]] = []
        self._read_at_ns = 0  # time.monotonic_ns() when the last read began
        self._tail = b""  # the last bytes read: a file rewritten from the start differs
        self.reread()

    @classmethod
    def open(cls, path: str, min_reread: float = 0.05) -> PerfMap | None:
        try:
            fh = open(path, "rb")  # noqa: SIM115 (kept open: the process may exit)
        except OSError:
            return None
        return cls(fh, min_reread)

    def close(self) -> None:
        self._fh.close()

    def __len__(self) -> int:
        return len(self._symbols) + len(self._recent) + len(self._pending)

    def reread(self) -> bool:
        """Read what was appended since the last read; True when lines were added."""
        self._read_at_ns = time.monotonic_ns()
        if self.truncated or self._fh.closed:
            return False
        budget = MAX_BYTES - self.offset
        if budget <= 0:
            self.truncated = True
            return False
        try:
            if self.offset and not self._same_head():
                self._reset()  # rewritten whole (jcmd Compiler.perfmap does), not appended
                budget = MAX_BYTES
            self._fh.seek(self.offset)
            chunk = self._fh.read(budget)
        except OSError:
            return False
        end = chunk.rfind(b"\n") + 1  # a partial last line: the JIT is writing it
        if end == 0 and len(chunk) > MAX_LINE:
            end = len(chunk)  # a line that will not end soon: skip it
        before = self.lines
        pending = self._pending
        for line in chunk[:end].split(b"\n"):
            # parse_line, inlined: a 1M-line map is read in one go (names decoded at
            # lookup, only for the symbols a stack names)
            if len(line) > MAX_LINE:
                continue
            parts = line.split(None, 2)
            if len(parts) < 3:
                continue
            try:
                start, size = int(parts[0], 16), int(parts[1], 16)
            except ValueError:
                continue
            if size <= 0 or start < 0:
                continue
            if self.lines >= MAX_LINES:
                self.truncated = True
                break
            self.lines += 1
            pending.append((start, self.lines, start + size, parts[2]))
        self.offset += end
        if end:
            self._tail = chunk[max(0, end - TAIL):end]
        if self.offset >= MAX_BYTES:
            self.truncated = True
        return self.lines > before

    def _same_head(self) -> bool:
        """Whether the file still holds what was read, as far as its last bytes tell."""
        if os.fstat(self._fh.fileno()).st_size < self.offset:
            return False
        self._fh.seek(self.offset - len(self._tail))
        return self._fh.read(len(self._tail)) == self._tail

    def _reset(self) -> None:
        self.offset = self.lines = 0
        self.truncated = False
        self._symbols, self._starts, self._recent, self._recent_starts = [], [], [], []
        self._pending.clear()

    def find(self, addr: int, at_ns: int = 0) -> JitSymbol | None:
        """The newest symbol covering `addr`, re-reading the file once when none does;
        `at_ns`: when the event ran at `addr` (0: unknown), newer than the last read
        re-reads first (see the module docstring)."""
        if at_ns > self._read_at_ns:
            self.reread()
        hit = self._lookup(addr)
        if hit is None and time.monotonic_ns() - self._read_at_ns >= self.min_reread * 1e9 \
                and self.reread():
            hit = self._lookup(addr)
        return hit

    def _lookup(self, addr: int) -> JitSymbol | None:
        if self._pending:
            self._merge()
        best = _covering(self._symbols, self._starts, addr, None)
        best = _covering(self._recent, self._recent_starts, addr, best)
        if best is None:
            return None
        return JitSymbol(best[0], best[2] - best[0], _name(best[3]))

    def _merge(self) -> None:
        """Lines read since the last lookup go to a small sorted list of recent ones,
        merged into the large one when it has grown past an eighth of it: a re-read
        of a few lines does not sort a million."""
        self._recent.extend(self._pending)
        self._pending.clear()
        if len(self._recent) > len(self._symbols) // 8 + 1024:
            self._symbols.extend(self._recent)
            self._recent = []
            self._symbols.sort()
            self._starts = [s[0] for s in self._symbols]
        self._recent.sort()
        self._recent_starts = [s[0] for s in self._recent]


_Entry = tuple[int, int, int, bytes]


def _covering(entries: list[_Entry], starts: list[int], addr: int,
              best: _Entry | None) -> _Entry | None:
    """The newest of `entries` (sorted by start) covering `addr`, if newer than `best`:
    the nearest start normally covers it; a region compiled again (another size)
    overlaps an older one, whose line is older."""
    i = bisect.bisect_right(starts, addr) - 1
    for j in range(i, max(i - BACKTRACK, -1), -1):
        s = entries[j]
        if s[0] <= addr < s[2] and (best is None or s[1] > best[1]):
            best = s
    return best


def namespace_pid(pid: int) -> int | None:
    """The pid of `pid` in its own pid namespace (the last NSpid of its status)."""
    try:
        with open(f"/proc/{pid}/status", "rb") as fh:
            for line in fh:
                if line.startswith(b"NSpid:"):
                    return int(line.split()[-1])
    except (OSError, ValueError, IndexError):
        return None
    return pid  # a kernel without NSpid: no namespaces to cross


def perf_map_path(pid: int) -> str | None:
    """Where process `pid` writes its perf map, seen from here; None when it is gone."""
    ns = namespace_pid(pid)
    return None if ns is None else f"/proc/{pid}/root/tmp/perf-{ns}.map"


def _boot_time() -> float:
    with open("/proc/stat", "rb") as fh:
        for line in fh:
            if line.startswith(b"btime "):
                return float(line.split()[1])
    return 0.0


class PerfMaps:
    """The perf map of each process, by pid, opened on first use (see the docstring)."""

    def __init__(self, min_reread: float = 0.05, absent_reread: float | None = None) -> None:
        self.min_reread = min_reread
        # a process without a map is looked at again less often: every frame without a
        # symbol asks (a CPython's static functions, in every sample), and each look
        # reads /proc/PID/stat (~6% of a profile's loop at 50 ms, issue 28 item 5)
        self.absent_reread = 5 * min_reread if absent_reread is None else absent_reread
        self._maps: dict[int, tuple[int | None, PerfMap | None, float]] = {}
        self._boot: float | None = None

    def for_pid(self, pid: int) -> PerfMap | None:
        now = time.monotonic()
        known = self._maps.get(pid)
        if known is not None:
            start, pmap, checked = known
            if now - checked < (self.min_reread if pmap is not None else self.absent_reread):
                return pmap
            current = process_start_time(pid)
            if current is None or current == start:  # gone (the file is open) or same
                if pmap is None and current is not None:
                    pmap = self._open(pid, current)  # the JIT may have made it since
                self._maps[pid] = (start, pmap, now)
                return pmap
            if pmap is not None:  # the pid names another process now
                pmap.close()
        start = process_start_time(pid)
        pmap = self._open(pid, start) if start is not None else None
        self._maps[pid] = (start, pmap, now)
        self._bound()
        return pmap

    def find(self, pid: int, addr: int, at_ns: int = 0) -> JitSymbol | None:
        pmap = self.for_pid(pid)
        return None if pmap is None else pmap.find(addr, at_ns)

    def bind(self, pid: int, at_ns: int = 0) -> BoundPerfMap:
        """`pid`'s map, for the lookups of one event at `at_ns` (0: unknown)."""
        return BoundPerfMap(self, pid, at_ns)

    def close(self) -> None:
        for _, pmap, _ in self._maps.values():
            if pmap is not None:
                pmap.close()
        self._maps.clear()

    def _open(self, pid: int, start_ticks: int) -> PerfMap | None:
        path = perf_map_path(pid)
        if path is None:
            return None
        try:
            mtime = os.stat(path).st_mtime
        except OSError:
            return None
        if self._boot is None:
            self._boot = _boot_time()
        started = self._boot + start_ticks / os.sysconf("SC_CLK_TCK")
        if mtime < started - 1:  # an earlier process's file under a reused pid
            return None
        return PerfMap.open(path, self.min_reread)

    def _bound(self) -> None:
        while len(self._maps) > MAX_OPEN:
            pid = next(iter(self._maps))
            _, pmap, _ = self._maps.pop(pid)
            if pmap is not None:
                pmap.close()


@dataclass(frozen=True, slots=True)
class BoundPerfMap:
    """One process's perf map, as the unwinder and the symbolizer look it up."""

    maps: PerfMaps
    pid: int
    at_ns: int = 0  # the event's CLOCK_MONOTONIC ns (0: unknown)

    def find(self, addr: int) -> JitSymbol | None:
        return self.maps.find(self.pid, addr, self.at_ns)
