"""RenderedProgram: everything the runtime needs, and nothing of the plan.

`c_source` is exactly what `planrunner render` prints and `run` loads.
"""

from __future__ import annotations

from dataclasses import dataclass

from planrunner.render.layout import RecordLayout
from planrunner.resolve.model import AttachSite


@dataclass(frozen=True, slots=True)
class PrintOutput:
    """A `print` output: records of `layout` arrive through the ring buffer."""

    name: str
    probe: str
    layout: RecordLayout
    format: str | None


@dataclass(frozen=True, slots=True)
class AggregateOutput:
    """An in-kernel aggregation read from map `map_name` (key struct -> value struct)."""

    name: str
    probe: str
    kind: str  # count sum min max avg hist lhist
    map_name: str
    key_fields: tuple[tuple[str, str], ...]  # (record key, "int"|"uint"|"bool"|"str:N")
    value_label: str
    unit: str | None
    every_ns: int | None
    top: int | None
    lhist: tuple[int, int, int] | None  # (min, max, step)
    map_size: int
    value_signed: bool = True  # value kept as __s64 (False: __u64, a uint64 value)
    lost_map: str = ""  # per-CPU array [0]: updates refused because the map was full


@dataclass(frozen=True, slots=True)
class RenderedProgram:
    c_source: str
    sites: tuple[AttachSite, ...]
    prints: tuple[PrintOutput, ...]
    aggregates: tuple[AggregateOutput, ...]
    plan_name: str
    pid: int | None = None
    # maps the runtime reads: lost-event counter, map-full counter
    lost_map: str = "pr_lost"
    events_map: str = "pr_events"
