"""Aggregation snapshots as Prometheus metric families (prometheus_client objects).

- `count` -> counter ``<base>_total`` (events per key); `sum` -> counter ``<base>_total``
  (the sum of the values; a value that can be negative can make it go down, which
  Prometheus reads as a counter reset).
- `min`, `max`, `avg` -> gauge ``<base>`` (since the start of the run).
- `hist`, `lhist` -> histogram ``<base>_bucket{le=...}``, ``<base>_sum``, ``<base>_count``.
  The kernel's buckets hold integers in ``[low, high)``, so the Prometheus bound
  (``le``: value <= bound) of a bucket is ``high - 1``, exactly: log2 bucket k
  (``[2^(k-1), 2^k)``) is ``le="2^k - 1"`` (0, 1, 3, 7, ...), linear bucket
  ``[a, b)`` is ``le="b - 1"``, the underflow ``le="min - 1"``; the overflow (and
  nothing else) is only in ``le="+Inf"``. Counts are cumulative. A log2 histogram lists
  every bucket from 0 to the highest one seen so far for that key (the set only grows,
  since nothing resets); a linear one always lists all of them. ``_sum`` is the exact sum
  of the observed values (the kernel keeps it per bucket), ``_count`` the number of
  events. Bounds past 2^53 are rounded to the nearest float64, as every `le` is.

Every key the map holds is exported (`top` only cuts the text/json/csv views): label
cardinality is bounded by `settings.map_size`, and updates the full map refused are
counted in ``planrunner_map_full_drops_total{output=...}`` (exporter.py).
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from planrunner.prometheus.naming import Family, go_float, label_value
from planrunner.records import AggRow, AggSnapshot, Bucket


def cumulative_buckets(buckets: Iterable[Bucket]) -> list[tuple[str, int]]:
    """``(le, cumulative count)`` per bucket, ending with ``("+Inf", total)``; `buckets`
    in order, `[low, high)` over integers (high None: the overflow, folded into +Inf)."""
    out: list[tuple[str, int]] = []
    total = 0
    for b in buckets:
        total += b.count
        if b.high is not None:
            out.append((go_float(b.high - 1), total))
    out.append(("+Inf", total))
    return out


def _labels(fam: Family, row: AggRow) -> list[str]:
    return [label_value(v) for _, v in row.key]


def to_metric(fam: Family, snap: AggSnapshot) -> Metric:
    """The family's samples for one cumulative snapshot of its output."""
    if fam.mtype == "histogram":
        return _histogram(fam, snap)
    if fam.mtype == "counter":
        metric: CounterMetricFamily | GaugeMetricFamily = CounterMetricFamily(
            fam.name, fam.help, labels=fam.labels)
    else:
        metric = GaugeMetricFamily(fam.name, fam.help, labels=fam.labels)
    for row in snap.rows:
        value = getattr(row, fam.kind)
        if value is not None:
            metric.add_metric(_labels(fam, row), value)
    return metric


def _histogram(fam: Family, snap: AggSnapshot) -> Metric:
    # Built by hand: prometheus_client's HistogramMetricFamily leaves out _sum and
    # _count when a bound is negative (an lhist with min < 1), and we always have both.
    metric = Metric(fam.name, fam.help, "histogram")
    for row in snap.rows:
        labels = dict(zip(fam.labels, _labels(fam, row), strict=True))
        buckets = cumulative_buckets(row.buckets or ())
        for le, count in buckets:
            metric.add_sample(f"{fam.name}_bucket", {**labels, "le": le}, count)
        metric.add_sample(f"{fam.name}_count", labels, buckets[-1][1])
        if row.sum is not None:  # the reader always sets it; never invent one
            metric.add_sample(f"{fam.name}_sum", labels, row.sum)
    return metric
