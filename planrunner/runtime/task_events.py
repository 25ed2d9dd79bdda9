"""The kernel's account of every process's mappings, as `perf record` keeps it: one
software dummy perf event per CPU (pid -1, so every process) with `mmap`, `mmap2`,
`comm` (+ `comm_exec`) and `task` set, whose ring buffer receives a PERF_RECORD_MMAP2
for each executable mapping made, a COMM flagged as exec at each exec, FORK at each
fork or thread and EXIT at each exit, each stamped with CLOCK_MONOTONIC (the clock of
bpf_ktime_get_ns, which a copied stack carries). The reader feeds them, in time order,
to a `MapsTimeline` (stacks/timeline.py), which then knows the maps of a process at the
time of any of its stacks, after it has exited, exec'd or unmapped a library, without
reading /proc afterwards (but once, as perf does, for the processes running when
tracing begins, and again after the kernel dropped records: a full ring, PAGES).

Raw perf_event_open(2) (runtime/kernel/perf.py: the event and its attr) and mmap(2)
through the mmap module (bcc has no interface for side-band events). Opened only when a
plan copies user stacks (dwarf, auto), before its command starts. Nothing here needs a
wakeup: the reader drains the rings (`drain()`) after it has taken a batch of stack
records and before it unwinds them, so every mapping a stack can depend on is already
in a ring by then (the kernel writes the record in the mmap or exec syscall, before the
process can run the code).
"""

from __future__ import annotations

import mmap
import os
import struct
import time
from collections.abc import Iterator
from dataclasses import dataclass

from planrunner.elf.procmaps import MappedObject, parse_maps
from planrunner.runtime.attach import online_cpus
from planrunner.runtime.kernel.perf import (
    PERF_EVENT_IOC_ENABLE,
    mapping_records_attr,
    open_event,
    perf_ioctl,
)
from planrunner.stacks.timeline import PROT_EXEC, PROT_READ, PROT_WRITE, MapsTimeline, Mmap

# record types, and the exec mark of a COMM record
MMAP2, LOST, COMM, EXIT, FORK = 10, 2, 3, 4, 7
MISC_COMM_EXEC = 1 << 13
# after lost records, /proc is read again at most this often (all of it: costly)
RESEED_NS = 1_000_000_000
PAGES = 64  # ring data pages per CPU (256 KiB: thousands of records between two turns)

_HDR = struct.Struct("<IHH")  # type, misc, size
_MMAP2_BODY = struct.Struct("<IIQQQIIQQII")  # pid tid addr len pgoff maj min ino ino_gen prot flags
_TASK = struct.Struct("<IIIIQ")  # pid ppid tid ptid time
_SAMPLE_ID = struct.Struct("<IIQ")  # pid tid time: the last 16 bytes of every record
_LOST = struct.Struct("<QQ")


class TaskEventsError(OSError):
    pass


@dataclass
class _Ring:
    """One CPU's side-band perf ring, mapped."""

    fd: int
    buf: mmap.mmap
    data_offset: int
    data_size: int


