"""The HTTP server behind `run --prometheus`: ``GET /metrics`` in the Prometheus text
format (0.0.4), built by prometheus_client from a custom Collector.

Each scrape pulls every aggregation as it stands now through a SnapshotSource
(records.py; `cumulative`: no reset, no state; maps are never cleared while a live view
runs, so counters only grow) and the exporter's own metrics:

- ``planrunner_build_info{version, plan, python}`` 1
- ``planrunner_events_lost_total``: print records the full ring buffer refused
- ``planrunner_map_full_drops_total{output}``: aggregation updates a full map refused
  (their keys are missing from the output's metric: raise settings.map_size)
- ``planrunner_aggregation_keys{output}``: the label sets the output exports now
- ``planrunner_probes_attached``: perf events attached (one per distinct probe site)
- ``planrunner_attach_failures_total``: sites that could not be attached (attaching is
  all-or-nothing today: a failure ends `run` before this server starts, so it reads 0)
- ``planrunner_semaphore_mode{mode}`` 1: ``refctr`` (the kernel's uprobe reference
  counter) or ``poke`` (raised by hand through /proc/PID/mem)
- ``process_*`` of planrunner itself (prometheus_client's ProcessCollector).

The server runs in a daemon thread (one thread per request) and never logs requests.
`close()` stops it and waits for it; a scrape that fails answers 500 with the error.
Imports prometheus_client (only once --prometheus starts the view), records.py and
prometheus/ modules; never planrunner.runtime.
"""

from __future__ import annotations

import platform
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from socketserver import TCPServer
from typing import Any, TextIO

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector

from planrunner import __version__
from planrunner.errors import BackendError
from planrunner.prometheus.config import ExporterConfig
from planrunner.prometheus.convert import to_metric
from planrunner.records import SnapshotSource

POLL_S = 0.05  # how often serve_forever checks for close(): bounds the stop delay


class PlanCollector(Collector):
    """A prometheus_client Collector over one running session's snapshots."""

    def __init__(self, config: ExporterConfig, source: SnapshotSource,
                 probes_attached: int, semaphore_mode: str) -> None:
        self.config = config
        self.source = source
        self.probes_attached = probes_attached
        self.semaphore_mode = semaphore_mode

    def collect(self) -> Iterator[Metric]:
        keys, drops = {}, {}
        for fam in self.config.families:
            snap = self.source.cumulative(fam.output)
            keys[fam.output], drops[fam.output] = len(snap.rows), snap.dropped
            yield to_metric(fam, snap)
        yield from self._self_metrics(keys, drops)

    def _self_metrics(self, keys: dict[str, int], drops: dict[str, int]) -> Iterator[Metric]:
        info = GaugeMetricFamily("planrunner_build_info", "planrunner's version, the plan "
                                 "it runs and the Python running it; always 1",
                                 labels=("version", "plan", "python"))
        info.add_metric((__version__, self.config.plan, platform.python_version()), 1)
        yield info
        yield CounterMetricFamily("planrunner_events_lost",
                                  "print records lost because the ring buffer was full",
                                  value=self.source.events_lost())
        dropped = CounterMetricFamily(
            "planrunner_map_full_drops", "aggregation updates refused because the "
            "output's map was full (raise settings.map_size)", labels=("output",))
        key_count = GaugeMetricFamily(
            "planrunner_aggregation_keys", "label sets the aggregation output exports "
            "now (bounded by settings.map_size)", labels=("output",))
        for name in keys:
            dropped.add_metric((name,), drops[name])
            key_count.add_metric((name,), keys[name])
        yield dropped
        yield key_count
        yield GaugeMetricFamily("planrunner_probes_attached",
                                "probe sites attached (perf events)",
                                value=self.probes_attached)
        # attaching is all-or-nothing: a failure ends `run` before this server starts
        yield CounterMetricFamily("planrunner_attach_failures",
                                  "probe sites that could not be attached", value=0)
        mode = GaugeMetricFamily("planrunner_semaphore_mode", "how USDT semaphores are "
                                 "raised: refctr (kernel reference counter) or poke "
                                 "(by hand); always 1", labels=("mode",))
        mode.add_metric((self.semaphore_mode,), 1)
        yield mode


def _handler(registry: CollectorRegistry) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                try:
                    self._send(200, CONTENT_TYPE_LATEST, generate_latest(registry))
                except Exception as exc:  # noqa: BLE001 - report it to the scraper
                    self._send(500, "text/plain; charset=utf-8",
                               f"planrunner: scrape failed: {exc!r}\n".encode())
            elif path == "/":
                self._send(200, "text/html; charset=utf-8",
                           b'<a href="/metrics">/metrics</a>\n')
            else:
                self._send(404, "text/plain; charset=utf-8", b"not found: try /metrics\n")

        def _send(self, status: int, ctype: str, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            pass  # the terminal belongs to the views

    return Handler


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def server_bind(self) -> None:
        # Skip HTTPServer's getfqdn(): a reverse DNS lookup that can stall the start.
        TCPServer.server_bind(self)
        self.server_name, self.server_port = str(self.server_address[0]), \
            int(self.server_address[1])


class Exporter:
    """A running /metrics server; `close()` stops it (idempotent)."""

    def __init__(self, server: _Server, display: str) -> None:
        self._server: _Server | None = server
        self.display = display
        self.url = f"http://{display}/metrics"
        self._thread = threading.Thread(target=server.serve_forever, args=(POLL_S,),
                                        name="planrunner-prometheus", daemon=True)
        self._thread.start()

    def close(self) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        server.shutdown()
        server.server_close()
        self._thread.join()


def serve(registry: CollectorRegistry, host: str, port: int, display: str) -> Exporter:
    """Bind HOST:PORT (IPv4, IPv6 or a name) and serve `registry` from a thread."""
    try:
        family, _, _, _, sockaddr = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
        server_cls = type("Server", (_Server,), {"address_family": family})
        server = server_cls(sockaddr[:2], _handler(registry))
    except OSError as exc:
        raise BackendError(f"cannot serve Prometheus metrics on {display}: "
                           f"{exc.strerror or exc}",
                           hints=("choose another port, or an address of this host",)
                           ) from None
    return Exporter(server, display)


def start_exporter(config: ExporterConfig, source: SnapshotSource, probes_attached: int,
                   semaphore_mode: str, stderr: TextIO) -> Exporter:
    """Serve the aggregations of `source` on config's address; say where on stderr."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(PlanCollector(config, source, probes_attached, semaphore_mode))
    ProcessCollector(registry=registry)
    exporter = serve(registry, config.host, config.port, config.display)
    n = len(config.families)
    stderr.write(f"Serving {n} aggregation{'s' if n != 1 else ''} as Prometheus metrics "
                 f"at {exporter.url}\n")
    return exporter
