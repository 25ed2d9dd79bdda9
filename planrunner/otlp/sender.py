"""The run's side of the exporter: export never slows or stops tracing.

The session's thread only appends record batches and snapshots to a bounded queue
(`offer`, O(1)); past QUEUE_MAX records what comes is dropped and counted. A feeder
thread turns the records into rows (wire.py: tuples, pickled, ~0.2 us a record) and
writes them to the exporter process (exporter.py), which converts, serializes and
sends them: what protobuf costs a span (~3.5 us here) runs on another CPU, not in the
interpreter the reader needs. What the exporter reports the receiver took is counted;
whatever was offered and not confirmed by the end is lost, and counted.

The exporter starts with the feeder (its start-up, ~0.2 s of imports, overlaps the
run's) and dies with it: PR_SET_PDEATHSIG is tied to the thread that started it, and
the feeder lives until the exporter has ended. While the records it is handed are
over BEHIND_NS old (the reader is behind, the ring fills), the feeder waits for the
exporter to confirm what it has before it hands more (its queue then fills and
drops), so that under overload OTLP drops before the ring does.
`close(grace)` lets the exporter send what is left for at most `grace` seconds (counted
from when it is up, at most START_WAIT_S from now), then kills it: the run's stop is
not delayed longer by a receiver that never answers.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import IO, Any, TextIO

from planrunner.otlp import wire
from planrunner.otlp.config import OtlpConfig
from planrunner.otlp.resource import process_attributes
from planrunner.records import AggSnapshot, Record
from planrunner.render.model import RenderedProgram

MAX_PROCESSES = 4096  # processes whose resource is kept; more: read /proc again
QUEUE_MAX = 65536  # records waiting to be converted and sent
BEHIND_NS = 250_000_000  # records older than this: the session's reader is behind
REST = 3.0  # then the sender rests this many times as long as it worked
BATCH = 4096  # spans, log records or metrics per request
FLUSH_S = 0.2  # a partial batch waits at most this long
START_WAIT_S = 5.0  # at the close, an exporter still starting gets this long to be up
KILL_AFTER_S = 0.2  # past the grace, the exporter is killed this much later


@dataclass(slots=True)
class Counts:
    """Records offered (spans + log records), metric points offered, and of them what
    the receiver confirmed; the rest is lost."""

    records: int = 0
    records_sent: int = 0
    points: int = 0
    points_sent: int = 0
    spans_sent: int = 0
    logs_sent: int = 0
    orphaned: int = 0  # nested spans sent as roots: their parent came too late

    @property
    def lost_records(self) -> int:
        return self.records - self.records_sent

    @property
    def lost_points(self) -> int:
        return self.points - self.points_sent


def default_exporters(cpus: int | None = None) -> int:
    """Exporter processes: one where the reader and the traced program have the two
    CPUs of a small machine, two where more CPUs are free (BENCHMARKS.md, issue 25)."""
    n = cpus if cpus is not None else (os.cpu_count() or 1)
    return 1 if n <= 2 else 2


class _Exporter:
    """One exporter process as the run sees it: its pipes and what it reported."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc
        assert proc.stdin is not None and proc.stdout is not None
        self.stdin: IO[bytes] = proc.stdin
        self.stdout: IO[bytes] = proc.stdout
        self.ready = threading.Event()  # up (or will never be)
        self.ended = threading.Event()  # gone, and its reports read
        self.killed = False  # we ended it: its silence is ours

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.killed = True
            self.proc.send_signal(signal.SIGKILL)
            try:
                self.proc.wait(1.0)
            except subprocess.TimeoutExpired:  # a process SIGKILL cannot stop: D state
                pass


