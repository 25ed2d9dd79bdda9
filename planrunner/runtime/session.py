"""A tracing session: attach, drain, print, stop, detach — whatever happens.

Stops on --duration, --max-events, Ctrl-C, SIGTERM, SIGHUP, the end of a `-c` command
or of the --pid process, or a closed stdout. A stop during start-up is honoured at
once during the compile (it runs in a worker thread) and between two sites while
attaching: what was attached is detached and a `-c` command is never started. A
stdout nobody reads cannot hold the run: a write still blocked OUTPUT_GRACE_S after a
stop (or the deadline) is abandoned, and what was not written is counted as lost.
A `-c` command still running at the end gets SIGTERM, then SIGKILL after CHILD_GRACE_S
(at once on a second Ctrl-C). Every exit path goes through `finally`,
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

Exit status: 0 for a normal end (Ctrl-C, SIGTERM and SIGHUP included), a `-c`
command's own (128+N when a signal ended it, planrunner's included, whatever stopped
tracing: a closed stdout too), 128+N when signal N stopped start-up before tracing
began, EXIT_INCOMPLETE when records or aggregation updates were lost (with `-c`, the
command's status stays and the last line says it).

Imports render/model.py, output/base.py and runtime/ modules; never plan/, resolve/,
prometheus/ or commands/. What only reads and prints (the decoder, the aggregation
reader, records.py; the stack modules for plans without stacks) is imported once
tracing has begun: a warm run reaches "Tracing" without them.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from types import FrameType
from typing import TYPE_CHECKING, Any, TextIO

from planrunner.elf.procmaps import stat_fields
from planrunner.errors import BackendError
from planrunner.render.model import (
    PLANRUNNER_SITES,
    AttachSite,
    ConfigSlot,
    Counter,
    RenderedProgram,
    StackMaps,
)
from planrunner.runtime.attach import check_unchanged, distinct_sites
from planrunner.runtime.backend import Backend
from planrunner.runtime.child import Child
from planrunner.runtime.ringbuf import possible_cpus
from planrunner.runtime.scope import Scope, apply_scope, own_pid_namespace
from planrunner.runtime.semaphores import semaphore_mode
from planrunner.runtime.upkeep import Upkeep, recover

if TYPE_CHECKING:  # imported where used: what only reads and prints loads after attaching
    from planrunner.output.base import LiveView, View
    from planrunner.records import AggSnapshot, TableSnapshot
    from planrunner.runtime.stacks import StackResolver
    from planrunner.runtime.task_events import TaskEvents

POLL_MS = 50
EXEC_POLL_MS = 2  # a loop turn while the -c command has not exec'd yet
EXEC_WAIT_S = 1.0  # then its maps are read anyway (an exec takes milliseconds)
# After a stop or the deadline, how long one write of at most OUTPUT_CHUNK records may
# stay blocked before the output is abandoned: a reader that is merely slow (a terminal
# over ssh) keeps up by the chunk, one that reads nothing does not.
OUTPUT_GRACE_S = 1.0
OUTPUT_CHUNK = 1024
# How long a `-c` command has to end after SIGTERM before it gets SIGKILL.
CHILD_GRACE_S = 3.0
# A run that lost records or aggregation updates (without -c; with -c the last line says
# it and the command's status stays).
EXIT_INCOMPLETE = 4
# What signal.signal takes and returns (typeshed's private _HANDLER).
_Handler = Callable[[int, FrameType | None], Any] | int | signal.Handlers | None
_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@dataclass(frozen=True, slots=True)
class RunOptions:
    """What `run` asked for: the pid or command, the stop conditions, the scope."""

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


class _StartupStopped(Exception):
    """A stop signal arrived before tracing began."""

    def __init__(self, signame: str, attached: int, total: int) -> None:
        super().__init__(signame)
        self.signame = signame
        self.attached = attached
        self.total = total


class _OutputBlocked(Exception):
    """Raised by the SIGALRM handler inside a write that outlived its grace."""


class _Stop:
    """Signal flag: handlers only set it, so a flood never delays the exit. Inside a
    write to the output (`guard`), a stop also arms a SIGALRM OUTPUT_GRACE_S later,
    whose handler raises _OutputBlocked: a write blocked on a full pipe is retried by
    Python after every handler that returns (PEP 475), so only raising ends it."""

    def __init__(self) -> None:
        self.reason: str | None = None
        self.count = 0  # stop signals received
        self._in_output = False
        self._old: dict[int, _Handler] = {}

    def install(self) -> None:
        for sig in _STOP_SIGNALS:
            self._old[sig] = signal.signal(sig, self._handler)
        self._old[signal.SIGALRM] = signal.signal(signal.SIGALRM, self._alarm)

    def restore(self) -> None:
        signal.setitimer(signal.ITIMER_REAL, 0)
        for sig, old in self._old.items():
            signal.signal(sig, old)

    def check(self, attached: int = 0, total: int = 0) -> None:
        """During start-up: stop now if told to."""
        if self.reason is not None:
            raise _StartupStopped(self.reason, attached, total)

    @contextmanager
    def guard(self, seconds_left: float | None) -> Iterator[None]:
        """Run a write that must not outlive a stop (or `seconds_left`, the deadline)
        by more than OUTPUT_GRACE_S; _OutputBlocked when it does."""
        if self.reason is not None:
            seconds_left = 0.0
        if seconds_left is not None:
            signal.setitimer(signal.ITIMER_REAL, max(seconds_left, 0.0) + OUTPUT_GRACE_S)
        self._in_output = True
        try:
            yield
        finally:
            self._in_output = False
            signal.setitimer(signal.ITIMER_REAL, 0)

    def _handler(self, signum: int, _frame: FrameType | None) -> None:
        self.reason = signal.Signals(signum).name
        self.count += 1
        if self._in_output:
            left = signal.getitimer(signal.ITIMER_REAL)[0]
            if left == 0 or left > OUTPUT_GRACE_S:
                signal.setitimer(signal.ITIMER_REAL, OUTPUT_GRACE_S)

    def _alarm(self, _signum: int, _frame: FrameType | None) -> None:
        if self._in_output:
            self._in_output = False
            raise _OutputBlocked


@dataclass(slots=True)
class _Clocks:
    """The wall and monotonic clocks (tests pass their own), and the wall time tracing
    began at (set once, when everything is attached)."""

    wall: Callable[[], float]
    monotonic: Callable[[], float]
    traced_since: float | None = None


class _Output:
    """The view, written under `_Stop.guard`. Once a write was abandoned the view is
    never touched again (a half-written line may sit in its buffer): what the session
    still has to show is only counted."""

    def __init__(self, view: View, stop: _Stop) -> None:
        self.view = view
        self.stop = stop
        self.blocked = False
        self.unwritten = 0  # records not written
        self.unwritten_snaps = 0  # aggregation snapshots not written

    def records(self, batch: Sequence[dict[str, object]], seconds_left: float | None) -> None:
        if not batch:
            return
        for start in range(0, len(batch), OUTPUT_CHUNK):
            chunk = batch[start:start + OUTPUT_CHUNK]
            if self.blocked:
                self.unwritten += len(chunk)
                continue
            try:
                with self.stop.guard(seconds_left):
                    self.view.records(chunk)
                    self.view.flush()
            except _OutputBlocked:
                self.blocked = True
                self.unwritten += len(chunk)  # some may have reached the pipe: at most

    def call(self, write: Callable[[View], None], seconds_left: float | None) -> None:
        """`write(view)` (aggregation snapshots, losses) under the same rules."""
        if self.blocked:
            write(_Counting(self))
            return
        try:
            with self.stop.guard(seconds_left):
                write(self.view)
                self.view.flush()
        except _OutputBlocked:
            self.blocked = True
            self.unwritten_snaps += 1


class _Counting:
    """A View that writes nothing and counts what it is given (the output is blocked)."""

    def __init__(self, out: _Output) -> None:
        self.out = out

    def record(self, rec: dict[str, object]) -> None:
        self.out.unwritten += 1

    def records(self, batch: Sequence[dict[str, object]]) -> None:
        self.out.unwritten += len(batch)

    def aggregate(self, snap: AggSnapshot) -> None:
        self.out.unwritten_snaps += 1

    def table(self, snap: TableSnapshot) -> None:
        self.out.unwritten_snaps += 1

    def lost(self, count: int, reason: str) -> None:
        pass

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass


def run_session(program: RenderedProgram, opts: RunOptions, view: View, stderr: TextIO,
                backend: Backend, live: Sequence[LiveView] = (),
                wall: Callable[[], float] = time.time,
                monotonic: Callable[[], float] = time.monotonic) -> int:
    """Trace until a stop condition; the exit status (see the module docstring).
    `backend` is not loaded yet: the session loads it after starting the `-c` child
    and closes it whatever happens. `wall`/`monotonic` are for tests' clocks."""
    clocks = _Clocks(wall, monotonic)
    stop = _Stop()
    stop.install()
    child: Child | None = None
    upkeep: Upkeep | None = None
    started: list[LiveView] = []
    feed: TaskEvents | None = None
    from planrunner.runtime.silence import Heard

    heard = Heard(view)  # what showed something: said why not at the end otherwise
    out = _Output(heard, stop)
    status = 0
    try:
        recover(stderr)
        child = Child.spawn_stopped(opts.command) if opts.command else None
        scope = opts.effective_scope(child.pid if child else None)
        try:
            _load(backend, program, stop)
            mode = semaphore_mode(backend.features)
            try:
                sites = _attach(backend, program, scope, mode == "refctr", stop, stderr)
                # the process whose semaphores (poke mode) and late libraries are watched
                one = scope.pids[0] if len(scope.pids) == 1 else None
                upkeep = Upkeep(sites, one, mode, stderr, bool(opts.pid))
                upkeep.start()
                backend.open_ring()
                stop.check(len(sites), len(sites))  # the last moment before the command runs
                feed = _maps_feed(program, stderr, child)
                stacks = _stack_resolver(backend, program, opts, feed)
                if live:  # a scrape names stacks with the loop's resolver, under its lock
                    from planrunner.runtime.aggregates import AggregateReader

                    for lv in live:
                        lv.start(AggregateReader(program, backend, wall, monotonic,
                                                 stacks=stacks), len(sites), mode)
                        started.append(lv)
                n = len(sites)
                what = scope.describe()
                stderr.write(f"Tracing {n} probe site{'s' if n != 1 else ''} in {what}. "
                             "Hit Ctrl-C to end.\n")
                stderr.flush()
                # the run's first interval starts here, before the command runs: the
                # aggregation reader is built later, once tracing has begun
                clocks.traced_since = clocks.wall()
                if child:
                    child.release()
                status = _loop(backend, upkeep, stacks, program, opts, out, stderr, stop,
                               child, clocks, bool(live))
            finally:
                _detach(backend, upkeep)
                for lv in started:
                    lv.close()
            lost = _report_losses(backend, program, out, stderr)
            if not lost and not out.blocked and upkeep is not None:  # (not incomplete)
                from planrunner.runtime.silence import explain

                single = scope.pids[0] if len(scope.pids) == 1 else None
                stderr.writelines(explain(program, heard, child,
                                          single if child is None else None, upkeep,
                                          scope.follow_children))
        finally:
            backend.close()
        if child is not None:
            status = _end_child(child, stop, stderr, status)
        if lost:
            stderr.write(f"incomplete trace: {', '.join(lost)}\n")
            if child is None and status == 0:
                status = EXIT_INCOMPLETE
    except _StartupStopped as exc:
        status = 128 + signal.Signals[exc.signame].value
        if exc.total:
            what = f"{exc.attached} of {exc.total} probe sites had been attached, now " \
                   "detached"
        else:
            what = "nothing had been attached"
        not_run = "; the command was not started" if child is not None else ""
        stderr.write(f"stopped by {exc.signame} during start-up, before tracing began: "
                     f"{what}{not_run}\n")
    except BrokenPipeError:  # stdout closed (`| head`): a normal end
        _silence_stdout()
        status = 0
        if child is not None and child.released:  # its status, as for any other stop
            status = _end_child(child, stop, stderr, status)
    finally:
        if feed is not None:
            feed.close()
        if child is not None:
            child.terminate(CHILD_GRACE_S, lambda: stop.count > 1)  # no-op when it ended
        stop.restore()
        if out.blocked:
            _silence_stdout()  # what the view still buffers could never be flushed
    return status


