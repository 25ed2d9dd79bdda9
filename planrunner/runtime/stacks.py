"""Stack ids and copies -> symbolized `Stack` values, for the decoder and the
aggregation reader. Pure over a `StackSource` (the backend's stack maps): no bcc here.

What the BPF side hands over (render/stacks.py):
- a kernel stack id: addresses in the kernel stack map, symbolized with /proc/kallsyms;
- a user stack id (unwind: fp): frames as (build-id, file offset) in the build-id stack
  map, fixed when the event fired. The file of a build-id is found among the modules of
  the processes seen (their maps snapshots), the plan's targets, the libraries next to
  them and the system library directories, so a process that has exited, or unloaded
  the library, still symbolizes. A frame the kernel could not resolve (JIT code, a page
  not in memory) is a plain address: symbolized from the process's snapshot;
- a copy of the user stack (unwind: dwarf | auto), in a print record or, for an
  aggregation, under its hash in the copies map, with the time of its event: unwound
  with planrunner/stacks over the process's maps at that time. With a `MapsFeed` (the
  kernel's mmap/exec/fork records, runtime/task_events.py, opened by the session) the
  maps of every process started or exec'd since tracing began are known at any time,
  after it has exited, exec'd or unmapped a library too, and a reused pid is a new
  process: the feed is drained before a copy newer than its last drain is unwound, so
  every mapping the stack ran with is in it. Processes already running when tracing
  began (and any, without a feed) are unwound over a maps snapshot (ProcessRegistry:
  taken on the first record of each process, never read again once the pid names
  another process).
The registry is keyed by (pid, start time); the start time is read when a pid is first
seen (BPF does not send it: reading it in BPF needs the kernel's task_struct, and its
headers cost clang more than the rest of a plan). When copies are taken, the first event
of each process sends a notice that wakes the reader at once (render/stacks.py), so its
maps are read before it can exit; `expire()` (every second) forgets the processes that
have gone from the BPF side's list, so a pid reused later is announced, and read, again.
Without the feed, a stack copied from a process that exited before the reader read its
maps (within microseconds of its first event) cannot be unwound: it is counted as lost.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

from planrunner.elf.procmaps import start_time as read_start_time
from planrunner.elf.reader import open_binary
from planrunner.errors import ResolveError
from planrunner.records import Stack
from planrunner.runtime.backend import StackSource
from planrunner.stacks.capture import X86_64, UserStackCapture, parse_ustack_record
from planrunner.stacks.demangle import demangle
from planrunner.stacks.frame import Frame
from planrunner.stacks.kallsyms import KernelSymbols
from planrunner.stacks.modules import Mapping, ProcessRegistry
from planrunner.stacks.symbolize import Symbolizer
from planrunner.stacks.timeline import MapsTimeline
from planrunner.stacks.unwind import MappingLookup, unwind

BUILD_ID_VALID, BUILD_ID_IP = 1, 2  # enum bpf_stack_build_id_status
LIB_DIRS = ("/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64",
            "/usr/local/lib")
MAX_FRAMES = 127
EFAULT = 14  # get_stackid: the event has no such stack (a kstack in user mode): empty


class MapsFeed(Protocol):
    """The kernel's maps records (runtime/task_events.py.TaskEvents)."""

    timeline: MapsTimeline

    def drain(self) -> None: ...


@dataclass
class BuildIdIndex:
    """build-id -> a file on disk with that build-id (see the module docstring)."""

    paths: dict[str, str] = field(default_factory=dict)
    _dirs_done: set[str] = field(default_factory=set)
    _pending_dirs: list[str] = field(default_factory=list)

    def add(self, build_id: str | None, path: str) -> None:
        if build_id and build_id not in self.paths:
            self.paths[build_id] = path
            d = os.path.dirname(path)
            if d not in self._dirs_done and d not in self._pending_dirs:
                self._pending_dirs.append(d)

    def add_file(self, path: str) -> None:
        try:
            self.add(open_binary(path).build_id, path)
        except ResolveError:
            pass

    def find(self, build_id: str) -> str | None:
        hit = self.paths.get(build_id)
        if hit is not None:
            return hit
        # a miss: scan the directories of known modules first, then the system's
        for d in [*self._pending_dirs, *LIB_DIRS]:
            if d in self._dirs_done:
                continue
            self._dirs_done.add(d)
            self._scan(d)
            if build_id in self.paths:
                self._pending_dirs = [p for p in self._pending_dirs
                                      if p not in self._dirs_done]
                return self.paths[build_id]
        self._pending_dirs.clear()
        return None

    def _scan(self, d: str) -> None:
        try:
            names = os.listdir(d)
        except OSError:
            return
        for name in names:
            if ".so" in name or "." not in name:
                path = os.path.join(d, name)
                if os.path.isfile(path) and not os.path.islink(path):
                    self.add_file(path)


