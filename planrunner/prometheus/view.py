"""PrometheusView: `run --prometheus` as a live output view (output/base.py LiveView).

The session starts it once everything is attached, with a SnapshotSource (records.py)
to pull aggregations from on each scrape, and closes it after detaching. Imports no
prometheus_client until `start`, and nothing of planrunner.runtime.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TextIO

from planrunner.prometheus.config import ExporterConfig
from planrunner.records import SnapshotSource

if TYPE_CHECKING:
    from planrunner.prometheus.exporter import Exporter


class PrometheusView:
    def __init__(self, config: ExporterConfig, stderr: TextIO) -> None:
        self.config = config
        self.stderr = stderr
        self._exporter: Exporter | None = None

    def start(self, source: SnapshotSource, probes_attached: int,
              semaphore_mode: str) -> None:
        from planrunner.prometheus.exporter import start_exporter

        self._exporter = start_exporter(self.config, source, probes_attached,
                                        semaphore_mode, self.stderr)

    def close(self) -> None:
        if self._exporter is not None:
            self._exporter.close()
            self._exporter = None