def _maps_feed(program: RenderedProgram, stderr: TextIO,
               child: Child | None) -> TaskEvents | None:
    """The kernel's maps records, for a program with user stacks (they are symbolized
    over the maps their process had then, runtime/task_events.py); opened before the
    command runs. Without a -c command, the processes already running are read from
    /proc now (a --pid process, or any of a system-wide profile, may exit before its
    stacks are read). Without the records (perf events refused), the maps are read
    from /proc when a process is first seen."""
    if not (program.stack_maps.seen or program.stack_maps.user):
        return None
    from planrunner.runtime.task_events import TaskEvents
    from planrunner.stacks.timeline import MapsTimeline

    try:
        feed = TaskEvents(MapsTimeline())
    except OSError as exc:
        stderr.write(f"the kernel's mmap records are not available ({exc.strerror}): "
                     "stacks of processes that exit within microseconds may be lost\n")
        return None
    if child is None:
        feed.seed_running()
    return feed


def _stack_resolver(backend: Backend, program: RenderedProgram, opts: RunOptions,
                    feed: TaskEvents | None) -> StackResolver | None:
    """The reader of the program's stacks; it reads the --pid process's maps now,
    before it can exit (a -c child's exec is in the feed, or the loop reads its maps
    right after its exec). None without stacks: the loop makes one that reads none."""
    if program.stack_maps == StackMaps():  # no stacks: nothing to read
        return None
    from planrunner.runtime.stacks import StackResolver

    stacks = StackResolver(backend, feed=feed)
    stacks.prepare()
    if opts.pid:
        stacks.observe(opts.pid)
    return stacks


