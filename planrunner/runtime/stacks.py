"""Stack ids and copies -> symbolized `Stack` values, for the decoder and the
aggregation reader. Pure over a `StackSource` (the backend's stack maps): no bcc here.

What the BPF side hands over (render/stacks.py):
- a kernel stack id: addresses in the kernel stack map, symbolized with /proc/kallsyms;
- a user stack id (unwind: fp): addresses in the user stack map, with the pid and, in a
  print record, the event's time (its header's ts); symbolized over the process's maps
  at that time, as a copy is unwound (below). An aggregation key has no time: the
  newest image of the process whose mappings hold the stack's addresses is used (an
  exec between the event and the read moves a PIE's addresses elsewhere);
- a copy of the user stack (unwind: dwarf | auto), in a print record or, for an
  aggregation, under its hash in the copies map, with the time of its event: unwound
  with planrunner/stacks over the process's maps at that time;
- an address of `usym(addr)` with its pid and, in a print record, the event's time:
  named over the same maps (`user_symbol`; the first event of each process also sends
  the notice below).
The maps: with a `MapsFeed` (the kernel's mmap/exec/fork records, runtime/task_events.py,
opened by the session) the maps of every process exec'd since tracing began, read from
/proc when it began (unless a -c command is run), or forked since by one of those, are
known at any time, after it has exited, exec'd or unmapped a library too, and a reused
pid is a new process; the feed is drained before a stack newer than its last drain is
read, so every mapping the stack ran with is in it. Processes the feed does not know
(running before a -c run began, running when the kernel dropped records until the
feed reads /proc again; any, without a feed) use a maps snapshot (ProcessRegistry:
taken on the first record of each process, never read again once the pid names
another process).
The registry is keyed by (pid, start time); the start time is read when a pid is first
seen (BPF does not send it: reading it in BPF needs the kernel's task_struct, and its
headers cost clang more than the rest of a plan). When copies are taken, the first event
of each process sends a notice that wakes the reader at once (render/stacks.py), so its
maps are read before it can exit; `expire()` (every second) forgets the processes that
have gone from the BPF side's list, so a pid reused later is announced, and read, again.
Without the feed, a stack of a process that exited before the reader read its maps
(within microseconds of its first event) cannot be symbolized: a copy is counted as
lost, a stack id shows bare addresses.

JIT code (issue 26): every user stack is symbolized, and every copy unwound, with its
process's perf map (/tmp/perf-PID.map, stacks/perfmap.py: opened on first need through
/proc/PID/root, kept open, re-read when an address is not found): an address in no file
named there is a frame of kind "jit", and the walk goes through it by frame pointers.

Lost and truncated copies: a copy whose walk could not take one step from the probe's
own frame (no CFI there, or CFI that cannot be used: a module without `.eh_frame` or
with a corrupt one, code in no file) is lost: it keeps that frame, is marked `lost`
(text: `[stack lost]` after the frame) and is counted in `unwind_lost`, by the module
it stopped in, for the report at exit. A walk that stops later (outside the copied
window, a frame without CFI further out) is truncated: shown as far as it went, as
perf shows it, and not counted; the outermost frame (_start) or ustack(N)'s depth is
a clean end, even at the first frame.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, NamedTuple, Protocol

from planrunner.elf.procmaps import start_time as read_start_time
from planrunner.records import Stack, UserSymbol
from planrunner.render.contracts import PYLINE_KEY, U32
from planrunner.runtime.backend import StackSource
from planrunner.stacks.frame import Frame

# The unwinders, symbolizers and ELF readers are imported where a stack is first read
# (or by prepare(), before attaching, for a plan with stacks): a run whose program has
# no stacks never needs them, and a warm run's start-up (issue 17) does not pay for them.
if TYPE_CHECKING:
    from planrunner.render.model import StackMaps
    from planrunner.runtime.stack_templates import Templates
    from planrunner.stacks.capture import UserStackCapture
    from planrunner.stacks.kallsyms import KernelSymbols
    from planrunner.stacks.modules import Mapping, ProcessModules, ProcessRegistry
    from planrunner.stacks.perfmap import BoundPerfMap, PerfMaps
    from planrunner.stacks.python_frames import LineTables, PythonSection, RawPyFrame
    from planrunner.stacks.state import Unwound
    from planrunner.stacks.symbolize import Symbolizer
    from planrunner.stacks.timeline import MapsTimeline
    from planrunner.stacks.unwind import MappingLookup
    from planrunner.stacks.walk_memo import WalkMemo

MAX_FRAMES = 127
CLEAN_STOPS = ("end", "depth")  # a walk that stops so at its first frame is not lost
EFAULT = 14  # get_stackid: the event has no such stack (a kstack in user mode): empty
UNNAMED = ("?", "?")  # a code object whose names are not in the codes map
# (pid, raw Python frame) -> its Frame: a profile of deep Python code meets the same
# frames (code object, instruction) in sample after sample; every input of the Frame
# (names by code key, line by code, table and instruction) is in the key
PYFRAMES_KEPT = 1 << 16
PY_TAIL_SKIPS = (0, 1, 2, 4, 8, 16)  # innermost frames left out of a remembered tail
PY_TAILS_KEPT = 1 << 13  # (each key holds up to a section's bytes: ~12 MiB at most)
INTERNED_KEPT = 1 << 16  # distinct stacks kept as one tuple each (see _interned)
# Hashes named (per mode) past which those no aggregation key holds are forgotten
# (compact): a long profile meets new stacks for as long as it runs.
UNWOUND_KEPT = 1 << 17


class _NamedWalk(NamedTuple):
    """A template's walk named: kept while the process's maps are `process`, the files
    of the frames' mappings have the same trust verdicts (asked again at `recheck_at`,
    symbolize.py's TRUST_S), and, with frames that have no symbol (`whole` False), the
    process has no perf map (one may name them later)."""

    process: MappingLookup
    frames: list[Frame]
    verdicts: tuple[tuple[Mapping, bool], ...]
    whole: bool
    recheck_at: float


class MapsFeed(Protocol):
    """The kernel's maps records (runtime/task_events.py.TaskEvents)."""

    timeline: MapsTimeline

    def drain(self) -> None: ...

    def fds(self) -> list[int]: ...


