"""The exporter process of `run --otlp`: rows in, OTLP requests out.

Building the messages costs ~3.5 us a span here (span_writer.py's ~6 calls into
protobuf, then the request parsed in and serialized), several times what the run
spends to hand a record over (wire.py, ~0.5 us); in a process of its own it uses the
second CPU instead of the interpreter the run's reader needs. sender.py starts it
and writes wire.py messages to its stdin; it answers on its stdout.

A reader thread takes the messages into a queue (at most `queue_max` rows: past that
what comes is dropped, and the run counts it as not exported, since it is never
confirmed); the main thread converts (convert.py), groups by process (one resource
each, requests.py) and builds batches of at most `batch` items every FLUSH_S or as
soon as a batch is full; a sending thread sends them, so that the next batch is built
while the receiver takes the last (at most IN_FLIGHT requests built and not yet taken:
the building waits past that). A receiver that is down, answers 429/502/503/504 or
gRPC UNAVAILABLE/RESOURCE_EXHAUSTED is retried with exponential backoff (BACKOFF_MIN_S
.. BACKOFF_MAX_S) while the run lasts, holding its batches while the queue fills: a
receiver that comes back loses nothing under the bound. Any other refusal drops that
batch with a warning. Each request the receiver took is reported to the run at once.

("close", grace) ends the input: what is left is sent for at most `grace` seconds, and
the process exits (the run kills it a moment after that, whatever it is doing). It
never outlives the run (PR_SET_PDEATHSIG), ignores the terminal's and the service
manager's stop signals (the run stops it), and never prints: its stderr is /dev/null
and a failure is reported as one line the run prints.
"""

from __future__ import annotations

import ctypes as ct
import os
import signal
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import IO, Any

from planrunner.otlp import wire

PR_SET_PDEATHSIG = 1
FLUSH_S = 0.2  # a partial batch waits at most this long
BACKOFF_MIN_S = 0.05
BACKOFF_MAX_S = 2.0
REQUEST_TIMEOUT_S = 10.0
IN_FLIGHT = 2  # requests built and not yet taken by the receiver (one of them sending)
RETRY_HTTP = frozenset({429, 502, 503, 504})
_GRPC_METHODS = {
    "traces": "/opentelemetry.proto.collector.trace.v1.TraceService/Export",
    "logs": "/opentelemetry.proto.collector.logs.v1.LogsService/Export",
    "metrics": "/opentelemetry.proto.collector.metrics.v1.MetricsService/Export",
}
Report = Callable[[tuple[Any, ...]], None]


class _Retry(Exception):
    """The receiver is down or busy: send the same batch again later."""


class _Refused(Exception):
    """The receiver refused the batch for good (e.g. 400): it is dropped."""