def _load(backend: Backend, program: RenderedProgram, stop: _Stop) -> None:
    """`backend.load` in a worker thread, so that a stop during a long compile (seconds
    for a large plan) is honoured at once: nothing is attached yet, so the compile is
    simply abandoned (the process is about to exit; bcc's call releases the GIL)."""
    stop.check()
    failed: list[BaseException] = []

    def compile_() -> None:
        try:
            backend.load(program)
        except BaseException as exc:  # noqa: BLE001 - handed over to the main thread
            failed.append(exc)

    worker = threading.Thread(target=compile_, name="planrunner-load", daemon=True)
    worker.start()
    while worker.is_alive():
        worker.join(POLL_MS / 1000)
        stop.check()
    if failed:
        raise failed[0]
    stop.check()


def _end_child(child: Child, stop: _Stop, stderr: TextIO, status: int) -> int:
    """The -c command is still running when tracing stops short of its end: SIGTERM,
    then SIGKILL. The status is its own then (128+N for the signal that ended it)."""
    if child.poll() is not None:
        return status if status else child.exit_status()
    count = stop.count
    sent = child.terminate(CHILD_GRACE_S, lambda: stop.count > count)
    if sent == "SIGKILL":
        stderr.write(f"the command (pid {child.pid}) did not end within {CHILD_GRACE_S:g} s "
                     "of SIGTERM: sent SIGKILL\n")
    elif sent is not None:
        stderr.write(f"the command (pid {child.pid}) was still running: sent {sent}\n")
    return child.exit_status()