def import_readers() -> None:
    """The modules that read and name stacks, imported (a run does it while its
    program compiles: session.py `_warm_up`)."""
    from planrunner.stacks.capture import parse_ustack_record  # noqa: F401
    from planrunner.stacks.demangle import demangle  # noqa: F401
    from planrunner.stacks.modules import ProcessRegistry  # noqa: F401
    from planrunner.stacks.symbolize import Symbolizer  # noqa: F401
    from planrunner.stacks.unwind import unwind  # noqa: F401


class StackResolver:
    """Turns what BPF captured into `Stack` values (see the module docstring)."""

    def __init__(self, source: StackSource | None,
                 registry: ProcessRegistry | None = None,
                 feed: MapsFeed | None = None) -> None:
        self.source = source
        self.feed = feed
        # held by the session's loop while it decodes and aggregates, and by a live
        # view's scrape (another thread) while it reads the same stacks
        self.lock = threading.RLock()
        self._fed_at = 0  # CLOCK_MONOTONIC ns when the feed was last drained
        self._registry = registry
        self._symbolizer: Symbolizer | None = None
        self._perf_maps: PerfMaps | None = None
        self._starts: dict[int, int | None] = {}
        self._expired: set[int] = set()  # gone, and dropped from the BPF side's list
        self._kernel: KernelSymbols | None = None
        self._kernel_loader: threading.Thread | None = None  # prefetch_kernel
        self._kernel_loaded: list[KernelSymbols] = []
        self._ids: dict[tuple[str, int], tuple[Frame, ...]] = {}  # kernel ids: never reused
        # (hash, mode) -> frames of a drained copy, unwound when drained: the 16 KiB
        # copy is not kept; equal frames are one tuple (a profile's many copies of
        # one stack differ in their bytes, not their frames)
        self._unwound: dict[tuple[int, str], tuple[Frame, ...]] = {}
        self._unwound_lost: set[tuple[int, str]] = set()  # of those: lost (docstring)
        self._unwound_cap = UNWOUND_KEPT
        # keyed by the frames' ids (the value holds them alive): hashing a tuple of ~60
        # Frames field by field cost ~50 us a copy; the frames come from the caches
        # below, so a stack met again is mostly the same objects again
        self._interned: dict[tuple[int, ...], tuple[Frame, ...]] = {}
        self._walks: WalkMemo | None = None  # a profile's copies: mostly one walk again
        self._templates: Templates | None = None  # what BPF matches copies against
        # (template id, mode) -> its walk's frames, named (light copies: _light)
        self._named_walks: dict[tuple[int, str], _NamedWalk] = {}
        self._lines: LineTables | None = None  # CPython line tables read so far
        # for BPF, written at the drain's end (render/stacks.py): lines of the Python
        # instructions named, and the light copies' hashes named
        self._line_writes: list[tuple[bytes, int]] = []
        self._known_writes: list[int] = []
        self.python = 0  # Python frames each copy of the copies map holds
        self.python_codes = ""  # the map of code objects' names (render/pyframes.py)
        self._names: dict[bytes, tuple[str, str]] = {}  # code key -> names
        # (pid, struct pr_pyframe bytes) -> its Frame (the bytes hash in C; the
        # RawPyFrame's dataclass hash was ~1 us a frame)
        self._pyframes: dict[tuple[int, bytes], tuple[Frame, bool]] = {}
        # (pid, the raw frames of a section past its first PY_TAIL_SKIPS) -> those frames,
        # named: a deep Python stack differs from the samples before in its innermost
        # frames (the instruction), so a copy names those alone
        self._pytails: dict[tuple[int, bytes], list[tuple[Frame, bool]]] = {}
        # called with each process BPF announces (runtime/python_bins.py)
        self.on_new_process: Callable[[int], None] | None = None
        self.lost = 0  # stacks that could not be shown (not captured, or no maps)
        self.copies_full = 0  # drained from the copies map
        self.copies_light = 0  # drained from the light copies map
        self.copies_ns = [0, 0]  # CPU spent draining them, full and light (their reads too)
        # stacks unwound no further than the probe's frame, by the module they stopped in
        self.unwind_lost: Counter[str] = Counter()

    def prepare(self) -> None:
        """Import and build the unwinders and symbolizers now, before attaching: done
        at the first record, it took long enough under load for a short-lived process
        to exit before its maps were read."""
        import_readers()
        _ = self.registry, self.symbolizer

    def prefetch_kernel(self) -> None:
        """Read /proc/kallsyms in the background, now (0.2-0.7 s on a busy machine):
        the exit that prints a profile's kernel stacks then does not wait for it."""
        if self._kernel is not None or self._kernel_loader is not None:
            return
        from planrunner.stacks.kallsyms import KernelSymbols

        self._kernel_loader = threading.Thread(
            target=lambda: self._kernel_loaded.append(KernelSymbols.load()),
            name="planrunner-kallsyms", daemon=True)
        self._kernel_loader.start()

    def _kernel_symbols(self) -> KernelSymbols:
        if self._kernel_loader is not None:
            self._kernel_loader.join()
            if self._kernel_loaded:
                return self._kernel_loaded[0]
        from planrunner.stacks.kallsyms import KernelSymbols

        return KernelSymbols.load()

    @property
    def registry(self) -> ProcessRegistry:
        if self._registry is None:
            from planrunner.stacks.modules import ProcessRegistry

            self._registry = ProcessRegistry()
        return self._registry

    @property
    def symbolizer(self) -> Symbolizer:
        if self._symbolizer is None:
            from planrunner.stacks.symbolize import Symbolizer

            self._symbolizer = Symbolizer()
        return self._symbolizer

    def jit(self, pid: int, time_ns: int = 0) -> BoundPerfMap:
        """The perf map of `pid` (JIT symbols), as the unwinder and symbolizer take it
        for an event at `time_ns` (0: unknown): read up to at least that time."""
        if self._perf_maps is None:
            from planrunner.stacks.perfmap import PerfMaps

            self._perf_maps = PerfMaps()
        return self._perf_maps.bind(pid, time_ns)

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
        return start

    def announced(self, pid: int) -> None:
        """The BPF side saw `pid` for the first time (since it was last expired)."""
        if self.on_new_process is not None:
            self.on_new_process(pid)
        if self.feed is not None:
            self._feed()
            if self.feed.timeline.knows(pid):  # its maps are known at any time
                self._starts[pid] = read_start_time(pid)  # for expire() only
                self._expired.discard(pid)
                return
        start, now = self._starts.get(pid), read_start_time(pid)
        if pid in self._starts and now != start:
            del self._starts[pid]  # another process under a reused pid
        elif start is not None and now == start:  # seen before: its maps as they are now
            self.registry.reread(pid, start)
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
                self._kernel = self._kernel_symbols()
            frames = tuple(self._kernel.symbolize([ip for ip in ips if ip]))
            self._ids[(map_name, stack_id)] = frames
        return Stack("kernel", frames[:limit])

    # -- user stacks, frame pointers (addresses) ---------------------------------------

    def user_ids(self, map_name: str, pid: int, stack_id: int, limit: int,
                 time_ns: int = 0) -> Stack:
        """A stack id of the user map; `time_ns`: the event's (0 in an aggregation)."""
        if stack_id == -EFAULT:  # a kernel thread
            return Stack("user", ())
        if stack_id < 0 or self.source is None:
            self.lost += 1
            return Stack("user", (), lost=True)
        ips = [ip for ip in (self.source.stack_ips(map_name, stack_id) or [])[:limit] if ip]
        process = self._process(pid, time_ns, ips)
        if process is None:
            return Stack("user", tuple(Frame(ip, None, ip, "") for ip in ips))
        return Stack("user", tuple(self.symbolizer.symbolize(ips, process,
                                                             jit=self.jit(pid, time_ns))))

    # -- user symbols (usym) -------------------------------------------------------------

    def user_symbol(self, pid: int, address: int, time_ns: int = 0) -> UserSymbol:
        """`address` of process `pid` as `symbol+offset`, over its maps at `time_ns` (a
        print record's time; 0 in an aggregation key): a plain address when the process
        was gone before its maps were known, or no symbol covers it."""
        process = self._process(pid, time_ns, (address,))
        if process is None:
            return UserSymbol(address, None, address, "")
        frame = self.symbolizer.symbolize([address], process, jit=self.jit(pid, time_ns))[0]
        return UserSymbol(address, frame.symbol, frame.offset, frame.module)

    # -- user stacks, copies (dwarf, auto) ----------------------------------------------

    def user_copy(self, raw: bytes, limit: int, mode: str, python: int = 0) -> Stack:
        """A copy from a print record (struct pr_ustack; `python`: the frames its Python
        section holds, render/pyframes.py)."""
        if _no_user_stack(raw):
            return Stack("user", ())
        got = self._capture(raw, python)
        if got is None:
            self.lost += 1
            return Stack("user", (), lost=True)
        frames, lost = self._unwind(*got, mode, limit)
        if lost:
            self._count_unwind_lost(frames)
        return Stack("user", frames, lost=lost)

    def _count_unwind_lost(self, frames: tuple[Frame, ...]) -> None:
        self.unwind_lost[frames[0].module if frames and frames[0].module else "?"] += 1

    def _capture(self, raw: bytes,
                 python: int) -> tuple[UserStackCapture, MappingLookup] | None:
        """The capture and the maps of its process at its time (see the docstring)."""
        from planrunner.stacks.capture import X86_64, parse_ustack_record

        capture = parse_ustack_record(raw, X86_64, python)
        process = self._process(capture.pid, capture.time, ())
        return None if process is None else (capture, process)

    def _process(self, pid: int, time_ns: int, addrs: Sequence[int]) -> MappingLookup | None:
        """The maps of `pid` at `time_ns` (0: unknown; then the image holding `addrs`):
        from the feed when it knows the process, else the registry's snapshot; None
        when the process was gone before it was seen."""
        if self.feed is not None:
            if not time_ns or time_ns > self._fed_at:
                self._feed()
            timeline = self.feed.timeline
            modules = timeline.modules(pid, time_ns) if time_ns else \
                timeline.modules_holding(pid, addrs)
            if modules is not None:
                return modules
        start = self.observe(pid)
        return None if start is None else self.registry.bind(pid, start)

    def follow(self) -> None:
        """Take the kernel's maps records now (every turn of the loop), so that its
        rings do not fill while no stack is read."""
        if self.feed is not None:
            self._feed()

    def _feed(self) -> None:
        assert self.feed is not None
        now = time.monotonic_ns()  # taken first: what happened before is in the rings
        self.feed.drain()
        self._fed_at = now

    def _unwind(self, capture: UserStackCapture, process: MappingLookup, mode: str,
                limit: int) -> tuple[tuple[Frame, ...], bool]:
        """The frames, and whether the stack is lost (see the module docstring)."""
        from planrunner.stacks.unwind import unwind
        from planrunner.stacks.walk_memo import WalkMemo

        if self._walks is None:
            self._walks = WalkMemo()
        jit = self.jit(capture.pid, capture.time)
        result = unwind(capture, process, mode, limit, jit, self._walks)
        return self._frames(capture, process, result, jit, limit)

    def _frames(self, capture: UserStackCapture, process: MappingLookup, result: Unwound,
                jit: BoundPerfMap | None, limit: int) -> tuple[tuple[Frame, ...], bool]:
        """A walk's frames, named, with the capture's Python frames; whether it is lost."""
        return self._finish(capture, result,
                            self.symbolizer.symbolize(result.addrs, process, jit=jit), limit)

    def _finish(self, capture: UserStackCapture, result: Unwound, frames: list[Frame],
                limit: int) -> tuple[tuple[Frame, ...], bool]:
        lost = len(result.addrs) == 1 and result.stop not in CLEAN_STOPS
        if capture.python is not None and capture.python.raw:
            frames = self._with_python(capture, frames)[:limit]
            lost = False  # the Python frames say where it was
        return tuple(frames), lost

    def _with_python(self, capture: UserStackCapture, native: list[Frame]) -> list[Frame]:
        """The native frames with the interpreter's loop frames replaced by the Python
        frames they ran (stacks/python_frames.py)."""
        from planrunner.stacks.python_frames import PYFRAME, merge

        assert capture.python is not None
        pid, section = capture.pid, capture.python
        raw, size, n = section.raw, PYFRAME.size, section.count
        # the outer frames of a deep Python stack are those of the samples before: find
        # the longest tail seen, and name only the frames inside it
        for skip in PY_TAIL_SKIPS if raw else ():
            if skip >= n:
                break
            tail = self._pytails.get((pid, raw[skip * size:]))
            if tail is not None:
                head, _ = self._python_frames(pid, section, skip)
                return merge(native, head + tail)
        python, named = self._python_frames(pid, section, n)
        if named and raw:
            if len(self._pytails) >= PY_TAILS_KEPT:
                self._pytails.clear()
            for skip in PY_TAIL_SKIPS:
                if skip >= n:
                    break
                self._pytails[(pid, raw[skip * size:])] = python[skip:]
        return merge(native, python)

    def _python_frames(self, pid: int, section: PythonSection,
                       count: int) -> tuple[list[tuple[Frame, bool]], bool]:
        """The first `count` frames of `section`, named (each with its entry mark), and
        whether every one was."""
        from planrunner.stacks.python_frames import PYFRAME, LineTables, python_frame

        if self._lines is None:
            self._lines = LineTables()
        known, raw, size = self._pyframes, section.raw, PYFRAME.size
        python, all_named = [], True
        for i in range(count):
            rec = (pid, raw[i * size:(i + 1) * size])
            named = known.get(rec)
            if named is None:
                f = section.frame(i)
                names = self._code_names(pid, f)
                named = (python_frame(f, names, self._lines.line(pid, f.code, f)), f.entry)
                if names != UNNAMED:  # names evicted from the BPF map: asked again
                    if len(known) >= PYFRAMES_KEPT:
                        known.clear()
                    known[rec] = named
                    line = named[0].offset  # (a table read as it was freed: any int)
                    if (pid, f.code, f.linetable, f.lasti) in self._lines.exact \
                            and 0 <= line < 1 << 32:
                        self._line_writes.append(
                            (PYLINE_KEY.pack(pid, f.lasti, f.code, f.linetable), line))
                else:
                    all_named = False
            python.append(named)
        return python, all_named

    def _code_names(self, pid: int, frame: RawPyFrame) -> tuple[str, str]:
        """A code object's (qualified name, file name), which BPF left in the codes map
        at its first event in the process; ("?", "?") when it is not there (evicted)."""
        from planrunner.stacks.python_frames import code_names

        key = frame.code_key(pid)
        names = self._names.get(key)
        if names is None:
            value = (self.source.map_value(self.python_codes, key)
                     if self.source is not None and self.python_codes else None)
            if value is None:
                return UNNAMED
            names = self._names[key] = code_names(value)
        return names

    def drain(self, maps: StackMaps, modes: Sequence[str]) -> None:
        """Take the copies waiting in the copies map and the light copies map (emptying
        them) and unwind each in every mode the aggregation keys use, now, while its
        process is known: aggregation keys name them by hash (user_hash). Each full copy
        unwound offers its walks as a template (runtime/stack_templates.py)."""
        from planrunner.stacks.modules import ProcessModules

        if self.source is None or maps.copies is None:
            return
        if self._templates is None and maps.templates:
            from planrunner.runtime.stack_templates import Templates

            self._templates = Templates(self.source, maps.templates)
        t0 = time.thread_time_ns()
        fulls = self.source.drain_copies(maps.copies[0])
        self.copies_full += len(fulls)
        for key, raw in fulls:
            if _no_user_stack(raw):  # a kernel thread: an empty stack, not a lost one
                for mode in modes:
                    self._unwound[(key, mode)] = ()
                continue
            if all((key, mode) in self._unwound for mode in modes):
                continue
            got = self._capture(raw, self.python)
            if got is None:
                continue
            if self._templates is not None and isinstance(got[1], ProcessModules):
                self._templated(key, got[0], got[1], modes)
                continue
            for mode in modes:
                self._keep(key, mode, *self._unwind(*got, mode, MAX_FRAMES))
        t1 = time.thread_time_ns()
        self.copies_ns[0] += t1 - t0
        if maps.light:
            lights = self.source.drain_copies(maps.light)
            self.copies_light += len(lights)
            for key, raw in lights:
                self._light(key, raw, modes)
            self._tell_bpf(maps)
            self.copies_ns[1] += time.thread_time_ns() - t1

    def _tell_bpf(self, maps: StackMaps) -> None:
        """Write what this drain named into the maps BPF hashes light copies by (the
        lines) and skips them by (the hashes named)."""
        assert self.source is not None
        if maps.python_lines:
            for key, line in self._line_writes:
                self.source.update_map(maps.python_lines, key, U32.pack(line))
        if maps.known:
            for h in self._known_writes:
                self.source.update_map(maps.known, h.to_bytes(8, "little"), b"\x01")
        self._line_writes.clear()
        self._known_writes.clear()

    def _keep(self, key: int, mode: str, frames: tuple[Frame, ...], lost: bool) -> None:
        if len(self._interned) >= INTERNED_KEPT:
            self._interned.clear()
        self._unwound[(key, mode)] = self._interned.setdefault(tuple(map(id, frames)), frames)
        if lost:
            self._unwound_lost.add((key, mode))

    def _templated(self, key: int, capture: UserStackCapture, process: ProcessModules,
                   modes: Sequence[str]) -> None:
        """A full copy's walks, each watched, offered as a template."""
        from planrunner.stacks.python_frames import merge_shape
        from planrunner.stacks.walk_memo import WalkMemo
        from planrunner.stacks.walk_template import template_walk

        assert self._templates is not None
        if self._walks is None:
            self._walks = WalkMemo()
        jit = self.jit(capture.pid, capture.time)
        walks = {mode: template_walk(capture, process, mode, MAX_FRAMES, jit, self._walks)
                 for mode in modes}
        shown = []
        named: list[Frame] = []
        for mode, (result, _) in walks.items():
            named = self.symbolizer.symbolize(result.addrs, process, jit=jit)
            self._keep(key, mode, *self._finish(capture, result, named, MAX_FRAMES))
            shown.append((mode, merge_shape(named)))
        # (the first frame, at the sample's pc, is the same in every mode)
        hidden = bool(named) and named[0] is not shown[-1][1][0]
        self._templates.offer(process, walks, tuple(shown),
                              *self._span(capture, process, hidden))

    def _span(self, capture: UserStackCapture, process: ProcessModules,
              hidden: bool) -> tuple[tuple[int, int] | None, bool]:
        """The pcs a template of `capture` holds for (walk_template.first_span), and
        whether Python frames hide its pc: its first frame is the eval loop's, which
        merge_shape leaves out, and the span is cut to the pcs named as that function."""
        from planrunner.stacks.walk_template import first_span

        pc = capture.regs.pc
        span = first_span(pc, process, capture.arch)
        if span is None or not hidden:
            return span, False
        mapping = process.find(pc)
        vaddr = mapping.to_vaddr(pc) if mapping is not None else None
        if mapping is None or vaddr is None:
            return span, False
        named = self.symbolizer.table(mapping).span(vaddr)
        if named is None:
            return span, False
        return (max(span[0], pc - (vaddr - named[0])),
                min(span[1], pc + (named[1] - vaddr))), True

    def _light(self, key: int, raw: bytes, modes: Sequence[str]) -> None:
        """A light copy: its template's walks, with its own Python frames."""
        from planrunner.stacks.modules import ProcessModules
        from planrunner.stacks.symbolize import TRUST_S
        from planrunner.stacks.walk_template import at_pc

        assert self._templates is not None
        if all((key, mode) in self._unwound for mode in modes):  # BPF forgot it was named
            self._known_writes.append(key)
            return
        tid = int.from_bytes(raw[:8], "little")
        got = self._capture(raw[8:], self.python)
        if got is None:
            return
        capture, process = got
        walks = self._templates.walks(
            tid, process if isinstance(process, ProcessModules) else None)
        if walks is None:  # counted lost where a key names it (user_hash)
            return
        jit, now = self.jit(capture.pid, capture.time), time.monotonic()
        no_perf_map = self._perf_maps is None or self._perf_maps.for_pid(capture.pid) is None
        trusted = self.symbolizer.trusted
        settled = True  # every frame named for good: BPF may stop sending this hash
        pc = capture.regs.pc
        for mode in modes:
            walk = at_pc(walks[mode], pc)  # a template of a span: the sample's own pc
            named = self._named_walks.get((tid, mode))
            if named is not None and named.process is process \
                    and (no_perf_map or named.whole) \
                    and (now < named.recheck_at
                         or all(trusted(m) == v for m, v in named.verdicts)):
                frames = named.frames
                if now >= named.recheck_at:  # the verdicts were asked again
                    self._named_walks[(tid, mode)] = named._replace(
                        recheck_at=now + TRUST_S)
            else:
                frames = self.symbolizer.symbolize(walk.addrs, process, jit=jit)
                whole = all(f.symbol is not None for f in frames)
                if no_perf_map or whole:
                    if len(self._named_walks) >= INTERNED_KEPT:
                        self._named_walks.clear()
                    used = {f.mapping for f in frames if f.mapping is not None}
                    self._named_walks[(tid, mode)] = _NamedWalk(
                        process, frames, tuple((m, trusted(m)) for m in used), whole,
                        now + TRUST_S)
            if frames and frames[0].address != pc:
                frames = [*self.symbolizer.symbolize((pc,), process, jit=jit), *frames[1:]]
            final, lost = self._finish(capture, walk, frames, MAX_FRAMES)
            self._keep(key, mode, final, lost)
            # a perf map may name a frame later, BPF's codes map a Python one ("?")
            settled = settled and all(
                f.symbol != UNNAMED[0] if f.kind == "python" else
                no_perf_map or f.symbol is not None for f in final)
        if settled:
            self._known_writes.append(key)

    def over_budget(self) -> bool:
        """Whether the hashes named are many enough to `compact`."""
        return len(self._unwound) > self._unwound_cap

    def compact(self, maps: StackMaps, referenced: Callable[[], set[int]]) -> None:
        """Forget the hashes no aggregation key holds (`referenced()` reads the keys).
        BPF's known hashes are forgotten first, so that a sample of a hash forgotten
        here sends its copy again and a key made after the read is named again."""
        if self.source is not None and maps.known:
            self.source.drain_copies(maps.known)  # (read and deleted: emptied)
        keep = referenced()
        self._unwound = {k: v for k, v in self._unwound.items() if k[0] in keep}
        self._unwound_lost &= self._unwound.keys()
        # the keys held may be many themselves: not again at every turn
        self._unwound_cap = max(UNWOUND_KEPT, 2 * len(self._unwound))

    def copy_counts(self) -> dict[str, int]:
        """The copies drained, full and light, and the templates written and found stale
        (runtime/stack_templates.py): what the templates saved."""
        t = self._templates
        return {"full": self.copies_full, "light": self.copies_light,
                "templates": t.written if t else 0, "stale": t.stale if t else 0,
                "full_us": self.copies_ns[0] // 1000, "light_us": self.copies_ns[1] // 1000}

    def user_hash(self, key: int, limit: int, mode: str) -> Stack:
        frames = self._unwound.get((key & ((1 << 64) - 1), mode))
        if frames is None:
            self.lost += 1
            return Stack("user", (), lost=True)
        if (key & ((1 << 64) - 1), mode) in self._unwound_lost:
            self._count_unwind_lost(frames)
            return Stack("user", frames[:limit], lost=True)
        return Stack("user", frames[:limit])


def _no_user_stack(raw: bytes) -> bool:
    """A capture without user registers (a sample of a kernel thread: pc 0)."""
    return int.from_bytes(raw[16:24], "little") == 0