class Exporter:
    def __init__(self, setup: wire.Setup, queue_max: int, report: Report) -> None:
        from planrunner.otlp.convert import Converter, WallClock
        from planrunner.otlp.requests import ResourceCache

        self.config = setup.config
        self.batch = setup.batch
        self.queue_max = queue_max
        self.report = report
        self.converter = Converter(setup.prints, setup.aggregates, WallClock(),
                                   setup.started_ns)
        self.processes: dict[int, list[tuple[str, str | int]]] = {}
        self.resources = ResourceCache(setup.config, self.processes)
        self._send = self._grpc_sender() if self.config.protocol == "grpc" \
            else self._http_sender()
        self._queue: deque[tuple[Any, ...]] = deque()
        self._held = 0  # rows in _queue (the reader adds, the main thread takes)
        self._taken = 0
        self._said = 0  # of _taken, reported handled (the run's feeder may wait for it)
        self._wake = threading.Event()
        self._ended = threading.Event()
        self._deadline: float | None = None
        self._down = False  # a warning was said; say when it answers again
        # (signal, body, report once sent) for the sending thread; a "" signal is a
        # report alone, said once what was posted before it is sent or dropped
        self._out: deque[tuple[str, bytes, tuple[Any, ...]]] = deque()
        self._out_cv = threading.Condition()
        self._out_closed = False
        self._error: BaseException | None = None  # the sending thread's failure

    # -- the reader thread ---------------------------------------------------------

    def read(self, stdin: IO[bytes]) -> None:
        """Messages into the queue until ("close", grace) or the end of the input."""
        try:
            while True:
                msg = wire.read(stdin)
                if msg is None or msg[0] == "close":
                    grace = msg[1] if msg is not None else 0.0
                    self._deadline = time.monotonic() + grace
                    return
                if msg[0] == "rows":
                    n = len(msg[2])
                    if self._held - self._taken + n > self.queue_max:
                        # dropped: never confirmed, the run counts it lost
                        self.report(("handled", n))
                        continue
                    self._held += n
                    self._queue.append(msg)
                    if self._held - self._taken >= self.batch:
                        self._wake.set()
                else:
                    self._queue.append(msg)
        finally:
            self._ended.set()
            self._wake.set()

    # -- the main thread ---------------------------------------------------------------

    def run(self) -> None:
        sending = threading.Thread(target=self._ship, daemon=True,
                                   name="planrunner-otlp-send")
        sending.start()
        while True:
            ended = self._ended.is_set()
            if not ended:
                self._wake.wait(FLUSH_S)
                self._wake.clear()
            self._drain(ended)
            if ended:
                break
        with self._out_cv:
            self._out_closed = True
            self._out_cv.notify_all()
        sending.join()  # bounded: past the close's deadline nothing is sent again
        if self._error is not None:
            raise self._error

    def _post(self, signal_: str, body: bytes, sent: tuple[Any, ...]) -> None:
        """A request (or, signal "", a report alone) for the sending thread; waits while
        IN_FLIGHT are not taken yet (a receiver that is down holds the building)."""
        with self._out_cv:
            while len(self._out) >= IN_FLIGHT and self._error is None:
                self._out_cv.wait()
            if self._error is not None:
                raise self._error
            self._out.append((signal_, body, sent))
            self._out_cv.notify_all()

    # -- the sending thread ------------------------------------------------------------

    def _ship(self) -> None:
        try:
            while True:
                with self._out_cv:
                    while not self._out and not self._out_closed:
                        self._out_cv.wait()
                    if not self._out:
                        return
                    signal_, body, sent = self._out[0]  # in flight until it is sent
                if not signal_ or self._deliver(signal_, body):
                    self.report(sent)
                with self._out_cv:
                    self._out.popleft()
                    self._out_cv.notify_all()
        except BaseException as exc:  # noqa: BLE001 - the main thread raises it
            with self._out_cv:
                self._error = exc
                self._out_cv.notify_all()

    def _drain(self, closing: bool) -> None:
        from planrunner.otlp.requests import metrics_request

        plans = self.converter.plans
        while self._queue:
            msg = self._queue.popleft()
            kind = msg[0]
            if kind == "rows":
                self._taken += len(msg[2])
                plan = plans.get(msg[1])
                if plan is not None:
                    self.converter.add_rows(plan, msg[2])
                if self.converter.nspans + len(self.converter.logs) >= self.batch \
                        or not self._queue:
                    self._send_ready()
                    self._post("", b"", ("handled", self._taken - self._said))
                    self._said = self._taken
            elif kind == "procs":
                self.processes.update(msg[1])
            elif kind == "snap":
                snap = msg[1]
                body = metrics_request(self.resources, [self.converter.metric(snap)])
                self._post("metrics", body, ("sent", 0, len(snap.rows), 0, 0))
        if closing:
            self.converter.flush_pending()
            if self.converter.orphaned:
                self.report(("orphaned", self.converter.orphaned))
            self._send_ready()

    def _send_ready(self) -> None:
        from planrunner.otlp.requests import batches, logs_request, traces_request

        spans, logs = self.converter.take()
        for part, n in batches(spans, self.batch):
            self._post("traces", traces_request(self.resources, part), ("sent", n, 0, n, 0))
        for i in range(0, len(logs), self.batch):
            chunk = logs[i:i + self.batch]
            self._post("logs", logs_request(self.resources, chunk),
                       ("sent", len(chunk), 0, 0, len(chunk)))

    def _deliver(self, signal_: str, body: bytes) -> bool:
        """Send until the receiver takes it, refuses it, or the close's deadline."""
        backoff = BACKOFF_MIN_S
        while True:
            timeout = REQUEST_TIMEOUT_S
            if self._deadline is not None:
                timeout = self._deadline - time.monotonic()
                if timeout <= 0:
                    return False
            try:
                self._send(signal_, body, timeout)
            except _Retry as exc:
                self._warn_down(str(exc))
                if self._deadline is None:
                    self._ended.wait(backoff)  # a close ends the wait
                else:
                    time.sleep(min(backoff, max(0.0, self._deadline - time.monotonic())))
                backoff = min(backoff * 2, BACKOFF_MAX_S)
                continue
            except _Refused as exc:
                self.report(("warn", f"warning: OTLP receiver at {self.config.endpoint} "
                                     f"refused {signal_}: {exc} (dropped)\n"))
                return False
            if self._down:
                self._down = False
                self.report(("up",))
            return True

    def _warn_down(self, why: str) -> None:
        if not self._down:
            self._down = True
            self.report(("down", why))

    def _http_sender(self) -> Callable[[str, bytes, float], None]:
        import http.client

        host, port, tls = self.config.host_port
        headers = {"Content-Type": "application/x-protobuf", **dict(self.config.headers)}
        conn: list[http.client.HTTPConnection | None] = [None]

        def send(signal_: str, body: bytes, timeout: float) -> None:
            c = conn[0]
            if c is None:
                cls = http.client.HTTPSConnection if tls else http.client.HTTPConnection
                c = conn[0] = cls(host, port, timeout=timeout)
            else:
                c.timeout = timeout
                if c.sock is not None:
                    c.sock.settimeout(timeout)
            try:
                c.request("POST", self.config.url_path(signal_), body, headers)
                resp = c.getresponse()
                text = resp.read()
            except (OSError, http.client.HTTPException) as exc:
                c.close()
                conn[0] = None
                raise _Retry(f"{type(exc).__name__}: {exc}" if str(exc)
                             else type(exc).__name__) from None
            if resp.status in RETRY_HTTP:
                raise _Retry(f"HTTP {resp.status}")
            if not 200 <= resp.status < 300:
                raise _Refused(f"HTTP {resp.status} {text[:200]!r}")

        return send

    def _grpc_sender(self) -> Callable[[str, bytes, float], None]:
        import grpc

        host, port, tls = self.config.host_port
        target = f"{host}:{port}"
        channel = grpc.secure_channel(target, grpc.ssl_channel_credentials()) if tls \
            else grpc.insecure_channel(target)
        calls = {signal_: channel.unary_unary(method)
                 for signal_, method in _GRPC_METHODS.items()}
        metadata = tuple((k.lower(), v) for k, v in self.config.headers)
        retry = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.RESOURCE_EXHAUSTED,
                 grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.ABORTED}

        def send(signal_: str, body: bytes, timeout: float) -> None:
            try:  # bytes in and out: no serializer given
                calls[signal_](body, timeout=timeout, metadata=metadata)
            except grpc.RpcError as exc:
                code = exc.code() if hasattr(exc, "code") else None
                if code in retry:
                    raise _Retry(f"gRPC {code.name if code else 'error'}") from None
                raise _Refused(f"gRPC {code.name if code else exc}") from None

        return send


