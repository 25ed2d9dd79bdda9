"""Serving a plan's in-kernel aggregations as Prometheus metrics (`run --prometheus`).

    config.py    --prometheus HOST:PORT -> (host, port); names checked -> ExporterConfig
    naming.py    plan/output/by names -> metric and label names (the documented rule)
    convert.py   AggSnapshot -> prometheus_client metric families (buckets -> `le`)
    exporter.py  the HTTP server and the Collector that pulls snapshots on each scrape
    view.py      PrometheusView: the live output view commands/run.py hands the session

Prometheus is an output view: it pulls aggregation snapshots through the SnapshotSource
protocol (records.py) and knows nothing of the runtime (it must not import
planrunner.runtime; the runtime does not import this package either).
This module imports no prometheus_client: the exporter is loaded only when the view
starts, so other commands start as fast as before.
"""

from __future__ import annotations

from planrunner.prometheus.config import ExporterConfig
from planrunner.prometheus.view import PrometheusView

__all__ = ["ExporterConfig", "PrometheusView"]
