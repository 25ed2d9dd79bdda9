"""The probe kinds: one descriptor each, the one place that names them.

A plan probe has one `Kind` (its key in `probes:`: usdt, uprobe, uretprobe,
tracepoint, profile, interval, span); each place it fires is a site of one `SiteKind`
(uprobe, uretprobe, tracepoint, perf; raw_tracepoint for the run's own programs only).
A descriptor says what differs per kind as data;
what a stage does per kind is a table of that stage keyed by the descriptor
(plan/build_probes.py `PARSERS`, resolve/locate.py `LOCATORS`, resolve/__init__.py
`SITE_MAKERS`, render/names.py `THUNK_SUFFIXES`, render/thunks.py `THUNK_SHAPES` and
`THUNK_READS`, runtime/attach.py `STRATEGIES` by `SiteKind.strategy`,
commands/validate.py `SUMMARIES`). Adding a kind is one descriptor here and one row per
table (docs/architecture.md, "Probe kinds"); tests/unit/test_probe_kinds.py checks that
every table has every kind and that no module but this one compares a kind with its
name.

The models keep kinds as their names (strings pickle into the caches and print as
they are); `kind(name)` and `site_kind(name)` give the descriptor.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

KindName = Literal["usdt", "uprobe", "uretprobe", "tracepoint", "profile", "interval", "span"]
SiteKindName = Literal["uprobe", "uretprobe", "tracepoint", "perf", "raw_tracepoint"]


# eq=False: a descriptor is its own identity (hashed by id, as a table key)
@dataclass(frozen=True, slots=True, eq=False)
class SiteKind:
    """How one site attaches and what its program's context holds."""

    name: SiteKindName  # ResolvedSite.kind, AttachSite.kind
    # at a file offset of a binary (a uprobe): the kernel attaches it for one process
    # and its context holds the user registers; else it fires in whatever task runs,
    # scoped by the program's C (ConfigSlot.SCOPE_TRACEPOINT)
    in_binary: bool
    returns: bool  # fires on the function's return (a uprobe_multi link's return flag)
    timer: bool  # a cpu-clock perf event (`sample_hz` or `sample_period_ns`)
    strategy: str  # the attach strategy (runtime/attach.py STRATEGIES) that attaches it
    # a plan probe's sites may be of this kind (its thunks: render/thunks.py); else only
    # the run's own programs are (render/model.py RUN_OWN_SITES)
    plan: bool = True


UPROBE_SITE = SiteKind("uprobe", in_binary=True, returns=False, timer=False,
                       strategy="uprobes")
URETPROBE_SITE = SiteKind("uretprobe", in_binary=True, returns=True, timer=False,
                          strategy="uprobes")
TRACEPOINT_SITE = SiteKind("tracepoint", in_binary=False, returns=False, timer=False,
                           strategy="tracepoints")
PERF_SITE = SiteKind("perf", in_binary=False, returns=False, timer=True,
                     strategy="perf_events")
# The run's own programs on sched_process_exit and _exec: a raw tracepoint's close does
# not wait for a grace period as a tracepoint perf event's does (0.1 ms against 40-70
# ms, one after another: BENCHMARKS.md, "Stop under a flood"). Its context holds the
# event's TP_PROTO arguments, not the format's fields: no plan probe is one.
RAW_TRACEPOINT_SITE = SiteKind("raw_tracepoint", in_binary=False, returns=False,
                               timer=False, strategy="raw_tracepoints", plan=False)
SITE_KINDS = (UPROBE_SITE, URETPROBE_SITE, TRACEPOINT_SITE, PERF_SITE, RAW_TRACEPOINT_SITE)
PLAN_SITE_KINDS = tuple(s for s in SITE_KINDS if s.plan)


@dataclass(frozen=True, slots=True, eq=False)
class Kind:
    """A plan-level probe kind: its key in the plan, where its arguments come from,
    what options it takes and the kind of its sites."""

    name: KindName  # the key in `probes:` (the schema's), ProbeSpec.kind
    site: SiteKind | None  # its sites' kind (None: a span has no sites of its own)
    binary: bool  # TARGET:...: fires in a program's code, reads its memory (may fault)
    function: bool  # at a function (a calling convention; a set is one program)
    returns: bool  # at a function's return: `retval`, no +OFFSET, no args
    samples: bool  # a timer, not an event of the program: no span begins or ends there
    pairs: bool  # a span: pairs two other probes' events
    fields: bool  # its arguments are a kernel event's fields, by name
    all_processes: bool  # takes `all_processes:` (fires in whatever task runs)
    args_refused: str  # why `args:` is refused ("": declared args are read)
    set_of: str  # what a glob of it matches, for messages ("function", ...)


USDT = Kind("usdt", UPROBE_SITE, binary=True, function=False, returns=False,
            samples=False, pairs=False, fields=False, all_processes=False,
            args_refused="", set_of="USDT probe")
UPROBE = Kind("uprobe", UPROBE_SITE, binary=True, function=True, returns=False,
              samples=False, pairs=False, fields=False, all_processes=False,
              args_refused="", set_of="function")
URETPROBE = Kind("uretprobe", URETPROBE_SITE, binary=True, function=True, returns=True,
                 samples=False, pairs=False, fields=False, all_processes=False,
                 args_refused="", set_of="function")
TRACEPOINT = Kind("tracepoint", TRACEPOINT_SITE, binary=False, function=False,
                  returns=False, samples=False, pairs=False, fields=True,
                  all_processes=True, args_refused="a tracepoint's fields are used by name",
                  set_of="tracepoint")
_NO_SAMPLE_ARGS = "a sample has no arguments: use pid, comm, ustack, kstack..."
PROFILE = Kind("profile", PERF_SITE, binary=False, function=False, returns=False,
               samples=True, pairs=False, fields=False, all_processes=False,
               args_refused=_NO_SAMPLE_ARGS, set_of="")
INTERVAL = Kind("interval", PERF_SITE, binary=False, function=False, returns=False,
                samples=True, pairs=False, fields=False, all_processes=False,
                args_refused=_NO_SAMPLE_ARGS, set_of="")
SPAN = Kind("span", None, binary=False, function=False, returns=False, samples=False,
            pairs=True, fields=False, all_processes=False,
            args_refused="declare args on the span's begin and end probes; use begin.X / "
            "end.X", set_of="")
# in the schema's order (schema/plan.schema.json, `probe`'s oneOf)
KINDS = (USDT, UPROBE, URETPROBE, TRACEPOINT, PROFILE, INTERVAL, SPAN)
KIND_NAMES = tuple(k.name for k in KINDS)

_BY_NAME: dict[str, Kind] = {k.name: k for k in KINDS}
_SITES_BY_NAME: dict[str, SiteKind] = {s.name: s for s in SITE_KINDS}


def kind(name: str) -> Kind:
    """The descriptor of the plan kind `name` (KeyError: no such kind)."""
    return _BY_NAME[name]


def site_kind(name: str) -> SiteKind:
    """The descriptor of the site kind `name` (KeyError: no such kind)."""
    return _SITES_BY_NAME[name]


def find(keys: Iterable[object]) -> tuple[Kind, ...]:
    """The kinds whose plan key is among `keys` (a probe's mapping), in KINDS order."""
    present = set(keys)
    return tuple(k for k in KINDS if k.name in present)
