"""The sender thread: export never slows or stops tracing.

The session's thread only appends record batches and snapshots to a bounded queue
(`offer`, O(1)); past QUEUE_MAX records what comes is dropped and counted. The sender
thread converts (convert.py), groups by process (one resource each), and sends batches
of at most BATCH items every FLUSH_S or as soon as a batch is full. A receiver that is
down, answers 429/502/503/504 or gRPC UNAVAILABLE/RESOURCE_EXHAUSTED is retried with
exponential backoff (BACKOFF_MIN_S .. BACKOFF_MAX_S) for as long as the run lasts,
holding one batch while the queue fills: a receiver that comes back loses nothing under
the bound. Any other refusal drops that batch with a warning. The thread shares the
interpreter lock with the session's reader: while the records it is handed are over
BEHIND_NS old (the reader is behind, the ring fills), it rests REST times as long as it
worked, so that under overload the OTLP queue drops (counted) before the ring does.
`close(grace)` sends what is left for at most `grace` seconds (the run's stop is not
delayed longer by a receiver that never answers: the thread is a daemon and is
abandoned); whatever was offered and not confirmed by the receiver by then is lost,
and counted.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TextIO

from planrunner.otlp.config import OtlpConfig
from planrunner.otlp.resource import process_attributes
from planrunner.records import AggSnapshot, Record
from planrunner.render.model import RenderedProgram

if TYPE_CHECKING:
    from planrunner.otlp.convert import Converter

MAX_PROCESSES = 4096  # processes whose resource is kept; more: read /proc again
QUEUE_MAX = 65536  # records waiting to be converted and sent
BEHIND_NS = 250_000_000  # records older than this: the session's reader is behind
REST = 3.0  # then the sender rests this many times as long as it worked
BATCH = 4096  # spans, log records or metrics per request
FLUSH_S = 0.2  # a partial batch waits at most this long
BACKOFF_MIN_S = 0.05
BACKOFF_MAX_S = 2.0
REQUEST_TIMEOUT_S = 10.0
RETRY_HTTP = frozenset({429, 502, 503, 504})
_GRPC_METHODS = {
    "traces": "/opentelemetry.proto.collector.trace.v1.TraceService/Export",
    "logs": "/opentelemetry.proto.collector.logs.v1.LogsService/Export",
    "metrics": "/opentelemetry.proto.collector.metrics.v1.MetricsService/Export",
}


class _Retry(Exception):
    """The receiver is down or busy: send the same batch again later."""


class _Refused(Exception):
    """The receiver refused the batch for good (e.g. 400): it is dropped."""


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


class Sender:
    def __init__(self, config: OtlpConfig, program: RenderedProgram, stderr: TextIO,
                 queue_max: int = QUEUE_MAX, batch: int = BATCH,
                 started_ns: int | None = None) -> None:
        self.config = config
        self.program = program
        self.stderr = stderr
        self.queue_max = queue_max
        self.batch = batch
        self.started_ns = started_ns if started_ns is not None else time.time_ns()
        self.counts = Counts()
        self.processes: dict[int, list[tuple[str, str | int]]] = {}  # resource.py
        self._queue: deque[Sequence[Record] | AggSnapshot] = deque()
        # records put in _queue (by the session's thread) and taken (by the sender's):
        # each counter has one writer
        self._put = 0
        self._taken = 0
        self._outputs = frozenset(p.name for p in program.prints)
        self._wake = threading.Event()
        self._closing = threading.Event()
        self._deadline: float | None = None
        self._thread = threading.Thread(target=self._main, name="planrunner-otlp",
                                        daemon=True)
        self._down = False  # a warning was printed; say when it answers again
        self._pressed = False  # the reader's last batch was an old one
        self._send: Callable[[str, bytes, float], None] | None = None
        self.failed: str | None = None  # the thread could not start (an import failed)

    def start(self) -> None:
        self._thread.start()

    # -- the session's thread -------------------------------------------------------

    def offer(self, batch: Sequence[Record]) -> None:
        """Print records to export (kept, not copied: records are never changed)."""
        mine = [r for r in batch if r.get("output") in self._outputs]
        if not mine:
            return
        self.counts.records += len(mine)
        # records this old when they reach the view: the reader is behind, the ring fills
        self._pressed = time.monotonic_ns() - int(mine[-1].get("ts_ns") or 0) > BEHIND_NS
        for pid in {r["pid"] for r in mine}.difference(self.processes):
            # read now, while it likely runs: by the time its batch is sent it may be
            # gone (a zombie has no exe nor command line)
            if len(self.processes) >= MAX_PROCESSES:
                self.processes.clear()
            self.processes[pid] = process_attributes(pid)
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
        self._deadline = time.monotonic() + grace
        self._closing.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(grace)
        return self.counts

    # -- the sender thread -------------------------------------------------------------

    def _main(self) -> None:
        try:
            from planrunner.otlp.convert import Converter, WallClock

            converter = Converter(self.program.prints, self.program.aggregates,
                                  WallClock(), self.started_ns)
            self._send = self._grpc_sender() if self.config.protocol == "grpc" \
                else self._http_sender()
        except ImportError as exc:
            self.failed = f"{exc} (pip install opentelemetry-proto grpcio)"
            self.stderr.write(f"warning: --otlp: cannot export: {self.failed}\n")
            return
        from planrunner.otlp.requests import ResourceCache

        resources = ResourceCache(self.config, self.processes)
        while True:
            closing = self._closing.is_set()
            if not closing:
                self._wake.wait(FLUSH_S)
                self._wake.clear()
            self._drain(converter, resources, closing or self._closing.is_set())
            if closing:
                return

    def _drain(self, converter: Converter, resources: Any, closing: bool) -> None:
        from planrunner.otlp.requests import logs_request, metrics_request, traces_request

        while self._queue:
            item = self._queue.popleft()
            if isinstance(item, AggSnapshot):
                self._deliver("metrics", metrics_request(resources, [converter.metric(item)]),
                              0, len(item.rows))
                continue
            self._taken += len(item)
            began = time.monotonic()
            for rec in item:
                converter.add(rec)
            if len(converter.spans) + len(converter.logs) >= self.batch or not self._queue:
                self._send_ready(converter, resources, traces_request, logs_request)
            if self._pressed and not closing:
                # the reader hands old records: the ring is filling. This thread shares
                # the interpreter lock with it: rest as long as it worked, so that the
                # reader keeps up (the queue then fills and drops, counted, instead of
                # the ring losing events for every output)
                self._closing.wait(REST * (time.monotonic() - began))
        if closing:
            converter.flush_pending()
            self.counts.orphaned = converter.orphaned
            self._send_ready(converter, resources, traces_request, logs_request)

    def _send_ready(self, converter: Converter, resources: Any,
                    traces_request: Callable[..., bytes],
                    logs_request: Callable[..., bytes]) -> None:
        spans, logs = converter.take()
        for i in range(0, len(spans), self.batch):
            part = spans[i:i + self.batch]
            if self._deliver("traces", traces_request(resources, part), len(part), 0):
                self.counts.spans_sent += len(part)
        for i in range(0, len(logs), self.batch):
            chunk = logs[i:i + self.batch]
            if self._deliver("logs", logs_request(resources, chunk), len(chunk), 0):
                self.counts.logs_sent += len(chunk)

    def _deliver(self, signal: str, body: bytes, records: int, points: int) -> bool:
        """Send until the receiver takes it, refuses it, or the close's deadline."""
        assert self._send is not None
        backoff = BACKOFF_MIN_S
        while True:
            timeout = REQUEST_TIMEOUT_S
            if self._deadline is not None:
                timeout = self._deadline - time.monotonic()
                if timeout <= 0:
                    return False
            try:
                self._send(signal, body, timeout)
            except _Retry as exc:
                self._warn_down(str(exc))
                if self._deadline is None:
                    self._closing.wait(backoff)  # a close ends the wait
                else:
                    time.sleep(min(backoff, max(0.0, self._deadline - time.monotonic())))
                backoff = min(backoff * 2, BACKOFF_MAX_S)
                continue
            except _Refused as exc:
                self.stderr.write(f"warning: OTLP receiver at {self.config.endpoint} refused "
                                  f"{signal}: {exc} (dropped)\n")
                return False
            if self._down:
                self._down = False
                self.stderr.write(f"OTLP receiver at {self.config.endpoint} answers again\n")
            self.counts.records_sent += records
            self.counts.points_sent += points
            return True

    def _warn_down(self, why: str) -> None:
        if not self._down:
            self._down = True
            self.stderr.write(f"warning: OTLP receiver at {self.config.endpoint}: {why}; "
                              f"retrying (up to {self.queue_max} records are kept)\n")

    def _http_sender(self) -> Callable[[str, bytes, float], None]:
        import http.client  # here, on the sender's thread (15 ms)

        host, port, tls = self.config.host_port
        headers = {"Content-Type": "application/x-protobuf", **dict(self.config.headers)}
        conn: list[http.client.HTTPConnection | None] = [None]

        def send(signal: str, body: bytes, timeout: float) -> None:
            c = conn[0]
            if c is None:
                cls = http.client.HTTPSConnection if tls else http.client.HTTPConnection
                c = conn[0] = cls(host, port, timeout=timeout)
            else:
                c.timeout = timeout
                if c.sock is not None:
                    c.sock.settimeout(timeout)
            try:
                c.request("POST", self.config.url_path(signal), body, headers)
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
        calls = {signal: channel.unary_unary(method) for signal, method in _GRPC_METHODS.items()}
        metadata = tuple((k.lower(), v) for k, v in self.config.headers)
        retry = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.RESOURCE_EXHAUSTED,
                 grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.ABORTED}

        def send(signal: str, body: bytes, timeout: float) -> None:
            try:  # bytes in and out: no serializer given
                calls[signal](body, timeout=timeout, metadata=metadata)
            except grpc.RpcError as exc:
                code = exc.code() if hasattr(exc, "code") else None
                if code in retry:
                    raise _Retry(f"gRPC {code.name if code else 'error'}") from None
                raise _Refused(f"gRPC {code.name if code else exc}") from None

        return send
