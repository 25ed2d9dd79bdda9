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

`Session` is one run: its `run` sets up in order (the -c child, the backend, the
probes, live views) and two ExitStacks undo it in the reverse order whatever happens;
why tracing ended is its `stop_reason`, a `StopReason`. `run_session` makes and runs one.

Each loop turn is: upkeep (late libraries, poke mode: runtime/upkeep.py), read the
ring, print, tick the `every:` aggregations, check the stop conditions. The loop never
blocks for more than POLL_MS, so stopping is prompt at any event rate; but a program
without print outputs, whose sites are all perf samplers and whose run has no -c
command, live view or late-library watch (a profile), sleeps until something is due
instead, woken at once by a stop signal, the ring, a --pid process's end or the maps
records (runtime/loop_wait.py). The kernel is
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
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, replace
from enum import Enum
from types import FrameType
from typing import TYPE_CHECKING, Any, TextIO

from planrunner.errors import BackendError
from planrunner.render.model import (
    WATCH_SITES,
    AttachSite,
    ConfigSlot,
    Counter,
    RenderedProgram,
    StackMaps,
)
from planrunner.runtime.attach import check_unchanged, distinct_sites
from planrunner.runtime.backend import Backend
from planrunner.runtime.child import Child
from planrunner.runtime.pid_watch import ExitWatch
from planrunner.runtime.ringbuf import possible_cpus
from planrunner.runtime.scope import Scope, apply_scope, own_pid_namespace
from planrunner.runtime.semaphores import semaphore_mode
from planrunner.runtime.upkeep import Upkeep, recover
from planrunner.timing import mark, note

if TYPE_CHECKING:  # imported where used: what only reads and prints loads after attaching
    from planrunner.output.base import LiveView, View
    from planrunner.records import AggSnapshot, TableSnapshot
    from planrunner.runtime.aggregates import AggregateReader
    from planrunner.runtime.decode import Decoder
    from planrunner.runtime.loop_wait import TurnWaiter
    from planrunner.runtime.python_bins import PythonBinaries
    from planrunner.runtime.stacks import StackResolver
    from planrunner.runtime.task_events import TaskEvents

POLL_MS = 50
EXEC_POLL_MS = 2  # a loop turn while the -c command has not exec'd yet
EXEC_WAIT_S = 1.0  # then its maps are read anyway (an exec takes milliseconds)
# After a stop or the deadline, how long one write of at most OUTPUT_CHUNK records may
# stay blocked before the output is abandoned: a reader that is merely slow (a terminal
# over ssh) keeps up by the chunk, one that reads nothing does not.
OUTPUT_GRACE_S = 1.0
# After Ctrl-C (SIGTERM, SIGHUP) or --duration, how long the ring's tail is read and
# printed, from the request (the signal, the deadline): a full ring under a flood takes
# ~0.3 s to print; past this the rest is released unread and counted as lost (issue 28:
# a stop ends <= 0.2 s after it). A batch being printed when the stop comes is left
# there, by the chunk, to be printed as the tail's first part (`Session._show_until_asked`):
# one read of a flooded ring is up to ~0.15 s of decoding and printing, which the stop
# (the detach first) would otherwise wait for.
TAIL_S = 0.1
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

    def __init__(self, monotonic: Callable[[], float] = time.monotonic) -> None:
        self.reason: str | None = None
        self.count = 0  # stop signals received
        self.at: float | None = None  # when the first came (monotonic)
        self._monotonic = monotonic
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
        if self.at is None:
            self.at = self._monotonic()
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


class StopReason(Enum):
    """Why a session ended (`Session.stop_reason`)."""

    MAX_EVENTS = "--max-events records were shown"
    SIGNAL = "a stop signal (SIGINT, SIGTERM, SIGHUP)"
    DURATION = "--duration elapsed"
    OUTPUT_BLOCKED = "the deadline passed inside a blocked write"
    COMMAND_ENDED = "the -c command ended"
    PIDS_EXITED = "every --pid process exited"
    STDOUT_CLOSED = "stdout was closed"
    STARTUP_STOPPED = "a stop signal came before tracing began"


