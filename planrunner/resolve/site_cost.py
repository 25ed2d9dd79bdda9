"""What a plan's probe sites cost to start, as measured: the figures behind
settings.max_sites, its ceiling MAX_SITES, and the estimate a refusal gives.

Each site is a BPF function in the one program clang compiles. Compiled with debug info,
the compile grows with the square of the sites: perf (call graphs by DWARF) of a
2000-site compile put ~80% of its samples in std::_Rb_tree_increment, most of them under
LLVM's DebugHandlerBase::beginFunction (bcc's BPFModule::finalize emits the object): a tree
that grows with every function, walked once per function. Memory grows less than that.
Since then a program compiles without debug info (runtime/bcc_backend.py compile_flags;
since issue 28's fifteenth session a plan that reads strings too: its task-storage
scratch no longer needs the program's BTF), and grows about linearly: 1000 sites in ~50 s
of CPU (BENCHMARKS.md, "Probe sites without debug info"). MEASURED keeps the figures with
debug info, which no plan reaches now, so the estimate is an upper bound and MAX_SITES
stays where even that case is bearable.

MEASURED holds (sites, CPU seconds of `run` and its compile worker from launch to
attached, their peak RSS in MB), by bench/site_limit.py (command, machine and every
figure in BENCHMARKS.md, "Probe sites"). CPU seconds rather than wall time: the machine
was shared, and alone a run takes about its CPU time (the compile is one thread).
"""

from __future__ import annotations

MEASURED: tuple[tuple[int, float, float], ...] = (
    (300, 18.0, 255),
    (1000, 188.7, 589),
    (2000, 1639.3, 1034),
)

# The most sites settings.max_sites allows (the schema's maximum, which
# tests/unit/test_site_cost.py checks): with debug info (the upper bound above), 1000
# sites start in ~3 min of CPU and 0.6 GB; 2000 took 27 min of CPU and 1 GB.
# Also the default: max_sites only lowers it.
MAX_SITES = 1000


def cost(sites: int) -> tuple[float, float]:
    """(seconds, MB) to start a plan of `sites` sites: interpolated between the measured
    points; below the first, time in proportion to it and its memory (most of which any
    run needs); past the last, time with the square of the sites and memory in
    proportion, as they grew."""
    first, last = MEASURED[0], MEASURED[-1]
    if sites <= first[0]:
        return first[1] * sites / first[0], first[2]
    if sites >= last[0]:
        ratio = sites / last[0]
        return last[1] * ratio * ratio, last[2] * ratio
    for (n0, t0, m0), (n1, t1, m1) in zip(MEASURED, MEASURED[1:], strict=False):
        if n0 <= sites <= n1:
            f = (sites - n0) / (n1 - n0)
            return t0 + f * (t1 - t0), m0 + f * (m1 - m0)
    raise AssertionError("MEASURED is sorted by sites")


def about(seconds: float) -> str:
    """'40 s', '5 min', '3.5 h': a duration as rounded as an estimate is."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 2 * 3600:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def memory(mb: float) -> str:
    return f"{mb:.0f} MB" if mb < 1024 else f"{mb / 1024:.1f} GB"


def refusal(sites: int, limit: int) -> tuple[str, str]:
    """The message and the hint refusing `sites` sites over settings.max_sites `limit`."""
    seconds, mb = cost(sites)
    message = (f"this plan has {sites} probe sites, more than settings.max_sites ({limit}): "
               "each is a BPF function in one program, whose compile grows with the "
               "square of the sites when a probe reads strings; measured, "
               f"{sites} would take up to about {about(seconds)} of CPU and {memory(mb)} "
               "to start")
    hint = "trace fewer functions" + (
        f", or raise settings.max_sites knowingly (at most {MAX_SITES})"
        if sites <= MAX_SITES else
        f": settings.max_sites goes up to {MAX_SITES} at most, which starts in "
        f"{about(cost(MAX_SITES)[0])} of CPU")
    return message, hint
