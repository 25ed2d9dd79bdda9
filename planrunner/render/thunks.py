"""What differs per site kind in a probe's thunks, the C functions attached at its
sites (each fills the probe's arguments and calls its body): the context the kernel
hands it (`THUNK_SHAPES`: which signature and scope check templates/program.bpf.c.j2
writes) and how it reads the arguments (`THUNK_READS`). The suffix of its name is
render/names.py's `THUNK_SUFFIXES`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

from planrunner.probe_kinds import PERF_SITE, TRACEPOINT_SITE, UPROBE_SITE, URETPROBE_SITE, SiteKind
from planrunner.render.bodies import thunk_reads, tracepoint_reads
from planrunner.resolve.model import ResolvedProbe, ResolvedSite

# the `ctx` a thunk is given: a uprobe's registers, a tracepoint's record, a perf event's
# sample (the template writes the signature of each)
ThunkShape = Literal["pt_regs", "tracepoint", "perf_event"]

THUNK_SHAPES: dict[SiteKind, ThunkShape] = {
    UPROBE_SITE: "pt_regs",
    URETPROBE_SITE: "pt_regs",
    TRACEPOINT_SITE: "tracepoint",
    PERF_SITE: "perf_event",
}


def _register_reads(site: ResolvedSite, probe: ResolvedProbe) -> list[str]:
    machine = site.binary.machine if site.binary else "EM_X86_64"
    return thunk_reads(site, probe, machine)


def _field_reads(site: ResolvedSite, probe: ResolvedProbe) -> list[str]:
    return tracepoint_reads(probe)


def _no_reads(site: ResolvedSite, probe: ResolvedProbe) -> list[str]:
    return []  # a sample has no arguments


# The C statements that fill `pr_a` at one site.
THUNK_READS: dict[SiteKind, Callable[[ResolvedSite, ResolvedProbe], list[str]]] = {
    UPROBE_SITE: _register_reads,
    URETPROBE_SITE: _register_reads,
    TRACEPOINT_SITE: _field_reads,
    PERF_SITE: _no_reads,
}