def _attach(backend: Backend, program: RenderedProgram, scope: Scope,
            ref_ctr: bool, stop: _Stop, stderr: TextIO) -> list[AttachSite]:
    """Fill the config slots and scope maps (runtime/scope.py), then attach every
    distinct site; the sites attached. `ref_ctr=False` (poke mode,
    runtime/semaphores.py) attaches without the kernel's reference counter. A stop
    signal ends it between two sites (the caller detaches); a binary replaced since
    resolve read it is refused, before and after attaching."""
    backend.set_config(ConfigSlot.NR_CPUS, possible_cpus())  # the wakeup watermark
    # The exit program, and --follow-children's fork one, first: no child is missed.
    for extra in apply_scope(backend, program, scope, own_pid_namespace()):
        try:
            backend.attach(extra, None, False)
        except BackendError as exc:
            if extra not in PLANRUNNER_SITES:
                raise
            # a kernel without syscall tracepoints: planrunner processes are still
            # skipped once registered
            stderr.write(f"warning: cannot watch for planrunner processes starting "
                         f"({extra.category}:{extra.event}: {exc}): one that starts while "
                         "this run is attached may be traced until it registers\n")
    pid = scope.attach_pid
    sites = distinct_sites(program.sites)
    binaries = [s.binary for s in sites if s.binary is not None]
    check_unchanged(binaries)
    for n, site in enumerate(sites):
        stop.check(n, len(sites))
        backend.attach(site, pid, ref_ctr)
    stop.check(len(sites), len(sites))
    backend.finish_attach()  # the uprobe links, one per binary: they all go on now
    check_unchanged(binaries, gone_ok=True)
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


