"""A tracing session: attach, drain, print, stop, detach — whatever happens.

Stops on --duration, --max-events, Ctrl-C, SIGTERM, SIGHUP, the end of a `-c` command
or of the --pid process, or a closed stdout. Every exit path goes through `finally`,
which detaches every probe (the kernel then drops the semaphores it raised) and lowers
the semaphores raised by hand in poke mode (runtime/semaphores.py); an exception
inside planrunner takes the same path before its traceback is shown. A SIGKILL skips
it: the kernel still drops its probes and reference counts, and the next run undoes
poke-mode semaphores from the state file.

Each loop turn is: upkeep (late libraries, poke mode: runtime/upkeep.py), read the
ring, print, tick the `every:` aggregations, check the stop conditions. The loop never
blocks for more than POLL_MS, so stopping is prompt at any event rate. The kernel is
reached only through the Backend given (runtime/backend.py): the bcc one in `run`, a
fake in unit tests. Live views (Prometheus) are started after attaching and pull
snapshots through a SnapshotSource; while one runs, aggregation maps are never reset.

Imports render/model.py, output/base.py and runtime/ modules; never plan/, resolve/,
prometheus/ or commands/.
"""

from __future__ import annotations

import os
import shutil
import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import FrameType
from typing import Any, TextIO

from planrunner.output.base import LiveView, View
from planrunner.render.model import AttachSite, ConfigSlot, Counter, RenderedProgram, StackMaps
from planrunner.runtime.aggregates import AggregateReader
from planrunner.runtime.attach import distinct_sites
from planrunner.runtime.backend import Backend
from planrunner.runtime.child import Child
from planrunner.runtime.decode import Decoder
from planrunner.runtime.semaphores import semaphore_mode
from planrunner.runtime.stacks import StackResolver
from planrunner.runtime.upkeep import Upkeep, recover

POLL_MS = 50
# What signal.signal takes and returns (typeshed's private _HANDLER).
_Handler = Callable[[int, FrameType | None], Any] | int | signal.Handlers | None


@dataclass(frozen=True, slots=True)
class RunOptions:
    pid: int | None = None
    command: list[str] | None = None
    duration_s: float | None = None
    max_events: int | None = None


class _Stop:
    """Signal flag: handlers only set it, so a flood never delays the exit."""

    def __init__(self) -> None:
        self.reason: str | None = None
        self._old: dict[int, _Handler] = {}

    def install(self) -> None:
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            self._old[sig] = signal.signal(sig, self._handler)

    def restore(self) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)

    def _handler(self, signum: int, _frame: FrameType | None) -> None:
        self.reason = signal.Signals(signum).name


@dataclass(frozen=True, slots=True)
class _Clocks:
    wall: Callable[[], float]
    monotonic: Callable[[], float]


def run_session(program: RenderedProgram, opts: RunOptions, view: View, stderr: TextIO,
                backend: Backend, live: Sequence[LiveView] = (),
                wall: Callable[[], float] = time.time,
                monotonic: Callable[[], float] = time.monotonic) -> int:
    """Trace until a stop condition; the exit status (a `-c` command's own, else 0).
    `backend` is not loaded yet: the session loads it after starting the `-c` child
    and closes it whatever happens. `wall`/`monotonic` are for tests' clocks."""
    clocks = _Clocks(wall, monotonic)
    stop = _Stop()
    stop.install()
    child: Child | None = None
    upkeep: Upkeep | None = None
    started: list[LiveView] = []
    status = 0
    try:
        recover(stderr)
        child = Child.spawn_stopped(opts.command) if opts.command else None
        pid = child.pid if child else opts.pid
        try:
            backend.load(program)
            mode = semaphore_mode(backend.features)
            try:
                sites = _attach(backend, program, pid, ref_ctr=mode == "refctr")
                upkeep = Upkeep(sites, pid, mode, stderr, bool(opts.pid))
                upkeep.start()
                backend.open_ring()
                for lv in live:
                    lv.start(AggregateReader(program, backend, wall, monotonic), len(sites),
                             mode)
                    started.append(lv)
                stacks = _stack_resolver(backend, program, opts, child)
                aggs = AggregateReader(program, backend, wall, monotonic, reset=not live,
                                       stacks=stacks)
                n = len(sites)
                what = f"process {pid}" if pid else "all processes"
                stderr.write(f"Tracing {n} probe site{'s' if n != 1 else ''} in {what}. "
                             "Hit Ctrl-C to end.\n")
                stderr.flush()
                if child:
                    child.release()
                status = _loop(backend, upkeep, aggs, program, opts, view, stderr, stop,
                               child, clocks)
            finally:
                _detach(backend, upkeep)
                for lv in started:
                    lv.close()
            _report_losses(backend, program, view, stderr)
        finally:
            backend.close()
    except BrokenPipeError:
        _silence_stdout()
        status = 0
    finally:
        stop.restore()
        if child is not None:
            child.kill_if_running()
    return status


