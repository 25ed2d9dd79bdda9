"""Serving a plan's in-kernel aggregations as Prometheus metrics (`run --prometheus`).

    config.py    --prometheus HOST:PORT -> (host, port); names checked -> ExporterConfig
    naming.py    plan/output/by names -> metric and label names (the documented rule)
    convert.py   AggSnapshot -> prometheus_client metric families (buckets -> `le`)
    exporter.py  the HTTP server and the Collector that reads the maps on each scrape

This module imports no prometheus_client: `maybe_start` loads the exporter only when
--prometheus was given, so other commands start as fast as before.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TextIO

from planrunner.prometheus.config import ExporterConfig

if TYPE_CHECKING:
    from planrunner.prometheus.exporter import Exporter
    from planrunner.render.model import RenderedProgram

__all__ = ["ExporterConfig", "maybe_start"]


def maybe_start(config: ExporterConfig | None, program: RenderedProgram, prog: Any,
                probes_attached: int, semaphore_mode: str, stderr: TextIO
                ) -> Exporter | None:
    """Start serving when `config` is set (after attach); None otherwise."""
    if config is None:
        return None
    from planrunner.prometheus.exporter import start_exporter

    return start_exporter(config, program, prog, probes_attached, semaphore_mode, stderr)
