"""Which outputs of a compiled plan `run -f pprof` can write, checked before anything is
attached: count outputs keyed by ustack/kstack only (output/pprof.py writes them), each
with its file (`pprof_paths`, as CSV does) and, for a `profile:` probe, its sampling
period. Here, not in output/: it reads the rendered program, which views never import.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from planrunner.errors import UsageError
from planrunner.output.pprof import PprofOutput, check_destination, pprof_paths
from planrunner.probe_kinds import site_kind

if TYPE_CHECKING:
    from planrunner.render.model import RenderedProgram

_FORMATS_HINT = "-f folded, json, csv or text print any output"


def check_pprof(program: RenderedProgram, path: str | None, outputs: Sequence[str],
                plan_name: str) -> list[PprofOutput]:
    """The outputs of a `-f pprof` run with their files, or a UsageError saying why the
    plan cannot be written as pprof."""
    path = check_destination(path)
    where = f"plan '{plan_name}'"
    if program.prints:
        names = ", ".join(p.name for p in program.prints)
        raise UsageError(f"-f pprof: {where} has print outputs ({names}); pprof holds "
                         "only counts keyed by a stack",
                         hints=(_FORMATS_HINT, "or use a plan whose outputs are all "
                                "`count` with ustack or kstack in `by`"))
    if program.tables:
        raise UsageError(f"-f pprof: {where} has a table ({program.tables[0].name}); "
                         "pprof holds only counts keyed by a stack",
                         hints=(_FORMATS_HINT,))
    aggs = {a.name: a for a in program.aggregates}
    for name in outputs:
        agg = aggs.get(name)
        if agg is None:
            continue
        stacked = any(f.stack for f in agg.key.fields)
        if agg.kind != "count" or not stacked:
            what = (f"is a `{agg.kind}`" if agg.kind != "count"
                    else "is not keyed by a stack (no ustack or kstack in `by`)")
            raise UsageError(f"-f pprof: output '{name}' of {where} {what}; pprof writes "
                             "`count` outputs keyed by ustack or kstack",
                             hints=(f"add ustack (and kstack) to its `by` and make it a "
                                    f"`count`, or {_FORMATS_HINT}",))
    files = pprof_paths(path, outputs)
    return [PprofOutput(name, files[name], _period_ns(program, aggs[name].probe)
                        if name in aggs else None) for name in outputs]




def _period_ns(program: RenderedProgram, probe: str) -> int | None:
    """The sampling period of a `profile:` probe (its cpu-clock event at `hz` on every
    CPU); None for any other probe, `interval:` included: a timer on CPU 0, whose
    firings are not CPU time of what they interrupt."""
    for site in program.sites:
        if site.probe == probe and site_kind(site.kind).timer and site.sample_hz:
            return round(1e9 / site.sample_hz)
    return None


