"""Why a run recorded nothing, or why a probe of it recorded nothing: said on stderr
at exit (the exit status does not change), so that an empty trace is never silent.

What is known at the end:
- which probes showed something (`Heard`, a View between the session and the view:
  print records by their probe, aggregation snapshots with rows by their output's
  probe, table snapshots with rows by the outputs they join);
- for a -c command or one --pid process: the plan's binaries it was seen mapping
  (runtime/upkeep.py: its maps are read every loop turn, once it is the traced program)
  and, for -c, the file the command line named and the executables it ran after its
  exec (runtime/child.py `look`);
- the probes resolve warned fire only when the runtime is started a certain way
  (`RenderedProgram.gated`: a profile hook, a JVM flag, an environment variable);
- whether semaphores went unraised (poke mode without --pid).

Only probes that an output reads directly are explained: those with sites of their
own, and spans through their begin and end (`RenderedProgram.span_sides`: the files
of both sides, the gate of either, e.g. python-latency's entry without a profile
hook). Nothing is said when events were lost: the trace is then incomplete, not empty.
More than GROUP_ABOVE probes silent for the same reasons are said in one line that
names the first few (a 3000-probe plan that fired nothing printed 3000 lines).

Imports records.py, output/base.py, render/model.py and runtime/ modules only.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from planrunner.output.base import ViewWrapper
from planrunner.runtime.late_libraries import file_key

if TYPE_CHECKING:  # records.py is imported once tracing has begun (docs/architecture.md)
    from planrunner.output.base import View
    from planrunner.records import AggSnapshot, TableSnapshot
    from planrunner.render.model import RenderedProgram, TargetFile
    from planrunner.runtime.child import Child
    from planrunner.runtime.upkeep import Upkeep


class Heard(ViewWrapper):
    """A View that passes everything to `inner` and notes what showed something."""

    def __init__(self, inner: View) -> None:
        super().__init__(inner)
        self.probes: set[str] = set()  # of print records
        self.outputs: set[str] = set()  # aggregations with a row

    def record(self, rec: dict[str, object]) -> None:
        self._note((rec,))
        self.inner.record(rec)

    def records(self, batch: Sequence[dict[str, object]]) -> None:
        self._note(batch)
        self.inner.records(batch)

    def _note(self, batch: Sequence[dict[str, object]]) -> None:
        for rec in batch:
            probe = rec.get("probe")
            if isinstance(probe, str):
                self.probes.add(probe)

    def aggregate(self, snap: AggSnapshot) -> None:
        if snap.rows:
            self.outputs.add(snap.output)
        self.inner.aggregate(snap)

    def table(self, snap: TableSnapshot) -> None:
        if snap.rows:
            self.outputs.add(f"table:{snap.output}")
        self.inner.table(snap)


def explain(program: RenderedProgram, heard: Heard, child: Child | None, pid: int | None,
            upkeep: Upkeep | None, children_traced: bool = True) -> list[str]:
    """The lines to write on stderr (each ending in a newline); none when every probe an
    output reads directly showed something. `children_traced`: --follow-children (a -c
    command that ran another program may have started the target as its child)."""
    by_output = {p.name: p.probe for p in program.prints}
    by_output.update({a.name: a.probe for a in program.aggregates})
    joined = {f"table:{t.name}": [o for _, outs in t.columns for o in outs]
              for t in program.tables}
    shown = set(heard.probes)
    for out in heard.outputs:
        for name in joined.get(out, [out]):
            if name in by_output:
                shown.add(by_output[name])
    binaries: dict[str, list[TargetFile]] = {}
    semaphores: set[str] = set()
    for site in program.sites:
        if site.binary is not None and site.binary not in binaries.setdefault(site.probe, []):
            binaries[site.probe].append(site.binary)
        if site.ref_ctr_offset:
            semaphores.add(site.probe)
    for probes in program.sets:  # a uprobe set: its functions' one file
        if probes.binary not in binaries.setdefault(probes.probe, []):
            binaries[probes.probe].append(probes.binary)
    # an open-span output with no row says that nothing is open, not that nothing fired
    read = list(dict.fromkeys([*(p.probe for p in program.prints),
                               *(a.probe for a in program.aggregates if not a.gauge)]))
    gated = dict(program.gated)
    for span, begin, end in program.span_sides:  # its sides' files and gates are its own
        sides = [*binaries.get(begin, []), *binaries.get(end, [])]
        if sides:
            binaries[span] = list(dict.fromkeys(sides))
        gate = gated.get(begin) or gated.get(end)
        if gate and span not in gated:
            gated[span] = gate
    sited = {s.probe for s in program.sites} | {p for p in binaries if binaries[p]}
    silent = [p for p in read if p in sited and p not in shown]
    if not silent:
        return []
    empty = not shown
    lines: list[str] = []
    trail_said = False
    for group, why, trail in _grouped(silent, lambda probe: _reasons(
            binaries.get(probe, []), gated.get(probe), probe in semaphores, child, pid,
            upkeep)):
        if len(group) == 1:
            (probe,) = group
            head = "no events" if empty and len(silent) == 1 else \
                f"probe {probe} recorded nothing"
            said = [r.replace(_ONE, f"probe {probe}").replace(_IT, "it was")
                    for r in why]
        else:
            names = ", ".join(group[:SHOWN]) + (f" and {len(group) - SHOWN} more"
                                                 if len(group) > SHOWN else "")
            head = f"{len(group)} probes recorded nothing ({names})"
            said = [r.replace(_ONE, "these probes").replace(_IT, "they were")
                    for r in why]
        lines.append(f"{head}: {said[0]}\n")
        lines += [f"  {r}\n" for r in said[1:]]
        if trail and not trail_said:
            lines.append(f"  {trail}\n")
            if not children_traced:
                lines.append("  the processes it started were not traced: add "
                             "--follow-children to trace them\n")
            trail_said = True
    if empty and len(silent) > 1:
        lines.insert(0, "no events:\n")
    return lines


# More silent probes than this with the same reasons are said in one line (a plan of
# 3000 probes that fired none printed 3000 lines at exit), naming the first SHOWN.
GROUP_ABOVE = 10
SHOWN = 5
# Stand-ins in the reasons' text, filled per probe or per group.
_ONE, _IT = "\x00probe\x00", "\x00it\x00"

Reasons = tuple[list[str], str | None]


def _grouped(silent: list[str], reasons_of: Callable[[str], Reasons]
             ) -> list[tuple[list[str], list[str], str | None]]:
    """(probes, reasons, trail) in the order of each group's first probe: the probes
    whose reasons are the same (their names stood in for) together when more than
    GROUP_ABOVE share them, each alone otherwise."""
    groups: dict[tuple[tuple[str, ...], str | None], list[str]] = {}
    for probe in silent:
        why, trail = reasons_of(probe)
        groups.setdefault((tuple(why), trail), []).append(probe)
    out: list[tuple[list[str], list[str], str | None]] = []
    for (said, trail), probes in groups.items():
        if len(probes) > GROUP_ABOVE:
            out.append((probes, list(said), trail))
        else:
            out += [([p], list(said), trail) for p in probes]
    order = {p: i for i, p in enumerate(silent)}
    return sorted(out, key=lambda group: order[group[0][0]])


def _reasons(files: list[TargetFile], gate: str | None, semaphore: bool,
             child: Child | None, pid: int | None, upkeep: Upkeep | None) -> Reasons:
    """Why a probe recorded nothing, most telling first (the probe named by the _ONE
    stand-in, "it was" by _IT); and, for -c, what the command ran when that was not the
    probe's binary."""
    who = (f"the command (process {child.pid})" if child is not None
           else f"process {pid}" if pid is not None else None)
    watched = upkeep is not None and upkeep.watcher is not None and who is not None
    reasons: list[str] = []
    trail = None
    gate_said = False
    # a command that exec'd the probe's binary mapped it, whether or not its maps were
    # read before it ended (a short command on a loaded machine)
    ran = child is not None and _ran_one_of(child, files)
    if watched and upkeep is not None and (upkeep.looked or ran) and files:
        keys = {file_key(f.path) for f in files} - {None}
        names = " or ".join(f.display for f in files)
        if ran or keys & upkeep.mapped_ever:
            if gate:
                reasons.append(f"{who} mapped {names}, but {_lower(gate)}")
                gate_said = True
            else:
                reasons.append(f"{who} mapped {names} but never reached {_ONE} "
                               "while traced (or `where:` dropped every event)")
        else:
            reasons.append(f"{who} never mapped {names}, the binary of {_ONE}")
            trail = _trail(child, files)
    elif watched and child is not None:
        reasons.append(f"{who} ended before planrunner could read its maps (after its "
                       "exec)")
        trail = _trail(child, files)
    if gate and not gate_said:
        reasons.append(gate)
    if semaphore and upkeep is not None and upkeep.unraised:
        reasons.append("its semaphore was never raised: this kernel has no uprobe "
                       "reference counters (use --pid PID)")
    if not reasons:
        reasons.append(f"no traced process reached {_ONE} while {_IT} attached "
                       "(or `where:` dropped every event)")
    return reasons, trail