def serve(stdin: IO[bytes], out: IO[bytes], queue_max: int) -> int:
    """The process's work: the setup, then messages until the close. Never raises."""
    lock = threading.Lock()

    def report(msg: tuple[Any, ...]) -> None:
        with lock:  # the reader thread reports nothing, but be safe
            wire.write(out, msg)

    try:
        setup = wire.read(stdin)
        if setup is None:  # the run ended before it began
            return 0
        try:
            exporter = Exporter(setup, queue_max, report)
        except ImportError as exc:
            report(("failed", f"{exc} (pip install opentelemetry-proto grpcio)"))
            return 1
        reader = threading.Thread(target=exporter.read, args=(stdin,), daemon=True,
                                  name="planrunner-otlp-read")
        reader.start()
        report(("ready",))
        up = time.process_time()  # (its start-up, ~0.2-0.4 s of CPU, is not its work)
        exporter.run()
        report(("cpu", time.process_time() - up))  # for bench/otlp_bench.py
        return 0
    except OSError:  # the run is gone (EPIPE): nobody to tell
        return 1
    except Exception as exc:  # noqa: BLE001 - said as one line by the run, no traceback
        try:
            report(("failed", f"the exporter failed: {type(exc).__name__}: {exc}"))
        except OSError:
            pass
        return 1


def main() -> int:
    # the run decides when this process ends: Ctrl-C (the terminal's process group),
    # a service manager's SIGTERM to the whole group, a hangup
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    ct.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # never outlive the run
    parent, queue_max = int(sys.argv[1]), int(sys.argv[2])
    if os.getppid() != parent:  # it ended before the line above
        return 0
    out = os.fdopen(os.dup(1), "wb")
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)  # nothing else writes into the reports
    return serve(sys.stdin.buffer, out, queue_max)


if __name__ == "__main__":
    # its reports are flushed as written and it holds nothing else: no interpreter
    # teardown (~20-40 ms of freeing protobuf's modules and messages), which the run's
    # stop waits for
    os._exit(main())
