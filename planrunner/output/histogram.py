"""Histograms as text, in the manner of bcc's print_log2_hist (written afresh).

For one key's buckets: a title row, then one row per bucket from the first to the last
non-empty one (empty buckets in between are kept, leading and trailing ones skipped),
each with its count and a bar of up to 40 `*` scaled to the largest count of that key.

- log2 (`hist`): the range is shown inclusive, ``low -> high-1`` (exact for integers:
  bucket [2, 4) reads ``2 -> 3``, bucket [0, 1) reads ``0 -> 0``).
- linear (`lhist`): ``[low, high)``; the underflow reads ``< MIN``, the overflow ``>= MAX``.

The title names the unit: ``nsecs`` for nanosecond values, else the value's label.
Bucket bounds are printed in the value's own unit, never rescaled.
"""

from __future__ import annotations

from collections.abc import Sequence

from planrunner.records import Bucket

BAR_WIDTH = 40


def trim(buckets: Sequence[Bucket]) -> Sequence[Bucket]:
    """`buckets` without the empty ones before the first and after the last count."""
    nonzero = [i for i, b in enumerate(buckets) if b.count]
    if not nonzero:
        return ()
    return buckets[nonzero[0] : nonzero[-1] + 1]


def unit_title(value_label: str, unit: str | None) -> str:
    return "nsecs" if unit == "ns" else value_label


def _log2_range(b: Bucket) -> tuple[str, str]:
    low = 0 if b.low is None else b.low
    high = low if b.high is None else b.high - 1
    return str(low), str(high)


def _linear_range(b: Bucket) -> str:
    if b.low is None:
        return f"< {b.high}"
    if b.high is None:
        return f">= {b.low}"
    return f"[{b.low}, {b.high})"


def _bar(count: int, peak: int) -> str:
    return "*" * (count * BAR_WIDTH // peak if peak else 0)


def hist_lines(buckets: Sequence[Bucket], title: str, linear: bool) -> list[str]:
    """The table for one key (no trailing newlines); ["(no values)"] when all are empty."""
    shown = trim(buckets)
    if not shown:
        return ["(no values)"]
    peak = max(b.count for b in shown)
    cw = max(8, len(str(peak)))
    if linear:
        ranges = [_linear_range(b) for b in shown]
        rw = max(10, len(title), *(len(r) for r in ranges))
        head = f"{title:>{rw}}"
        cells = [f"{r:>{rw}}" for r in ranges]
    else:
        pairs = [_log2_range(b) for b in shown]
        w = max(10, len(title), *(len(x) for pair in pairs for x in pair))
        head = f"{title:>{w}}{'':{w + 4}}"
        cells = [f"{lo:>{w}} -> {hi:<{w}}" for lo, hi in pairs]
    lines = [f"{head} : {'count':<{cw}} distribution"]
    for cell, b in zip(cells, shown, strict=True):
        lines.append(f"{cell} : {b.count:<{cw}} |{_bar(b.count, peak):<{BAR_WIDTH}}|")
    return lines