class Sender:
    def __init__(self, config: OtlpConfig, program: RenderedProgram, stderr: TextIO,
                 queue_max: int = QUEUE_MAX, batch: int = BATCH,
                 started_ns: int | None = None, exporters: int | None = None) -> None:
        self.config = config
        self.program = program
        self.stderr = stderr
        self.queue_max = queue_max
        self.batch = batch
        self.started_ns = started_ns if started_ns is not None else time.time_ns()
        self.exporters = exporters if exporters is not None else default_exporters()
        self.counts = Counts()
        self.processes: dict[int, list[tuple[str, str | int]]] = {}  # resource.py
        self._queue: deque[Sequence[Record] | AggSnapshot | dict[int, Any]] = deque()
        # records put in _queue (by the session's thread) and taken (by the feeder):
        # each counter has one writer
        self._put = 0
        self._taken = 0
        self._handled = 0  # of those taken, what the exporters are done with (reporters)
        self._handled_event = threading.Event()
        self._lock = threading.Lock()  # the reporters' counts
        self._outputs = frozenset(p.name for p in program.prints)
        self._row = {p.name: wire.row_maker(p) for p in program.prints}
        self._rows = {p.name: wire.rows_maker(p) for p in program.prints}
        # the spans of a nested output build trees per process: one exporter each
        self._by_pid = frozenset(p.name for p in program.prints
                                 if p.span is not None and p.span.nested)
        self._next = 0  # the exporter of the next batch (round robin)
        self._wake = threading.Event()
        self._closing = threading.Event()
        self._spawned = threading.Event()  # _procs is complete (or will never be)
        self._deadline: float | None = None
        self._thread = threading.Thread(target=self._main, name="planrunner-otlp",
                                        daemon=True)
        self._procs: list[_Exporter] = []
        self._pressed = False  # the reader's last batch was an old one
        self._down: set[int] = set()  # exporters that see the receiver down
        self.exporter_cpu_s = 0.0  # CPU the exporters used once up, said as they end
        self.failed: str | None = None  # an exporter could not start (an import failed)

    def start(self) -> None:
        self._thread.start()

    def wait_ready(self, timeout: float) -> bool:
        """Whether the exporters are up (their imports done) within `timeout` seconds."""
        end = time.monotonic() + timeout
        if not self._spawned.wait(timeout):
            return False
        for e in self._procs:
            if not e.ready.wait(max(0.0, end - time.monotonic())) or e.ended.is_set():
                return False
        return bool(self._procs) and self.failed is None

    @property
    def exporter_pids(self) -> list[int]:
        return [e.proc.pid for e in self._procs]

    @property
    def exporter_pid(self) -> int | None:
        pids = self.exporter_pids
        return pids[0] if pids else None

    # -- the session's thread -------------------------------------------------------

    def offer(self, batch: Sequence[Record]) -> None:
        """Print records to export (kept, not copied: records are never changed)."""
        mine = [r for r in batch if r.get("output") in self._outputs]
        if not mine:
            return
        self.counts.records += len(mine)
        # records this old when they reach the view: the reader is behind, the ring fills
        self._pressed = time.monotonic_ns() - int(mine[-1].get("ts_ns") or 0) > BEHIND_NS
        new = {r["pid"] for r in mine}.difference(self.processes)
        if new:
            # read now, while it likely runs: by the time its batch is sent it may be
            # gone (a zombie has no exe nor command line)
            if len(self.processes) + len(new) > MAX_PROCESSES:
                self.processes.clear()
            found = {pid: process_attributes(pid) for pid in new}
            self.processes.update(found)
            self._queue.append(found)
        room = self.queue_max - (self._put - self._taken)
        if room <= 0:
            return  # lost: counted as offered, never sent
        if len(mine) > room:
            mine = mine[:room]
        self._put += len(mine)
        self._queue.append(mine)
        if self._put - self._taken >= self.batch:
            self._wake.set()

    def offer_snapshot(self, snap: AggSnapshot) -> None:
        self.counts.points += len(snap.rows)
        self._queue.append(snap)

    def close(self, grace: float) -> Counts:
        """Send what is left for at most `grace` seconds; the counts, final then."""
        if not self._thread.is_alive():
            return self.counts
        self._spawned.wait(START_WAIT_S)
        if grace > 0:  # the grace is the exporters', once they are up
            end = time.monotonic() + START_WAIT_S
            for e in self._procs:
                e.ready.wait(max(0.0, end - time.monotonic()))
        self._deadline = time.monotonic() + grace
        self._closing.set()
        self._wake.set()
        for e in self._procs:
            if grace > 0:
                try:
                    e.proc.wait(max(0.0, self._deadline + KILL_AFTER_S - time.monotonic()))
                except subprocess.TimeoutExpired:
                    pass
            e.kill()
        for e in self._procs:
            e.ended.wait(1.0)  # its reporter has read its last reports
        self._thread.join(1.0)
        return self.counts

    # -- the feeder thread -------------------------------------------------------------

    def _main(self) -> None:
        try:
            for _ in range(max(1, self.exporters)):
                proc = self._spawn()
                if proc is None:
                    break
                e = _Exporter(proc)
                self._procs.append(e)
                threading.Thread(target=self._report, args=(e,), daemon=True,
                                 name="planrunner-otlp-reports").start()
        finally:
            self._spawned.set()
        if not self._procs:
            return
        setup = wire.Setup(self.config, self.program.prints, self.program.aggregates,
                           self.started_ns, self.batch)
        live = []
        for e in self._procs:
            try:
                wire.write(e.stdin, setup)
                live.append(e)
            except OSError:  # it is gone already (its reporter says why)
                pass
        self._feed(live)
        # this thread holds the exporters' lives (PR_SET_PDEATHSIG): it waits for their end
        for e in self._procs:
            e.ended.wait()

    def _spawn(self) -> subprocess.Popen[bytes] | None:
        # this process's planrunner, whatever the working directory holds (-P)
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (root, os.environ.get("PYTHONPATH", "")) if p)
        try:
            # -Xplanrunner: a run attached already knows it for planrunner at once
            # (runtime_helpers.h pr_on_exec), and never traces it
            return subprocess.Popen(
                [sys.executable, "-Xplanrunner", "-P", "-m", "planrunner.otlp.exporter",
                 str(os.getpid()), str(self.queue_max)],
                env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL, close_fds=True)
        except OSError as exc:
            if self.failed is None:
                self.failed = f"the exporter process did not start: {exc.strerror}"
                self.stderr.write(f"warning: --otlp: cannot export: {self.failed}\n")
            return None

    def _feed(self, live: list[_Exporter]) -> None:
        while live:
            closing = self._closing.is_set()
            if not closing:
                self._wake.wait(FLUSH_S)
                self._wake.clear()
            while self._queue and live:
                item = self._queue.popleft()
                if isinstance(item, AggSnapshot):
                    self._send(live, live[0], ("snap", item))
                elif isinstance(item, dict):
                    for e in list(live):
                        self._send(live, e, ("procs", item))
                else:
                    self._taken += len(item)
                    self._write_rows(live, item)
                    if self._pressed and not self._closing.is_set():
                        self._rest()
            if closing:
                grace = max(0.0, (self._deadline or 0.0) - time.monotonic())
                for e in list(live):
                    self._send(live, e, ("close", grace))
                    try:
                        e.stdin.close()
                    except OSError:
                        pass
                return

    @staticmethod
    def _send(live: list[_Exporter], e: _Exporter, msg: object) -> None:
        try:
            wire.write(e.stdin, msg)
        except OSError:  # it is gone (its reporter says why): what it had is lost
            if e in live:
                live.remove(e)

    def _write_rows(self, live: list[_Exporter], records: Sequence[Record]) -> None:
        groups: dict[str, list[Record]]
        name = records[0]["output"]
        if all(r["output"] == name for r in records):
            groups = {name: list(records)}
        else:
            groups = {}
            for rec in records:
                groups.setdefault(rec["output"], []).append(rec)
        for key, recs in groups.items():
            if key in self._by_pid and len(live) > 1:
                make = self._row[key]
                parts: dict[int, list[tuple[Any, ...]]] = {}
                for rec in recs:
                    parts.setdefault(rec["pid"] % len(live), []).append(make(rec))
                for i, rows in parts.items():
                    self._send(live, live[i], ("rows", key, rows))
            else:
                self._next = (self._next + 1) % len(live)
                self._send(live, live[self._next], ("rows", key, self._rows[key](recs)))

    def _rest(self) -> None:
        """The reader hands old records: the ring is filling. The exporters use the CPU
        the reader needs (2 CPUs: the traced program has the other): wait until they
        are done with what they have, then rest REST times as long, so that the reader
        keeps up (the queue then fills and drops, counted, instead of the ring losing
        events for every output)."""
        began = time.monotonic()
        while self._handled < self._taken and not self._closing.is_set() and \
                time.monotonic() - began < 1.0:
            self._handled_event.wait(0.05)
            self._handled_event.clear()
        self._closing.wait(REST * (time.monotonic() - began))

    # -- the reporter threads ----------------------------------------------------------

    def _report(self, e: _Exporter) -> None:
        counts = self.counts
        try:
            while True:
                try:
                    msg = wire.read(e.stdout)
                except (OSError, ValueError, EOFError):
                    msg = None
                if msg is None:
                    break
                kind = msg[0]
                with self._lock:
                    if kind == "sent":
                        counts.records_sent += msg[1]
                        counts.points_sent += msg[2]
                        counts.spans_sent += msg[3]
                        counts.logs_sent += msg[4]
                    elif kind == "handled":
                        self._handled += msg[1]
                        self._handled_event.set()
                    elif kind == "down":  # said once, whichever exporter saw it
                        if not self._down:
                            self.stderr.write(
                                f"warning: OTLP receiver at {self.config.endpoint}: "
                                f"{msg[1]}; retrying (up to {self.queue_max} records are "
                                "kept)\n")
                        self._down.add(e.proc.pid)
                    elif kind == "up":
                        if self._down and not self._down - {e.proc.pid}:
                            self.stderr.write(f"OTLP receiver at {self.config.endpoint} "
                                              "answers again\n")
                        self._down.discard(e.proc.pid)
                    elif kind == "warn":
                        self.stderr.write(msg[1])
                    elif kind == "orphaned":
                        counts.orphaned += msg[1]
                    elif kind == "ready":
                        e.ready.set()
                    elif kind == "cpu":
                        self.exporter_cpu_s += msg[1]
                    elif kind == "failed" and self.failed is None:
                        self.failed = msg[1]
                        self.stderr.write(f"warning: --otlp: cannot export: {self.failed}\n")
        finally:
            e.ready.set()
            status = e.proc.wait()
            with self._lock:
                if status != 0 and not e.killed and self.failed is None:
                    why = f"signal {-status}" if status < 0 else f"status {status}"
                    self.failed = f"the exporter process ended ({why})"
                    self.stderr.write(f"warning: --otlp: {self.failed}; what it had not "
                                      "sent is counted as not exported\n")
            e.ended.set()
