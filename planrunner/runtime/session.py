"""A tracing session: attach, drain, print, stop, detach — whatever happens.

Stops on --duration, --max-events, Ctrl-C, SIGTERM, SIGHUP, the end of a `-c` command
or of the --pid process, or a closed stdout. Every exit path goes through `finally`,
which detaches every probe (the kernel then drops the semaphores it raised) and lowers
the semaphores raised by hand in poke mode (runtime/semaphores.py); an exception
inside planrunner takes the same path before its traceback is shown. A SIGKILL skips
it: the kernel still drops its probes and reference counts, and the next run undoes
poke-mode semaphores from the state file. Per-turn work besides records (late
libraries, poke mode, the crash test hook) is in runtime/upkeep.py.
The loop never blocks for more than POLL_MS, so stopping is prompt at any event rate.
"""

from __future__ import annotations

import os
import shutil
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TextIO

from planrunner.output.base import View
from planrunner.prometheus import ExporterConfig, maybe_start
from planrunner.render.model import Counter, RenderedProgram
from planrunner.runtime.aggregates import AggregateReader
from planrunner.runtime.child import Child
from planrunner.runtime.decode import Decoder
from planrunner.runtime.semaphores import semaphore_mode
from planrunner.runtime.stacks import StackResolver
from planrunner.runtime.upkeep import Turns, Upkeep, recover

POLL_MS = 50
# Records decoded per loop turn at most: bounds memory and keeps stop checks frequent
# when the kernel produces faster than we print (the rest waits in the ring buffer).
MAX_BATCH = 65536


@dataclass(frozen=True, slots=True)
class RunOptions:
    pid: int | None = None
    command: list[str] | None = None
    duration_s: float | None = None
    max_events: int | None = None
    prometheus: ExporterConfig | None = None  # --prometheus: serve the aggregations


class _Stop:
    """Signal flag: handlers only set it, so a flood never delays the exit."""

    def __init__(self) -> None:
        self.reason: str | None = None
        self._old: dict[int, object] = {}

    def install(self) -> None:
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            self._old[sig] = signal.signal(sig, self._handler)

    def restore(self) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)  # type: ignore[arg-type]

    def _handler(self, signum: int, _frame: object) -> None:
        self.reason = signal.Signals(signum).name


def run_session(program: RenderedProgram, opts: RunOptions, view: View, stderr: TextIO,
                backend_factory: Callable[[RenderedProgram], object] | None = None) -> int:
    from planrunner.runtime.bcc_backend import BccProgram

    stop = _Stop()
    stop.install()
    child: Child | None = None
    upkeep: Upkeep | None = None
    exporter = None
    status = 0
    try:
        recover(stderr)
        mode = semaphore_mode()
        child = Child.spawn_stopped(opts.command) if opts.command else None
        pid = child.pid if child else opts.pid
        with (backend_factory or BccProgram)(program) as prog:  # type: ignore[operator]
            try:
                n = prog.attach_all(pid, ref_ctr=mode == "refctr")
                upkeep = Upkeep(prog.attached_sites, pid, mode, stderr, bool(opts.pid))
                upkeep.start()
                prog.open_events()
                exporter = maybe_start(opts.prometheus, program, prog, n, mode, stderr)
                known = [s.binary.path for s in program.sites if s.binary is not None]
                if child is not None and opts.command:
                    known.append(shutil.which(opts.command[0]) or opts.command[0])
                stacks = StackResolver(prog, known)
                if opts.pid:  # its maps now, before it can exit (a -c child has not
                    stacks.observe(opts.pid)  # exec'd yet: its first record does it)
                aggs = AggregateReader(program, prog, reset=exporter is None, stacks=stacks)
                what = f"process {pid}" if pid else "all processes"
                stderr.write(f"Tracing {n} probe site{'s' if n != 1 else ''} in {what}. "
                             "Hit Ctrl-C to end.\n")
                stderr.flush()
                if child:
                    child.release()
                status = _loop(Turns(prog, upkeep), program, opts, view, stderr, stop, child,
                               aggs)
            finally:
                try:  # hand-raised semaphores (poke mode) go down while the probes are on
                    if upkeep is not None:
                        upkeep.finish()
                finally:
                    prog.detach_all()
                if exporter is not None:
                    exporter.close()
            _report_losses(prog, program, view, stderr)
    except BrokenPipeError:
        _silence_stdout()
        status = 0
    finally:
        stop.restore()
        if child is not None:
            child.kill_if_running()
    return status


def _loop(prog, program: RenderedProgram, opts: RunOptions, view: View, stderr: TextIO,  # type: ignore[no-untyped-def]
          stop: _Stop, child: Child | None, aggs: AggregateReader) -> int:
    decoder = Decoder(program.prints, aggs.stacks, program.stack_maps)
    deadline = time.monotonic() + opts.duration_s if opts.duration_s else None
    remaining = opts.max_events
    exit_status = 0
    seen_child = False
    while True:
        batch = prog.poll(POLL_MS)
        if child is not None and not seen_child:  # exec'd by now: its maps, early
            seen_child = True
            aggs.stacks.observe(child.pid)
        if batch:
            if remaining is not None:
                batch = batch[:remaining]
                remaining -= len(batch)
            view.records(decoder.decode_batch(batch))
            view.flush()
        aggs.tick(view)
        if remaining is not None and remaining <= 0:
            break
        if stop.reason or (deadline is not None and time.monotonic() >= deadline):
            break
        if child is not None and child.poll() is not None:
            exit_status = child.exit_status()
            break
        if opts.pid and not _alive(opts.pid):
            stderr.write(f"process {opts.pid} exited\n")
            break
    prog.detach_all()  # first, so that the tail below holds every event that fired
    if remaining is None or remaining > 0:  # what arrived before the stop still counts
        tail = prog.poll(0)
        if remaining is not None:
            tail = tail[:remaining]
        view.records(decoder.decode_batch(tail))
    aggs.finish(view)
    view.flush()
    if decoder.unreadable:
        stderr.write(f"{decoder.unreadable} strings could not be read (shown as null)\n")
    unwound = decoder.stacks.lost
    if unwound:
        stderr.write(f"{unwound} stacks could not be shown (not captured, or their process "
                     "had exited before planrunner saw it: see `stack:` in "
                     "docs/plan-format.md)\n")
    return exit_status


def _report_losses(prog, program: RenderedProgram, view: View,  # type: ignore[no-untyped-def]
                   stderr: TextIO) -> None:
    lost = prog.counter(0)
    if lost:
        view.lost(lost, "ringbuf full")
        view.flush()
        stderr.write(f"{lost} events lost (ring buffer full)\n")
    dropped = prog.counter(1)
    if dropped:
        stderr.write(f"{dropped} aggregation updates dropped (map full: raise "
                     "settings.map_size)\n")
    replaced = prog.counter(Counter.SPAN_REPLACED)
    if replaced:
        stderr.write(f"{replaced} span begins replaced an open begin of their key: nested "
                     "calls? use nested: true\n")
    lost_stacks = prog.counter(Counter.STACK_LOST)
    if lost_stacks:
        stderr.write(f"{lost_stacks} stacks were not captured (a stack map was full, or two "
                     "stacks collided in it; they show as lost)\n")
    deep = prog.counter(Counter.SPAN_OVERFLOW)
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