def _ran_one_of(child: Child, files: list[TargetFile]) -> bool:
    """Whether the -c command's file, or an executable it exec'd, is one of `files`."""
    if child.path is None:
        return False
    targets = {os.path.realpath(f.path) for f in files}
    return bool(targets & {os.path.realpath(p) for p in (child.path, *child.exes)})


def _trail(child: Child | None, files: list[TargetFile]) -> str | None:
    """What the -c command ran, when it is not one of `files`."""
    if child is None or child.path is None or _ran_one_of(child, files):
        return None  # it ran the target: the reason is elsewhere
    named = child.path
    interpreter = _interpreter(child.path)
    if interpreter:
        named += f" (a script for {interpreter})"
    before = {os.path.realpath(p) for p in (child.path, interpreter, _ENV) if p}
    after = [e for e in dict.fromkeys(child.exes) if os.path.realpath(e) not in before]
    then = f", which exec'd {', then '.join(after)}" if after else ""
    return f"the command ran {named}{then}"


_ENV = "/usr/bin/env"


def _interpreter(path: str) -> str | None:
    """The interpreter of a `#!` script (`#!/usr/bin/env bash`: bash, found on PATH, as
    pyenv's shims say)."""
    try:
        with open(path, "rb") as fh:
            first = fh.readline(256)
    except OSError:
        return None
    if not first.startswith(b"#!"):
        return None
    words = first[2:].decode("utf-8", "replace").split()
    if len(words) > 1 and os.path.basename(words[0]) == "env":
        import shutil  # noqa: PLC0415 - only for such a script

        name = next((w for w in words[1:] if not w.startswith("-")), None)
        return (shutil.which(name) or name) if name else words[0]
    return words[0] if words else None


def _lower(text: str) -> str:
    return text[:1].lower() + text[1:] if text[:2] != text[:2].upper() else text