def _loop(backend: Backend, upkeep: Upkeep, stacks: StackResolver | None,
          program: RenderedProgram, opts: RunOptions, out: _Output, stderr: TextIO,
          stop: _Stop, child: Child | None, clocks: _Clocks, live: bool) -> int:
    # Built once tracing has begun: the probes already record into the ring while the
    # decoding and aggregation modules load (a run with the caches warm reaches
    # "Tracing" without them).
    from planrunner.runtime.aggregates import AggregateReader
    from planrunner.runtime.decode import Decoder
    from planrunner.runtime.stacks import StackResolver

    if stacks is None:
        stacks = StackResolver(backend)
    aggs = AggregateReader(program, backend, clocks.wall, clocks.monotonic, reset=not live,
                           since=clocks.traced_since,
                           stacks=stacks)
    decoder = Decoder(program.prints, stacks, program.stack_maps)
    # no command, or no stacks (nothing to read): nothing to wait for
    # (with the kernel's maps records, the command's exec is in them: nothing either)
    seen_child = child is None or program.stack_maps == StackMaps() or stacks.feed is not None
    exec_wait_end = clocks.monotonic() + EXEC_WAIT_S
    deadline = clocks.monotonic() + opts.duration_s if opts.duration_s else None

    def left() -> float | None:  # real seconds to the deadline, for the output's guard
        return deadline - clocks.monotonic() if deadline is not None else None

    remaining = opts.max_events
    exit_status = 0
    watched = () if child is not None else opts.effective_scope(None).pids
    while True:
        if child is not None:
            child.look()  # what it runs, for runtime/silence.py
            upkeep.counting = upkeep.counting or child.execed()
        upkeep.turn()
        # until the command has exec'd, short turns: its maps are read right after the
        # exec, before it can fire and exit (addresses are named over them)
        batch = backend.read_ring(POLL_MS if seen_child else EXEC_POLL_MS)
        if child is not None and not seen_child and (
                child.execed() or clocks.monotonic() >= exec_wait_end):
            seen_child = True
            if stacks.feed is None:
                stacks.observe(child.pid)
        with stacks.lock:  # a live view's scrape (another thread) reads stacks too
            if batch:
                recs = decoder.decode_batch(batch)  # a "new process" notice is no record
                if remaining is not None:
                    recs = recs[:remaining]
                    remaining -= len(recs)
                out.records(recs, left())
            stacks.follow()
            if program.aggregates or program.stack_maps.seen:  # (stacks: copies, expiry)
                out.call(aggs.tick, left())
        if remaining is not None and remaining <= 0:
            break
        if stop.reason or (deadline is not None and clocks.monotonic() >= deadline):
            break
        if out.blocked:  # the deadline passed inside a write
            break
        if child is not None and child.poll() is not None:
            exit_status = child.exit_status()
            break
        if watched and not any(_alive(p) for p in watched):  # every --pid ended
            stderr.write(f"process{'es' if len(watched) > 1 else ''} "
                         f"{', '.join(map(str, watched))} exited\n")
            break
    _detach(backend, upkeep)  # first, so that the tail below holds every event that fired
    # What arrived before the stop still counts, all of it: a read returns a bounded
    # batch, and the ring may hold many.
    while remaining is None or remaining > 0:
        raw = backend.read_ring(0)
        if not raw:
            break
        with stacks.lock:
            tail = decoder.decode_batch(raw)
        if remaining is not None:
            tail = tail[:remaining]
            remaining -= len(tail)
        out.records(tail, 0.0)
    with stacks.lock:  # live views are still serving
        final = aggs.final()  # stacks unwound and symbolized before the guarded write
    out.call(lambda view: aggs.write(final, view), 0.0)
    if decoder.unreadable:
        stderr.write(f"{decoder.unreadable} strings could not be read (shown as null)\n")
    if stacks.lost:
        stderr.write(f"{stacks.lost} stacks could not be shown (not captured, or their "
                     "process had exited before planrunner knew its maps: see `stack:` in "
                     "docs/plan-format.md)\n")
    if stacks.unwind_lost:
        where = ", ".join(f"{n} in {m}" for m, n in stacks.unwind_lost.most_common())
        stderr.write(f"{stacks.unwind_lost.total()} stacks could not be unwound past the "
                     f"probe's frame ({where}): no usable CFI there (`.eh_frame` missing or "
                     "corrupt); shown as [stack lost]. `unwind: fp` may do where the "
                     "module keeps frame pointers\n")
    return exit_status


