"""In-kernel aggregation maps and their update statements (count, sum, min, max, avg,
hist, lhist). Placeholder until issue 5 lands: raises for any aggregation."""

from __future__ import annotations

from planrunner.render.bodies import Scratch
from planrunner.render.model import AggregateOutput
from planrunner.resolve.model import ResolvedOutput


def aggregate_block(out: ResolvedOutput, scratch: Scratch,
                    map_size: int) -> tuple[AggregateOutput, list[str], list[str]]:
    raise NotImplementedError(f"aggregation {out.spec.kind!r} is not implemented yet")