class StackResolver:
    """Turns what BPF captured into `Stack` values (see the module docstring)."""

    def __init__(self, source: StackSource | None, targets: Iterable[str] = (),
                 registry: ProcessRegistry | None = None,
                 feed: MapsFeed | None = None) -> None:
        self.source = source
        self.feed = feed
        self._fed_at = 0  # CLOCK_MONOTONIC ns when the feed was last drained
        self.registry = registry or ProcessRegistry()
        self.symbolizer = Symbolizer()
        self.index = BuildIdIndex()
        for path in targets:
            self.index.add_file(path)
        self._starts: dict[int, int | None] = {}
        self._expired: set[int] = set()  # gone, and dropped from the BPF side's list
        self._kernel: KernelSymbols | None = None
        self._ids: dict[tuple[str, int], tuple[Frame, ...]] = {}  # kernel ids: never reused
        # (hash, mode) -> frames of a drained copy, unwound when drained: the 16 KiB
        # copy is not kept; equal frames are one tuple (a profile's many copies of
        # one stack differ in their bytes, not their frames)
        self._unwound: dict[tuple[int, str], tuple[Frame, ...]] = {}
        self._interned: dict[tuple[Frame, ...], tuple[Frame, ...]] = {}
        self._modules: dict[str, tuple[Mapping, tuple[tuple[int, int, int], ...]]] = {}
        self.lost = 0  # stacks that could not be shown (not captured, or unwound)

    # -- processes --------------------------------------------------------------------

    def observe(self, pid: int) -> int | None:
        """The start time of `pid` as first seen (its maps snapshot taken then)."""
        if pid in self._starts:
            return self._starts[pid]
        start = read_start_time(pid) if pid else None
        snap = self.registry.observe(pid, start) if start is not None else None
        if start is not None and (snap is None or not snap.mappings):
            self.registry.forget(pid, start)  # gone, or a zombie: its maps are empty
            start = None
        self._starts[pid] = start
        if snap is not None:
            for m in snap.mappings:
                if m.executable and m.build_id and m.path.startswith("/"):
                    self.index.add(m.build_id, m.source)
        return start

    def announced(self, pid: int) -> None:
        """The BPF side saw `pid` for the first time (since it was last expired)."""
        if self.feed is not None:
            self._feed()
            if self.feed.timeline.knows(pid):  # its maps are known at any time
                self._starts[pid] = read_start_time(pid)  # for expire() only
                self._expired.discard(pid)
                return
        if pid in self._starts and read_start_time(pid) != self._starts[pid]:
            del self._starts[pid]  # another process under a reused pid
        self._expired.discard(pid)
        self.observe(pid)

    def expire(self, seen_map: str) -> list[int]:
        """Drop the pids whose process is gone or replaced from the BPF side's list of
        announced processes (`seen_map`); their snapshots stay for late records."""
        gone = [pid for pid, start in self._starts.items() if pid not in self._expired
                and (start is None or read_start_time(pid) != start)]
        self._expired.update(gone)
        if gone and self.source is not None:
            self.source.forget_pids(seen_map, gone)
        return gone

    # -- kernel stacks ----------------------------------------------------------------

    def kernel(self, map_name: str, stack_id: int, limit: int) -> Stack:
        if stack_id == -EFAULT:
            return Stack("kernel", ())
        if stack_id < 0 or self.source is None:
            self.lost += 1
            return Stack("kernel", (), lost=True)
        frames = self._ids.get((map_name, stack_id))
        if frames is None:
            ips = self.source.stack_ips(map_name, stack_id) or []
            if self._kernel is None:
                self._kernel = KernelSymbols.load()
            frames = tuple(self._kernel.symbolize([ip for ip in ips if ip]))
            self._ids[(map_name, stack_id)] = frames
        return Stack("kernel", frames[:limit])

    # -- user stacks, frame pointers (build-id frames) ----------------------------------

    def user_ids(self, map_name: str, pid: int, stack_id: int, limit: int) -> Stack:
        if stack_id == -EFAULT:  # a kernel thread
            return Stack("user", ())
        if stack_id < 0 or self.source is None:
            self.lost += 1
            return Stack("user", (), lost=True)
        start = self.observe(pid)
        raw = self.source.stack_build_ids(map_name, stack_id) or []
        frames = [self._build_id_frame(i, status, bid, off, pid, start)
                  for i, (status, bid, off) in enumerate(raw[:limit]) if status]
        names = demangle([f.symbol for f in frames if f.symbol])
        if names:
            frames = [Frame(f.address, names.get(f.symbol, f.symbol), f.offset, f.module)
                      if f.symbol else f for f in frames]
        return Stack("user", tuple(frames))

    def _build_id_frame(self, i: int, status: int, build_id: str, value: int, pid: int,
                        start: int | None) -> Frame:
        # frame 0 is the pc; the others are return addresses, looked up at the call
        back = 0 if i == 0 else 1
        if status != BUILD_ID_VALID:
            if start is None:
                return Frame(value, None, value, "")
            return self.symbolizer.symbolize([value], self.registry.bind(pid, start),
                                             first_is_pc=i == 0)[0]
        path = self.index.find(build_id)
        if path is None:
            return Frame(value, None, value, f"[build-id {build_id}]")
        mapping, segs = self._module(path, build_id)
        vaddr = _vaddr(segs, value - back)
        if vaddr is None:
            return Frame(value, None, value, path)
        address = self._runtime_address(pid, start, build_id, vaddr + back)
        hit = self.symbolizer.table(mapping).lookup(vaddr)
        if hit is None:
            return Frame(address, None, vaddr + back, path)
        name, sym_start = hit
        return Frame(address, name, vaddr + back - sym_start, path)

    def _module(self, path: str, build_id: str
                ) -> tuple[Mapping, tuple[tuple[int, int, int], ...]]:
        got = self._modules.get(build_id)
        if got is None:
            try:
                info = open_binary(path)
                segs = tuple((s.offset, s.filesz, s.vaddr) for s in info.segments)
                st = os.stat(path)
                dev, ino = st.st_dev, st.st_ino
            except (ResolveError, OSError):
                segs, dev, ino = (), 0, 0
            got = (Mapping(0, 0, 0, "r-xp", path, dev, ino, build_id, None), segs)
            self._modules[build_id] = got
        return got

    def _runtime_address(self, pid: int, start: int | None, build_id: str,
                         vaddr: int) -> int:
        """vaddr in the process when its snapshot has the module, else vaddr itself."""
        snap = self.registry.modules(pid, start) if start is not None else None
        for m in snap.mappings if snap else ():
            if m.build_id == build_id and m.bias is not None:
                return vaddr + m.bias
        return vaddr

    # -- user stacks, copies (dwarf, auto) ----------------------------------------------

    def user_copy(self, raw: bytes, limit: int, mode: str) -> Stack:
        """A copy from a print record (struct pr_ustack)."""
        if _no_user_stack(raw):
            return Stack("user", ())
        got = self._capture(raw)
        if got is None:
            self.lost += 1
            return Stack("user", (), lost=True)
        return Stack("user", self._unwind(*got, mode, limit))

    def _capture(self, raw: bytes) -> tuple[UserStackCapture, MappingLookup] | None:
        """The capture and the maps of its process at its time (see the docstring)."""
        capture = parse_ustack_record(raw, X86_64)
        if self.feed is not None and capture.time:
            if capture.time > self._fed_at:
                self._feed()
            modules = self.feed.timeline.modules(capture.pid, capture.time)
            if modules is not None:
                return capture, modules
        start = self.observe(capture.pid)
        if start is None:
            return None
        return (replace(capture, start_time=start),
                self.registry.bind(capture.pid, start))

    def _feed(self) -> None:
        assert self.feed is not None
        now = time.monotonic_ns()  # taken first: what happened before is in the rings
        self.feed.drain()
        self._fed_at = now

    def _unwind(self, capture: UserStackCapture, process: MappingLookup, mode: str,
                limit: int) -> tuple[Frame, ...]:
        result = unwind(capture, process, mode, limit)
        return tuple(self.symbolizer.symbolize(result.addrs, process))

    def drain(self, map_name: str, modes: Iterable[str]) -> None:
        """Take the copies waiting in the copies map (emptying it) and unwind each in
        every mode the aggregation keys use, now, while its process is known:
        aggregation keys name them by hash (user_hash)."""
        if self.source is None:
            return
        for key, raw in self.source.drain_copies(map_name):
            got = None
            if _no_user_stack(raw):  # a kernel thread: an empty stack, not a lost one
                for mode in modes:
                    self._unwound[(key, mode)] = ()
                continue
            for mode in modes:
                if (key, mode) in self._unwound:
                    continue
                got = got or self._capture(raw)
                if got is None:
                    break
                frames = self._unwind(*got, mode, MAX_FRAMES)
                self._unwound[(key, mode)] = self._interned.setdefault(frames, frames)

    def user_hash(self, key: int, limit: int, mode: str) -> Stack:
        frames = self._unwound.get((key & ((1 << 64) - 1), mode))
        if frames is None:
            self.lost += 1
            return Stack("user", (), lost=True)
        return Stack("user", frames[:limit])


def _vaddr(segs: Sequence[tuple[int, int, int]], offset: int) -> int | None:
    """The link-time address of file offset `offset` (the PT_LOAD holding it)."""
    for off, size, vaddr in segs:
        if off <= offset < off + max(size, 1):
            return offset - off + vaddr
    return None


def _no_user_stack(raw: bytes) -> bool:
    """A capture without user registers (a sample of a kernel thread: pc 0)."""
    return int.from_bytes(raw[16:24], "little") == 0
