"""Reading in-kernel aggregation maps into AggSnapshots (per interval or at exit).
Placeholder until issue 5: plans without aggregations need nothing here."""

from __future__ import annotations

from planrunner.output.base import View
from planrunner.render.model import RenderedProgram


class AggregateReader:
    def __init__(self, program: RenderedProgram, prog: object) -> None:
        self.program = program
        self.prog = prog

    def tick(self, view: View) -> None:
        """Print and reset the aggregations whose interval has elapsed."""

    def finish(self, view: View) -> None:
        """Print what the aggregations hold at the end of the run."""