class TaskEvents:
    """The per-CPU side-band rings; `drain()` feeds what they hold to `timeline`."""

    def __init__(self, timeline: MapsTimeline) -> None:
        self.timeline = timeline
        self.lost = 0  # records the kernel dropped (a ring full): the timeline is unsure
        self._reseed_due = False  # records were lost: read the processes from /proc again
        self._reseed_after = 0  # not before (CLOCK_MONOTONIC ns)
        self._rings: list[_Ring] = []
        attr = mapping_records_attr()
        page = mmap.PAGESIZE
        try:
            for cpu in online_cpus():
                try:
                    fd = open_event(attr, -1, cpu)
                except OSError as exc:
                    raise TaskEventsError(exc.errno, f"perf_event_open (dummy, cpu {cpu}): "
                                          f"{exc.strerror}") from None
                try:
                    buf = mmap.mmap(fd, (1 + PAGES) * page, mmap.MAP_SHARED,
                                    mmap.PROT_READ | mmap.PROT_WRITE)
                except OSError:
                    os.close(fd)
                    raise
                self._rings.append(_Ring(fd, buf, page, PAGES * page))
            for ring in self._rings:
                try:
                    perf_ioctl(ring.fd, PERF_EVENT_IOC_ENABLE)
                except OSError as exc:
                    raise TaskEventsError(exc.errno, "enabling the side-band event: "
                                          f"{exc.strerror}") from None
        except BaseException:
            self.close()
            raise

    def seed_running(self) -> None:
        """The processes running now, from their /proc/PID/maps (their executable file
        mappings), as perf synthesizes them: read after the events were enabled, so a
        mapping made since is in a ring too; a process gone meanwhile is skipped."""
        for pid, maps in _running_maps():
            self.timeline.seed(pid, maps)

    def drain(self) -> None:
        """Every record now in the rings, to the timeline in time order (each ring is
        in order; records of different CPUs are merged by their time). After the
        kernel dropped records, the processes running are read from /proc again (at
        most once every RESEED_NS), so that the fork path knows them again."""
        self._drain_once()
        now = time.monotonic_ns()
        if self._reseed_due and now >= self._reseed_after:
            self._drain_once()  # every record older than `now` is applied first
            self._reseed_due = False
            self._reseed_after = now + RESEED_NS
            for pid, maps in _running_maps():
                self.timeline.reseed(pid, maps, now)

    def _drain_once(self) -> None:
        recs: list[tuple[int, int, int, bytes]] = []
        for ring in self._rings:
            recs += self._read(ring)
        recs.sort(key=lambda r: r[0])  # stable: one CPU's records keep their order
        for stamp, kind, misc, body in recs:
            self._apply(stamp, kind, misc, body)

    def fds(self) -> list[int]:
        """The rings' perf fds: readable when a ring is half full (the kernel's default
        watermark), for a loop that sleeps longer than a turn (runtime/loop_wait.py)."""
        return [ring.fd for ring in self._rings]

    def close(self) -> None:
        for ring in self._rings:
            ring.buf.close()
            os.close(ring.fd)
        self._rings = []

    # -- internals ---------------------------------------------------------------------

    def _read(self, ring: _Ring) -> list[tuple[int, int, int, bytes]]:
        # perf_event_mmap_page: data_head at 1024, data_tail at 1032
        head = int.from_bytes(ring.buf[1024:1032], "little")
        tail = int.from_bytes(ring.buf[1032:1040], "little")
        out = []
        size, base = ring.data_size, ring.data_offset
        while tail < head:
            at = tail % size
            raw = self._bytes(ring, base, at, _HDR.size)
            kind, misc, length = _HDR.unpack(raw)
            if length < _HDR.size:
                break  # a torn ring: never expected; stop rather than spin
            rec = self._bytes(ring, base, at, length)
            tail += length
            if kind in (MMAP2, COMM, EXIT, FORK, LOST) and length >= _HDR.size + 16:
                stamp = _SAMPLE_ID.unpack_from(rec, length - 16)[2]
                out.append((stamp, kind, misc, rec[_HDR.size:length - 16]))
        ring.buf[1032:1040] = tail.to_bytes(8, "little")
        return out

    @staticmethod
    def _bytes(ring: _Ring, base: int, at: int, n: int) -> bytes:
        end = at + n
        if end <= ring.data_size:
            return ring.buf[base + at:base + end]
        first = ring.buf[base + at:base + ring.data_size]
        return first + ring.buf[base:base + end - ring.data_size]

    def _apply(self, stamp: int, kind: int, misc: int, body: bytes) -> None:
        if kind == MMAP2:
            pid, _tid, addr, length, pgoff, maj, mnr, ino, _gen, prot, _flags = \
                _MMAP2_BODY.unpack_from(body)
            name = body[_MMAP2_BODY.size:].split(b"\0", 1)[0].decode("utf-8", "replace")
            self.timeline.mmap(pid, stamp, Mmap(addr, addr + length, pgoff, prot,
                                                os.makedev(maj, mnr), ino, name))
        elif kind == COMM:
            if misc & MISC_COMM_EXEC:
                pid, tid = struct.unpack_from("<II", body)
                if pid == tid:
                    self.timeline.exec(pid, stamp)
        elif kind == FORK:
            pid, ppid, tid, _ptid, _ = _TASK.unpack_from(body)
            if pid == tid and pid != ppid:  # a new process, not a thread
                self.timeline.fork(pid, ppid, stamp)
        elif kind == EXIT:
            pid, _ppid, tid, _ptid, _ = _TASK.unpack_from(body)
            if pid == tid:
                self.timeline.exit(pid, stamp)
        elif kind == LOST:
            self.lost += _LOST.unpack_from(body)[1]
            self.timeline.unsure(stamp)
            self._reseed_due = True


def _running_maps() -> Iterator[tuple[int, list[Mmap]]]:
    """Each process running now (but planrunner) with its executable mappings, from
    /proc/PID/maps: files, [vdso] and anonymous ones (JIT code, walked by frame pointers:
    stacks/unwind_jit.py); kernel threads (none) and processes gone meanwhile are
    skipped."""
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open(f"/proc/{name}/maps", encoding="utf-8", errors="replace") as fh:
                objs = parse_maps(fh.read())
        except (OSError, ValueError):
            continue
        maps = [_mmap_of(o) for o in objs if o.executable and
                (o.path.startswith("/") or o.path == "[vdso]" or _anonymous(o.path))]
        if maps:
            yield int(name), maps


def _anonymous(path: str) -> bool:
    """No file: "" or a name given by prctl (`[anon:...]`), not [heap], [stack]..."""
    return not path or path.startswith("[anon:")


def _mmap_of(o: MappedObject) -> Mmap:
    """A /proc/PID/maps line as the kernel's mmap record would have told it."""
    prot = sum(bit for c, bit in (("r", PROT_READ), ("w", PROT_WRITE), ("x", PROT_EXEC))
               if c in o.perms)
    major, _, minor = o.dev.partition(":")
    return Mmap(o.start, o.end, o.offset, prot, os.makedev(int(major, 16), int(minor, 16)),
                o.inode, o.path)