def _report_losses(backend: Backend, program: RenderedProgram, out: _Output,
                   stderr: TextIO) -> list[str]:
    """Say what was lost, on stderr and to the view; the losses, for the last line."""
    lost: list[str] = []
    ring = backend.counter(Counter.LOST_RINGBUF)
    if ring:
        out.call(lambda view: view.lost(ring, "ringbuf full"), 0.0)
        stderr.write(f"{ring} events lost (ring buffer full)\n")
        lost.append(f"{ring} events lost")
    if out.blocked:
        what = f"{out.unwritten} records"
        if out.unwritten_snaps:
            what += f" and {out.unwritten_snaps} aggregation snapshots"
        stderr.write(f"{what} not written: the output was blocked for {OUTPUT_GRACE_S:g} s "
                     "after the stop (is anything reading it?)\n")
        lost.append(f"{what} not written")
    dropped = backend.counter(Counter.LOST_MAPFULL)
    if dropped:
        stderr.write(f"{dropped} aggregation updates dropped (map full: raise "
                     "settings.map_size)\n")
        lost.append(f"{dropped} aggregation updates dropped")
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
    # Notes, not losses: under a profile hook these are expected (docs/plan-format.md).
    unmatched = backend.counter(Counter.SPAN_UNMATCHED)
    if unmatched:
        stderr.write(f"note: {unmatched} span ends matched no open begin and were not "
                     "paired (their begin came before tracing, or never fired: e.g. the "
                     "return of a profile hook)\n")
    dropped_begins = backend.counter(Counter.SPAN_DROPPED)
    if dropped_begins:
        stderr.write(f"note: {dropped_begins} open span begins were dropped: an end "
                     "matched a begin below them, so their own end never came\n")
    return lost


def _silence_stdout() -> None:
    """After `| head` closed stdout, point fd 1 at /dev/null so the interpreter's final
    flush does not print a BrokenPipeError."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.close(devnull)


def _alive(pid: int) -> bool:
    """The process exists and is not a zombie (an unreaped child still has /proc/PID)."""
    fields = stat_fields(pid)
    return fields is not None and bool(fields) and fields[0] not in (b"Z", b"X")
