"""`planrunner validate PLAN`: every mistake at once, located; on success a summary per
probe (target, build id, locations, semaphores, argument types). Nothing is loaded."""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from planrunner.resolve.model import ResolvedProbe

from planrunner.commands.common import add_plan_parser, overrides, plan_path, print_diagnostics
from planrunner.probe_kinds import (
    INTERVAL,
    PROFILE,
    SPAN,
    TRACEPOINT,
    UPROBE,
    URETPROBE,
    USDT,
    Kind,
    kind,
)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser], name: str) -> None:
    parser = add_plan_parser(
        sub, name, help="check a plan against the real binaries (nothing attached)")
    parser.add_argument("--schema-only", action="store_true",
                        help="check the file and its schema only, without the binaries "
                             "(for plan repositories checked in CI)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace, stdout: TextIO, stderr: TextIO) -> int:
    from planrunner.commands.scope_args import check_scope, first_pid
    from planrunner.pipeline import load_resolved
    from planrunner.plan import load_plan

    check_scope(args)  # checked; the plan does not depend on it
    path = plan_path(args.plan)
    if args.schema_only:
        load_plan(path, overrides(args), require_params=False)
        stdout.write(f"{path}: ok (schema and plan structure; binaries not checked)\n")
        return 0
    _plan, resolved = load_resolved(path, overrides(args), first_pid(args))
    print_diagnostics(resolved.warnings, stderr)
    stdout.write(f"{path}: ok\n")
    for probe in resolved.probes:
        stdout.write(_summary(probe) + "\n")
    return 0


_ARGN = re.compile(r"^arg[0-9]+$")
_RETN = re.compile(r"^ret[0-9]+$")
ABI_TEXT = {
    "go": "Go's register ABI: integer words arg1..arg9 in rax, rbx, rcx, rdi, rsi, r8, r9, "
          "r10, r11; retval is the first result word (rax), ret2..ret9 the next ones",
    "go-abi0": "Go's stack ABI (assembly): argN at 8*N(%rsp) on entry; no return probe",
}


def _stacks(probe: ResolvedProbe) -> str:
    """How the probe captures stacks, when it does."""
    kinds = [("user stacks by " + ("frame pointers" if probe.stack.unwind == "fp" else
                                  f"{probe.stack.unwind} unwinding ({probe.stack.bytes} "
                                  "bytes copied)")) if k == "user" else "kernel stacks"
             for k in probe.stacks]
    return f"; {', '.join(kinds)}" if kinds else ""


def _summary(probe: ResolvedProbe) -> str:
    return SUMMARIES[kind(probe.spec.kind)](probe)


def _span_summary(probe: ResolvedProbe) -> str:
    spec = probe.spec
    by = (" (by goroutine: both ends are Go functions)"
          if spec.key is None and probe.key_begin is not None else "")
    return f"  {spec.name}: span {spec.begin} -> {' | '.join(spec.end_names)}{by}"


def _tracepoint_summary(probe: ResolvedProbe) -> str:
    return f"  {probe.spec.name}: tracepoint {probe.spec.category}:{probe.spec.event}"


def _profile_summary(probe: ResolvedProbe) -> str:
    return f"  {probe.spec.name}: profile {probe.spec.hz} Hz on every CPU{_stacks(probe)}"


def _interval_summary(probe: ResolvedProbe) -> str:
    spec = probe.spec
    return f"  {spec.name}: interval every {(spec.period_ns or 0) / 1e9:g}s on one CPU"


def _binary_summary(probe: ResolvedProbe) -> str:
    """A probe in a binary: where, its locations and semaphores, its arguments."""
    spec = probe.spec
    binary = probe.targets[0]
    sems = sum(1 for s in probe.sites if s.ref_ctr_offset)
    read = {s.name or f"arg{s.index}" for s in probe.slots}
    # Go's further result words (ret2..ret9) are listed when read
    offered = [(n, t) for n, t in probe.offered if not _RETN.match(n) or n in read]
    registers = ""
    if kind(spec.kind).function:
        # A function's 12 register arguments are always offered: show the declared and
        # the read ones, and the rest once.
        declared = {f"arg{a.index}" for a in spec.args}
        shown = [(n, t) for n, t in offered
                 if (declared | read) & set(n.split("/")) or not _ARGN.match(n)]
        rest = len(offered) - len(shown)
        total = sum(1 for n, _t in offered if any(_ARGN.match(a) for a in n.split("/")))
        if rest:
            registers = (f"arg1..arg{total}: int64 (registers; declare the ones "
                         "you use)" if not shown else
                         f"the other {rest} of arg1..arg{total}: int64 (registers)")
        offered = shown
    args = ", ".join(f"{names}: {typ}{' (read)' if read & set(names.split('/')) else ''}"
                     for names, typ in offered)
    args = ", ".join(a for a in (args, registers) if a)
    lines = [f"  {spec.name}: {spec.kind} in {binary.display}",
             f"    build id {binary.build_id or 'none'}; {len(probe.sites)} "
             f"location{'s' if len(probe.sites) != 1 else ''}"
             + (f", {sems} with a semaphore" if sems else "")]
    if args:
        lines.append(f"    arguments {args}")
    if probe.abi in ABI_TEXT:  # a C function's is the default: not shown
        lines.append(f"    abi {probe.abi}: {ABI_TEXT[probe.abi]}")
    if probe.stacks:
        lines.append(f"    captures {_stacks(probe)[2:]}")
    lines += [f"    note: {note}" for note in probe.notes]
    return "\n".join(lines)



# The summary line(s) of a probe of each kind.
SUMMARIES: dict[Kind, Callable[[ResolvedProbe], str]] = {
    USDT: _binary_summary,
    UPROBE: _binary_summary,
    URETPROBE: _binary_summary,
    TRACEPOINT: _tracepoint_summary,
    PROFILE: _profile_summary,
    INTERVAL: _interval_summary,
    SPAN: _span_summary,
}
