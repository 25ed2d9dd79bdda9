"""Prometheus names for a plan's aggregations, and label values.

The rule (documented in README.md, "Prometheus"):

- A metric is ``planrunner_<plan>_<output>``: the plan's `name` and the output's `name`
  (its index when it has none), each with every character outside ``[a-zA-Z0-9_]``
  replaced by ``_``. Counters (``count``, ``sum``) end in ``_total`` (added unless
  the name already ends with it); histograms (``hist``,
  ``lhist``) are exposed as ``..._bucket``, ``..._sum`` and ``..._count``; gauges
  (``min``, ``max``, ``avg``) have no suffix. Colons are never generated (they belong to
  recording rules).
- Several plans in one run (plan_set.py): an output is named `PLAN.OUTPUT` there, and
  served under its own plan's name, ``planrunner_<PLAN>_<OUTPUT>``, as when it runs alone.
- A label is the output's `by` key (``begin.query`` -> ``query``, ``{cmd: ...}`` ->
  ``cmd``) with the same replacement; a name that then starts with a digit or with
  ``__`` (reserved by Prometheus), or is ``le`` or ``quantile`` (labels Prometheus
  gives meaning to), gets a ``key_`` prefix.
- Two outputs (or two labels of one output) that end up with the same name, or an output
  whose name meets one of the exporter's own ``planrunner_*`` metrics, are an error at
  start, naming both: rename one with `name:`.

Label values: strings as they are (Prometheus escapes them), integers in decimal, bools
``true``/``false``, a NULL string ``(null)`` like the text view.

Pure; no prometheus_client (`run` checks names before it attaches anything).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING

from planrunner.records import Stack

if TYPE_CHECKING:
    from planrunner.render.model import AggregateOutput

PREFIX = "planrunner"
_INVALID = re.compile(r"[^a-zA-Z0-9_]")
METRIC_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
# Labels a plan's `by` key may not take: reserved by the histogram type or Prometheus.
_RESERVED_LABELS = frozenset({"le", "quantile"})

COUNTER_KINDS = ("count", "sum")
GAUGE_KINDS = ("min", "max", "avg")
HISTOGRAM_KINDS = ("hist", "lhist")


def sanitize(text: str) -> str:
    """`text` with every character outside [a-zA-Z0-9_] replaced by `_` ("" -> "_")."""
    return _INVALID.sub("_", text) or "_"


def metric_base(plan: str, output: str) -> str:
    """``planrunner_<plan>_<output>``, always a valid metric name."""
    return f"{PREFIX}_{sanitize(plan)}_{sanitize(output)}"


def metric_type(kind: str) -> str:
    """The Prometheus type of an aggregation kind."""
    if kind in COUNTER_KINDS:
        return "counter"
    if kind in GAUGE_KINDS:
        return "gauge"
    if kind in HISTOGRAM_KINDS:
        return "histogram"
    raise ValueError(f"unknown aggregation kind {kind!r}")


def sample_names(base: str, mtype: str) -> tuple[str, ...]:
    """Every sample name a family of this type exposes (for collision checks)."""
    if mtype == "counter":
        return (counter_sample(base),)
    if mtype == "histogram":
        return (f"{base}_bucket", f"{base}_sum", f"{base}_count")
    return (base,)


def counter_sample(base: str) -> str:
    """A counter's sample name: `base` + ``_total``, once (prometheus_client, like
    OpenMetrics, takes an output named ``total`` as the suffix itself)."""
    return base if base.endswith("_total") else f"{base}_total"


def label_name(key: str) -> str:
    """A `by` key as a valid, non-reserved Prometheus label name."""
    name = sanitize(key)
    if name[0].isdigit() or name.startswith("__") or name in _RESERVED_LABELS:
        name = f"key_{name}"
    return name


def label_value(value: object) -> str:
    if value is None:
        return "(null)"
    if value is True or value is False:
        return "true" if value else "false"
    if isinstance(value, Stack):  # one series per stack, whichever process fired first
        return value.places()
    return str(value)


def go_float(value: float | int) -> str:
    """A bucket bound as Go's strconv.FormatFloat(v, 'g', -1, 64) spells it, as
    client_golang writes `le`: the shortest round-trip digits, plain for decimal
    exponents -4..5 (``1023``, ``0.5``), else ``d.ddde±XX`` (``1.048575e+06``); and
    ``+Inf``. So bucket series of planrunner and of Go exporters match by label."""
    v = float(value)
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    if math.isnan(v):
        return "NaN"
    if v == 0:
        return "0"
    dec = Decimal(repr(v)).normalize()  # exactly the shortest digits repr() chose
    sign, digits, exponent = dec.as_tuple()
    assert isinstance(exponent, int)
    e10 = exponent + len(digits) - 1
    if -4 <= e10 < 6:
        return format(dec, "f")
    text = "".join(map(str, digits))
    body = text[0] + ("." + text[1:] if len(text) > 1 else "")
    return f"{'-' if sign else ''}{body}e{'+' if e10 >= 0 else '-'}{abs(e10):02d}"


@dataclass(frozen=True, slots=True)
class Family:
    """The Prometheus family of one aggregation output."""

    output: str
    kind: str
    name: str  # the base name (counters get `_total` when exposed)
    mtype: str
    labels: tuple[str, ...]  # label names, in `by` order
    help: str


class NameClash(ValueError):
    """Two things would be exposed under one name (message says which)."""


def check_unique(families: Iterable[Family], reserved: Iterable[str] = ()) -> None:
    """Raise NameClash when two families share a sample name, a family meets a
    `reserved` name, or one family has a label twice."""
    owners: dict[str, str] = {name: "planrunner's own metrics" for name in reserved}
    for fam in families:
        for sample in sample_names(fam.name, fam.mtype):
            if sample in owners:
                raise NameClash(f"{owners[sample]} and output '{fam.output}' would both "
                                f"be exposed as {sample}")
            owners[sample] = f"output '{fam.output}'"
        seen: set[str] = set()
        for label in fam.labels:
            if label in seen:
                raise NameClash(f"output '{fam.output}' has two `by` keys exposed as "
                                f"label '{label}'")
            seen.add(label)


def help_text(agg: AggregateOutput, plan: str, description: str,
              output: str | None = None) -> str:
    """One line: what is measured, where it comes from, then the plan's description
    (`output`: the output's name in its plan, when it differs from `agg.name`)."""
    what = "events" if agg.kind == "count" else f"{agg.kind} of {agg.value_label}"
    keys = list(agg.key.names)
    by = f" by {', '.join(keys)}" if keys else ""
    head = f"{what} at probe {agg.probe}{by} (plan {plan}, output {output or agg.name})"
    desc = " ".join(description.split())
    return f"{head}. {desc}" if desc else head


def family_of(agg: AggregateOutput, plan: str, description: str,
              output: str | None = None) -> Family:
    """The metric family of `agg`, `planrunner_<plan>_<output>` (`output`: its name in
    its plan, when several plans run and `agg.name` is `PLAN.OUTPUT`)."""
    own = output or agg.name
    return Family(output=agg.name, kind=agg.kind, name=metric_base(plan, own),
                  mtype=metric_type(agg.kind),
                  labels=tuple(label_name(k) for k in agg.key.names),
                  help=help_text(agg, plan, description, output))
