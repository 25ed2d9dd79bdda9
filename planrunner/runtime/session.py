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
import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from types import FrameType
from typing import Any, TextIO

from planrunner.output.base import LiveView, View
from planrunner.render.model import AttachSite, Counter, RenderedProgram
from planrunner.runtime.aggregates import AggregateReader
from planrunner.runtime.attach import distinct_sites
from planrunner.runtime.backend import Backend
from planrunner.runtime.child import Child
from planrunner.runtime.decode import Decoder
from planrunner.runtime.scope import Scope, apply_scope, own_pid_namespace
from planrunner.runtime.semaphores import semaphore_mode
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
    scope: Scope = Scope()  # --pid (several), --comm, --cgroup, --follow-children

    def effective_scope(self, child_pid: int | None) -> Scope:
        """The scope traced: the -c command's pid as its --pid, `pid` alone as one."""
        if child_pid is not None:
            return self.scope.with_command(child_pid)
        if self.pid and not self.scope.pids:
            return replace(self.scope, pids=(self.pid,))
        return self.scope


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
        scope = opts.effective_scope(child.pid if child else None)
        try:
            backend.load(program)
            mode = semaphore_mode(backend.features)
            try:
                sites = _attach(backend, program, scope, ref_ctr=mode == "refctr")
                # the process whose semaphores (poke mode) and late libraries are watched
                one = scope.pids[0] if len(scope.pids) == 1 else None
                upkeep = Upkeep(sites, one, mode, stderr, bool(opts.pid))
                upkeep.start()
                backend.open_ring()
                for lv in live:
                    lv.start(AggregateReader(program, backend, wall, monotonic), len(sites),
                             mode)
                    started.append(lv)
                aggs = AggregateReader(program, backend, wall, monotonic, reset=not live)
                n = len(sites)
                what = scope.describe()
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


def _attach(backend: Backend, program: RenderedProgram, scope: Scope,
            ref_ctr: bool) -> list[AttachSite]:
    """Fill the config slots and scope maps (runtime/scope.py), then attach every
    distinct site; the sites attached. `ref_ctr=False` (poke mode,
    runtime/semaphores.py) attaches without the kernel's reference counter."""
    # The exit program, and --follow-children's fork one, first: no child is missed.
    for extra in apply_scope(backend, program, scope, own_pid_namespace()):
        backend.attach(extra, None, False)
    pid = scope.attach_pid
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
    decoder = Decoder(program.prints)
    deadline = clocks.monotonic() + opts.duration_s if opts.duration_s else None
    remaining = opts.max_events
    exit_status = 0
    watched = () if child is not None else opts.effective_scope(None).pids
    while True:
        upkeep.turn()
        batch = backend.read_ring(POLL_MS)
        if batch:
            if remaining is not None:
                batch = batch[:remaining]
                remaining -= len(batch)
            view.records(decoder.decode_batch(batch))
            view.flush()
        aggs.tick(view)
        if remaining is not None and remaining <= 0:
            break
        if stop.reason or (deadline is not None and clocks.monotonic() >= deadline):
            break
        if child is not None and child.poll() is not None:
            exit_status = child.exit_status()
            break
        if watched and not any(_alive(p) for p in watched):  # every --pid ended
            stderr.write(f"process{'es' if len(watched) > 1 else ''} "
                         f"{', '.join(map(str, watched))} exited\n")
            break
    _detach(backend, upkeep)  # first, so that the tail below holds every event that fired
    if remaining is None or remaining > 0:  # what arrived before the stop still counts
        tail = backend.read_ring(0)
        if remaining is not None:
            tail = tail[:remaining]
        view.records(decoder.decode_batch(tail))
    aggs.finish(view)
    view.flush()
    if decoder.unreadable:
        stderr.write(f"{decoder.unreadable} strings could not be read (shown as null)\n")
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