def run_session(program: RenderedProgram, opts: RunOptions, view: View, stderr: TextIO,
                backend: Backend, live: Sequence[LiveView] = (),
                wall: Callable[[], float] = time.time,
                monotonic: Callable[[], float] = time.monotonic) -> int:
    """Trace until a stop condition; the exit status (see the module docstring and
    Session)."""
    return Session(program, opts, view, stderr, backend, live, wall, monotonic).run()


class Session:
    """One tracing session. `backend` is not loaded yet: `run` loads it after starting
    the `-c` child and closes it whatever happens. What was set up is undone in the
    reverse order of its setting up, by two ExitStacks: `run`'s (stop handlers and
    stdout, the child, the maps feed) and `_trace`'s (the backend, then the probes and
    live views). `stop_reason` says why tracing ended. `wall`/`monotonic` are for tests'
    clocks."""

    def __init__(self, program: RenderedProgram, opts: RunOptions, view: View,
                 stderr: TextIO, backend: Backend, live: Sequence[LiveView] = (),
                 wall: Callable[[], float] = time.time,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        from planrunner.runtime.silence import Heard

        self.program = program
        self.opts = opts
        self.stderr = stderr
        self.backend = backend
        self.live = tuple(live)
        self.clocks = _Clocks(wall, monotonic)
        self.stop = _Stop(monotonic)
        self.heard = Heard(view)  # what showed something: said why not at the end otherwise
        self.out = _Output(self.heard, self.stop)
        self.child: Child | None = None
        self.upkeep: Upkeep | None = None
        self.started: list[LiveView] = []
        self.stop_reason: StopReason | None = None
        self._remaining = opts.max_events  # records still to show (--max-events)
        self._deadline: float | None = None  # monotonic end of --duration
        self._quiet_s: float | None = None  # a quiet loop's longest sleep (loop_wait.py)
        self.tail_dropped = 0  # records left unprinted past TAIL_S after a stop
        self._cut = False  # a batch was cut at TAIL_S: the ring's tail is released unread
        self._pending: list[bytes] = []  # read, not yet printed when the stop was asked
        self._detaching: threading.Thread | None = None  # the run's own tracepoints
        self._detach_failed: list[BaseException] = []

    def run(self) -> int:
        """Trace until a stop condition; the exit status (see the module docstring)."""
        with ExitStack() as cleanup:
            self.stop.install()
            cleanup.callback(self._restore)
            try:
                status = self._trace(cleanup)
            except _StartupStopped as exc:
                self.stop_reason = StopReason.STARTUP_STOPPED
                status = self._startup_stopped(exc)
            except BrokenPipeError:  # stdout closed (`| head`): a normal end
                self.stop_reason = StopReason.STDOUT_CLOSED
                _silence_stdout()
                status = 0
                if self.child is not None and self.child.released:
                    # its status, as for any other stop
                    status = _end_child(self.child, self.stop, self.stderr, status)
        return status

    def _restore(self) -> None:
        """The last clean-up: the signal handlers as they were."""
        self.stop.restore()
        if self.out.blocked:
            _silence_stdout()  # what the view still buffers could never be flushed

    def _terminate_child(self) -> None:
        if self.child is not None:  # a no-op when it ended
            self.child.terminate(CHILD_GRACE_S, lambda: self.stop.count > 1)

    def _close_live_views(self) -> None:
        for lv in self.started:
            lv.close()

    def _detach(self) -> None:
        if self._detaching is not None:
            self._detaching.join()
            self._detaching = None
            if self._detach_failed:
                raise self._detach_failed.pop()
        _detach(self.backend, self.upkeep)

    def _detach_probes(self) -> None:
        """The plan's probes go (then what fired is all in the ring); the run's own
        tracepoints go in a thread while the tail is read: they record nothing, and
        the kernel closes tracepoints one grace period after another (~40 ms each on a
        busy machine). `_detach` waits for them."""
        try:
            if self.upkeep is not None:
                self.upkeep.finish()
        finally:
            self.backend.detach_probes()
        failed = self._detach_failed

        def rest() -> None:
            try:
                self.backend.detach()
            except BaseException as exc:  # noqa: BLE001 - raised by _detach, on this side
                failed.append(exc)

        self._detaching = threading.Thread(target=rest, name="detach", daemon=True)
        self._detaching.start()

    def _trace(self, cleanup: ExitStack) -> int:
        recover(self.stderr)
        if self.opts.command:
            self.child = Child.spawn_stopped(self.opts.command)
            cleanup.callback(self._terminate_child)
        scope = self.opts.effective_scope(self.child.pid if self.child else None)
        with ExitStack() as loaded:
            loaded.callback(self.backend.close)
            _load(self.backend, self.program, self.stop, meanwhile=self._warm_up)
            mark("loaded")
            mode = semaphore_mode(self.backend.features)
            with ExitStack() as attached:
                attached.callback(self._close_live_views)
                attached.callback(self._detach)  # first: the probes, then the live views
                status = self._attach_and_loop(scope, mode, cleanup)
            mark("detached")
            lost = _report_losses(self.backend, self.program, self.out, self.stderr,
                                  self.tail_dropped)
            if not lost and not self.out.blocked and self.upkeep is not None:  # complete
                from planrunner.runtime.silence import explain

                single = scope.pids[0] if len(scope.pids) == 1 else None
                self.stderr.writelines(explain(
                    self.program, self.heard, self.child,
                    single if self.child is None else None, self.upkeep,
                    scope.follow_children))
        mark("closed")
        if self.child is not None:
            status = _end_child(self.child, self.stop, self.stderr, status)
        if lost:
            self.stderr.write(f"incomplete trace: {', '.join(lost)}\n")
            if self.child is None and status == 0:
                status = EXIT_INCOMPLETE
        return status

    def _warm_up(self) -> None:
        """What the run reads right after its attach and can read before its program
        exists, read while the compile worker compiles the program: off the path to
        `Tracing` (~20-70 ms for a plan with stacks)."""
        if self.program.stack_maps != StackMaps():
            from planrunner.runtime.stacks import import_readers

            import_readers()
        if self.program.python_bins_map:
            from planrunner.runtime.python_bins import read_ahead

            read_ahead()

    def _attach_and_loop(self, scope: Scope, mode: str, cleanup: ExitStack) -> int:
        # before attaching: the plan's uprobes may trap this process's own calls (c-leaks
        # traces malloc: the interpreters' glob took 30 ms after attaching, 1 ms before)
        pythons = _python_binaries(self.backend, self.program, self.opts, scope,
                                   self.stderr)
        sites, left_out = _attach(self.backend, self.program, scope, mode == "refctr",
                                  self.stop, self.stderr)
        mark("attached")
        # the process whose semaphores (poke mode) and late libraries are watched
        one = scope.pids[0] if len(scope.pids) == 1 else None
        upkeep = self.upkeep = Upkeep(sites, one, mode, self.stderr, bool(self.opts.pid))
        upkeep.start()
        self.backend.open_ring()
        self.stop.check(len(sites), len(sites))  # the last moment before the command runs
        feed = _maps_feed(self.program, self.stderr, self.child)
        if feed is not None:
            cleanup.callback(feed.close)
        stacks = _stack_resolver(self.backend, self.program, self.opts, feed)
        if stacks is not None and pythons is not None:
            stacks.on_new_process = pythons.process
        if self.live:  # a scrape names stacks with the loop's resolver, under its lock
            from planrunner.runtime.aggregates import AggregateReader

            for lv in self.live:
                lv.start(AggregateReader(self.program, self.backend, self.clocks.wall,
                                         self.clocks.monotonic, stacks=stacks),
                         len(sites), mode)
                self.started.append(lv)
        n = len(sites) + sum(len(s.file_offsets) for s in self.program.sets) - left_out
        mark("tracing")
        self.stderr.write(f"Tracing {n} probe site{'s' if n != 1 else ''} in "
                          f"{scope.describe()}. Hit Ctrl-C to end.\n")
        self.stderr.flush()
        # the run's first interval starts here, before the command runs: the
        # aggregation reader is built later, once tracing has begun
        self.clocks.traced_since = self.clocks.wall()
        if self.opts.duration_s:  # from the `Tracing` line, as the user reads it
            self._deadline = self.clocks.monotonic() + self.opts.duration_s
        if self.child:
            self.child.release()
        return self._loop(upkeep, stacks)

    def _startup_stopped(self, exc: _StartupStopped) -> int:
        if exc.total:
            what = f"{exc.attached} of {exc.total} probe sites had been attached, now " \
                   "detached"
        else:
            what = "nothing had been attached"
        not_run = "; the command was not started" if self.child is not None else ""
        self.stderr.write(f"stopped by {exc.signame} during start-up, before tracing "
                          f"began: {what}{not_run}\n")
        return 128 + signal.Signals[exc.signame].value

    def _left(self) -> float | None:
        """Real seconds to the deadline, for the output's guard."""
        if self._deadline is None:
            return None
        return self._deadline - self.clocks.monotonic()

    def _shown(self, recs: list[dict[str, object]]) -> list[dict[str, object]]:
        """The records of `recs` --max-events still lets through."""
        if self._remaining is None:
            return recs
        recs = recs[:self._remaining]
        self._remaining -= len(recs)
        return recs

    def _asked_at(self) -> float | None:
        """When a stop was asked (monotonic): a stop signal's arrival, else the deadline
        once it has passed; None before either."""
        if self.stop.reason is not None:
            return self.stop.at
        if self._deadline is not None and self.clocks.monotonic() >= self._deadline:
            return self._deadline
        return None

    def _tail_over(self) -> bool:
        """A stop was asked TAIL_S ago or more."""
        asked = self._asked_at()
        return asked is not None and self.clocks.monotonic() - asked >= TAIL_S

    def _print_chunks(self, decoder: Decoder, raw: list[bytes], seconds_left: float | None,
                      until: Callable[[int], bool]) -> int:
        """Decode and print `raw` OUTPUT_CHUNK records at a time, asking `until(start)`
        before each chunk; the index it stopped at (len(raw): all were printed)."""
        for start in range(0, len(raw), OUTPUT_CHUNK):
            if until(start):
                return start
            recs = decoder.decode_batch(raw[start:start + OUTPUT_CHUNK])
            self.out.records(self._shown(recs), seconds_left)
        return len(raw)

    def _show_until_asked(self, decoder: Decoder, raw: list[bytes],
                          seconds_left: float | None) -> list[bytes]:
        """Print `raw` by the chunk until a stop is asked; what is left then (the tail's
        first part, printed after the detach)."""
        return raw[self._print_chunks(decoder, raw, seconds_left,
                                      lambda _start: self._asked_at() is not None):]

    def _show(self, decoder: Decoder, raw: list[bytes], seconds_left: float | None,
              keep: int = 0) -> None:
        """Print `raw` by the chunk; once a stop's TAIL_S has run out, what is left past
        the first `keep` records is counted as not printed (tail_dropped) instead, and
        the ring's tail goes unread (`_cut`)."""
        done = self._print_chunks(decoder, raw, seconds_left,
                                  lambda start: start >= keep and self._tail_over())
        if done < len(raw):
            self.tail_dropped += len(raw) - done
            self._cut = True

    def _loop(self, upkeep: Upkeep, stacks: StackResolver | None) -> int:
        # Built once tracing has begun: the probes already record into the ring while the
        # decoding and aggregation modules load (a run with the caches warm reaches
        # "Tracing" without them).
        from planrunner.runtime.aggregates import AggregateReader
        from planrunner.runtime.decode import Decoder
        from planrunner.runtime.gc_policy import settle
        from planrunner.runtime.stacks import StackResolver

        backend, program, clocks, child = self.backend, self.program, self.clocks, self.child
        if stacks is None:
            stacks = StackResolver(backend)
        settle()
        aggs = AggregateReader(program, backend, clocks.wall, clocks.monotonic,
                               reset=not self.live, since=clocks.traced_since,
                               stacks=stacks)
        decoder = Decoder(program.prints, stacks, program.stack_maps)
        # no command, or no stacks (nothing to read): nothing to wait for
        # (with the kernel's maps records, the command's exec is in them: nothing either)
        seen_child = (child is None or program.stack_maps == StackMaps()
                      or stacks.feed is not None)
        exec_wait_end = clocks.monotonic() + EXEC_WAIT_S
        watched = () if child is not None else self.opts.effective_scope(None).pids
        exits = ExitWatch(watched) if watched else None
        waiter = self._quiet_waiter(upkeep, stacks, exits)
        reason: StopReason | None = None
        try:  # (the previous wakeup fd back, whatever ends the loop)
            while reason is None:
                if child is not None:
                    child.look()  # what it runs, for runtime/silence.py
                    upkeep.counting = upkeep.counting or child.execed()
                upkeep.turn()
                stopping = False
                if waiter is not None:  # nothing to look at until something is due
                    batch = backend.read_ring(0)
                    if not batch:
                        waiter.wait(self._quiet_wait_s(aggs), exits.fds() if exits else ())
                        batch = backend.read_ring(0)
                    # woken by a stop: the copies of up to a second wait for the end's
                    # drain (aggs.final), not for a turn before the stop
                    stopping = self._why_stop(exits) is not None
                else:
                    # until the command has exec'd, short turns: its maps are read right
                    # after the exec, before it can fire and exit (addresses are named
                    # over them)
                    batch = backend.read_ring(POLL_MS if seen_child else EXEC_POLL_MS)
                if child is not None and not seen_child and (
                        child.execed() or clocks.monotonic() >= exec_wait_end):
                    seen_child = True
                    if stacks.feed is None:
                        stacks.observe(child.pid)
                with stacks.lock:  # a live view's scrape (another thread) reads stacks too
                    if batch:  # a "new process" notice is no record
                        self._pending = self._show_until_asked(decoder, batch, self._left())
                    if not stopping:
                        stacks.follow()
                        if program.aggregates or program.stack_maps.seen:  # (copies, expiry)
                            self.out.call(aggs.tick, self._left())
                reason = self._why_stop(exits)
        finally:
            if waiter is not None:
                waiter.close()
        if exits is not None:
            exits.close()
        self.stop_reason = reason
        exit_status = 0
        if reason is StopReason.COMMAND_ENDED:
            assert child is not None
            exit_status = child.exit_status()
        elif reason is StopReason.PIDS_EXITED:
            self.stderr.write(f"process{'es' if len(watched) > 1 else ''} "
                              f"{', '.join(map(str, watched))} exited\n")
        mark("stopping")  # (PLANRUNNER_TIMING=1: where a stop's time goes)
        self._detach_probes()  # first, so that the tail below holds every event that fired
        mark("probes-detached")
        # What arrived before the stop still counts: a read returns a bounded batch, and
        # the ring may hold many. Asked to stop (a signal, --duration), for TAIL_S at
        # most: what is left then is counted as lost.
        # First what the loop read but had not printed when the stop was asked, then the
        # ring's tail: of each, one chunk is always printed, so that a slow detach on a
        # busy machine cannot cost a small tail; past TAIL_S the rest is cut by the chunk.
        hurry = reason in (StopReason.SIGNAL, StopReason.DURATION)
        pending, self._pending = self._pending, []
        if pending:
            with stacks.lock:
                self._show(decoder, pending, 0.0, OUTPUT_CHUNK if hurry else len(pending))
        reads = 0
        while self._remaining is None or self._remaining > 0:
            if hurry and (self._cut or (reads and self._tail_over())):
                mark("tail-cut")
                self.tail_dropped += backend.discard_ring()
                break
            reads += 1
            raw = backend.read_ring(0)
            if not raw:
                break
            with stacks.lock:
                self._show(decoder, raw, 0.0, OUTPUT_CHUNK if hurry else len(raw))
        mark("tail-shown")
        with stacks.lock:  # live views are still serving
            final = aggs.final()  # stacks unwound and symbolized before the guarded write
        self.out.call(lambda view: aggs.write(final, view), 0.0)
        _report_unreadable(decoder.unreadable, stacks, self.stderr)
        return exit_status

    def _quiet_waiter(self, upkeep: Upkeep, stacks: StackResolver,
                      exits: ExitWatch | None) -> TurnWaiter | None:
        """For a loop that may sleep until something is due (runtime/loop_wait.py): what
        ends its sleep early; None when it turns every POLL_MS."""
        from planrunner.runtime.loop_wait import TurnWaiter, quiet_turn_s

        self._quiet_s = quiet_turn_s(self.program, possible_cpus())
        ring_fd = self.backend.ring_fd()
        if (self._quiet_s is None or ring_fd is None or self.child is not None or self.live
                or upkeep.watcher is not None or (exits is not None and exits.looks_at_stat)
                or threading.current_thread() is not threading.main_thread()):
            return None
        feed = stacks.feed
        return TurnWaiter([ring_fd, *(feed.fds() if feed is not None else ())])

    def _quiet_wait_s(self, aggs: AggregateReader) -> float:
        """How long a quiet loop sleeps now: until the next print or expiry, the
        deadline, or its longest sleep."""
        assert self._quiet_s is not None
        now = self.clocks.monotonic()
        due = [now + self._quiet_s]
        if (tick := aggs.next_due()) is not None:
            due.append(tick)
        if self._deadline is not None:
            due.append(self._deadline)
        return min(due) - now

    def _why_stop(self, exits: ExitWatch | None) -> StopReason | None:
        """The reason to end tracing after this turn, if any (in this order)."""
        if self._remaining is not None and self._remaining <= 0:
            return StopReason.MAX_EVENTS
        if self.stop.reason:
            return StopReason.SIGNAL
        if self._deadline is not None and self.clocks.monotonic() >= self._deadline:
            return StopReason.DURATION
        if self.out.blocked:  # the deadline passed inside a write
            return StopReason.OUTPUT_BLOCKED
        if self.child is not None and self.child.poll() is not None:
            return StopReason.COMMAND_ENDED
        if exits is not None and exits.all_ended():  # every --pid ended
            return StopReason.PIDS_EXITED
        return None


def _report_unreadable(strings: int, stacks: StackResolver, stderr: TextIO) -> None:
    """Say what the records showed as null or lost: strings and stacks not read."""
    note("copies", **stacks.copy_counts())
    if strings:
        stderr.write(f"{strings} strings could not be read (shown as null)\n")
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
    stacks.python = program.stack_maps.python
    stacks.python_codes = program.python_codes_map
    stacks.prepare()
    if program.stack_maps.kernel is not None:
        stacks.prefetch_kernel()
    if opts.pid:
        stacks.observe(opts.pid)
    return stacks


def _python_binaries(backend: Backend, program: RenderedProgram, opts: RunOptions,
                     scope: Scope, stderr: TextIO) -> PythonBinaries | None:
    """The CPython interpreters whose frames the program reads, written to its map
    before anything runs (runtime/python_bins.py); None when no stack keeps them."""
    if not program.python_bins_map:
        return None
    from planrunner.runtime.python_bins import PythonBinaries

    pythons = PythonBinaries(backend, program, stderr)
    pythons.register_start(opts.command, scope.pids,
                           sorted({s.binary.path for s in program.sites if s.binary}))
    return pythons


def _load(backend: Backend, program: RenderedProgram, stop: _Stop,
          meanwhile: Callable[[], None] | None = None) -> None:
    """`backend.load` in a worker thread, so that a stop during a long compile (seconds
    for a large plan) is honoured at once: nothing is attached yet, so the compile is
    simply abandoned (the process is about to exit; bcc's call releases the GIL).
    `meanwhile`: Backend.load's."""
    stop.check()
    failed: list[BaseException] = []

    def compile_() -> None:
        try:
            backend.load(program, meanwhile)
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
            ref_ctr: bool, stop: _Stop, stderr: TextIO) -> tuple[list[AttachSite], int]:
    """Fill the config slots and scope maps (runtime/scope.py), then attach every
    distinct site and every uprobe set; the sites attached, and how many functions of
    the sets the kernel refused (left out, each named in a warning). `ref_ctr=False` (poke mode,
    runtime/semaphores.py) attaches without the kernel's reference counter. A stop
    signal ends it between two sites (the caller detaches); a binary replaced since
    resolve read it is refused, before and after attaching."""
    backend.set_config(ConfigSlot.NR_CPUS, possible_cpus())  # the wakeup watermark
    # The exit program, and --follow-children's fork one, first: no child is missed.
    for extra in apply_scope(backend, program, scope, own_pid_namespace()):
        try:
            backend.attach(extra, None, False)
        except BackendError as exc:
            if extra not in WATCH_SITES:
                raise
            # a kernel without syscall tracepoints: planrunner processes are still
            # skipped once registered
            stderr.write(f"warning: cannot watch for planrunner processes starting "
                         f"({extra.category}:{extra.event}: {exc}): one that starts while "
                         "this run is attached may be traced until it registers\n")
    pid = scope.attach_pid
    sites = distinct_sites(program.sites)
    binaries = [s.binary for s in sites if s.binary is not None] + [
        s.binary for s in program.sets]
    check_unchanged(binaries)
    for n, site in enumerate(sites):
        stop.check(n, len(sites))
        backend.attach(site, pid, ref_ctr)
    stop.check(len(sites), len(sites))
    backend.finish_attach()  # the uprobe links, one per binary: they all go on now
    left_out = 0
    for probes in program.sets:  # a set is one attach of all its functions
        stop.check(len(sites), len(sites))
        refused = backend.attach_set(probes, pid)
        left_out += len(refused)
        for why in dict.fromkeys(w for _f, w in refused):
            names = sorted(f for f, w in refused if w == why)
            shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more"
                                             if len(names) > 5 else "")
            stderr.write(f"warning: probe set '{probes.probe}': {len(names)} of its "
                         f"{len(probes.file_offsets)} functions left out, the kernel "
                         f"refused them ({why}): {shown}\n")
    check_unchanged(binaries, gone_ok=True)
    return sites, left_out


def _detach(backend: Backend, upkeep: Upkeep | None) -> None:
    """Semaphores raised by hand go down while the probes are still on (no hit is
    missed), then every probe goes; what fired is all in the ring buffer then.
    Idempotent: the loop does it before reading the tail, `finally` again."""
    try:
        if upkeep is not None:
            upkeep.finish()
    finally:
        backend.detach()


def _report_losses(backend: Backend, program: RenderedProgram, out: _Output,
                   stderr: TextIO, tail: int = 0) -> list[str]:
    """Say what was lost, on stderr and to the view; the losses, for the last line."""
    lost: list[str] = []
    ring = backend.counter(Counter.LOST_RINGBUF)
    if tail:
        out.call(lambda view: view.lost(tail, "left in the ring at the stop"), 0.0)
        stderr.write(f"{tail} events not printed: still in the ring buffer or not yet "
                     f"printed {TAIL_S:g} s after the stop\n")
        lost.append(f"{tail} events not printed")
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