def _stack_resolver(backend: Backend, program: RenderedProgram, opts: RunOptions,
                    child: Child | None) -> StackResolver:
    """The reader of the program's stacks; it knows the files the plan attaches to and
    the -c command's, and reads the --pid process's maps now, before it can exit (a -c
    child has not exec'd yet: the loop's first turn reads its maps)."""
    known = [s.binary.path for s in program.sites if s.binary is not None]
    if child is not None and opts.command:
        known.append(shutil.which(opts.command[0]) or opts.command[0])
    stacks = StackResolver(backend, known)
    if opts.pid and program.stack_maps != StackMaps():
        stacks.observe(opts.pid)
    return stacks


def _attach(backend: Backend, program: RenderedProgram, pid: int | None,
            ref_ctr: bool) -> list[AttachSite]:
    """Fill the config slots, then attach every distinct site; the sites attached.
    `ref_ctr=False` (poke mode, runtime/semaphores.py) attaches without the kernel's
    reference counter."""
    backend.set_config(ConfigSlot.SELF, os.getpid())  # our own events are dropped
    if pid and program.has_tracepoints:  # uprobes are filtered at attach, these in BPF
        backend.set_config(ConfigSlot.PID, pid)
    sites = distinct_sites(program.sites)
    for site in sites:
        backend.attach(site, pid, ref_ctr)
    return sites


def _detach(backend: Backend, upkeep: Upkeep | None) -> None:
    """Semaphores raised by hand go down while the probes are still on (no hit is
    missed), then every probe goes; what fired is all in the ring buffer then.
    Idempotent: the loop does it before reading the tail, `finally` again."""
    try:
        if upkeep is not None:
            upkeep.finish()
    finally:
        backend.detach()


def _loop(backend: Backend, upkeep: Upkeep, aggs: AggregateReader, program: RenderedProgram,
          opts: RunOptions, view: View, stderr: TextIO, stop: _Stop, child: Child | None,
          clocks: _Clocks) -> int:
    stacks = aggs.stacks or StackResolver(backend)
    decoder = Decoder(program.prints, stacks, program.stack_maps)
    seen_child = program.stack_maps == StackMaps()  # no stacks: nothing to read
    deadline = clocks.monotonic() + opts.duration_s if opts.duration_s else None
    remaining = opts.max_events
    exit_status = 0
    while True:
        upkeep.turn()
        batch = backend.read_ring(POLL_MS)
        if child is not None and not seen_child:  # exec'd by now: its maps, early
            seen_child = True
            stacks.observe(child.pid)
        if batch:
            recs = decoder.decode_batch(batch)  # a "new process" notice is no record
            if remaining is not None:
                recs = recs[:remaining]
                remaining -= len(recs)
            view.records(recs)
            view.flush()
        aggs.tick(view)
        if remaining is not None and remaining <= 0:
            break
        if stop.reason or (deadline is not None and clocks.monotonic() >= deadline):
            break
        if child is not None and child.poll() is not None:
            exit_status = child.exit_status()
            break
        if opts.pid and not _alive(opts.pid):
            stderr.write(f"process {opts.pid} exited\n")
            break
    _detach(backend, upkeep)  # first, so that the tail below holds every event that fired
    if remaining is None or remaining > 0:  # what arrived before the stop still counts
        tail = decoder.decode_batch(backend.read_ring(0))
        if remaining is not None:
            tail = tail[:remaining]
        view.records(tail)
    aggs.finish(view)
    view.flush()
    if decoder.unreadable:
        stderr.write(f"{decoder.unreadable} strings could not be read (shown as null)\n")
    if stacks.lost:
        stderr.write(f"{stacks.lost} stacks could not be shown (not captured, or their "
                     "process had exited before planrunner read its maps: see `stack:` in "
                     "docs/plan-format.md)\n")
    return exit_status


def _report_losses(backend: Backend, program: RenderedProgram, view: View,
                   stderr: TextIO) -> None:
    lost = backend.counter(Counter.LOST_RINGBUF)
    if lost:
        view.lost(lost, "ringbuf full")
        view.flush()
        stderr.write(f"{lost} events lost (ring buffer full)\n")
    dropped = backend.counter(Counter.LOST_MAPFULL)
    if dropped:
        stderr.write(f"{dropped} aggregation updates dropped (map full: raise "
                     "settings.map_size)\n")
    replaced = backend.counter(Counter.SPAN_REPLACED)
    if replaced:
        stderr.write(f"{replaced} span begins replaced an open begin of their key: nested "
                     "calls? use nested: true\n")
    lost_stacks = backend.counter(Counter.STACK_LOST)
    if lost_stacks:
        stderr.write(f"{lost_stacks} stacks were not captured (a stack map was full, or two "
                     "stacks collided in it; they show as lost)\n")
    deep = backend.counter(Counter.SPAN_OVERFLOW)
    if deep:
        stderr.write(f"{deep} nested span begins deeper than settings.span_depth "
                     f"({program.span_depth}) were not timed: raise it\n")


def _silence_stdout() -> None:
    """After `| head` closed stdout, point fd 1 at /dev/null so the interpreter's final
    flush does not print a BrokenPipeError."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.close(devnull)


def _alive(pid: int) -> bool:
    """The process exists and is not a zombie (an unreaped child still has /proc/PID)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read()
    except OSError:
        return False
    return stat[stat.rfind(b")") + 2:][:1] not in (b"Z", b"X")
