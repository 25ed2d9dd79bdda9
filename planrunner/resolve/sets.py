"""Probe sets: what a probe whose symbol, USDT probe or tracepoint is a shell glob
(`libc:str*`, `py:python:*`, `syscalls:sys_enter_open*`) matches.

Functions are FUNC (or IFUNC) symbols with a size: a name without code (a variable, an
undefined or zero-sized symbol) is no function to count. Aliases (two names at one
address: `index` and `strchr`) are one function, named once (a public name before an
`_`-prefixed one, then the shorter, then the first alphabetically), so each call counts
once. An IFUNC is probed at the implementation its resolver picks on this machine, as a
single uprobe is (elf/ifunc.py); one that cannot be resolved here is left out, with a
note. Every matcher returns its matches sorted by name: the set's order, and so its
`func` indexes, are the same run after run.
"""

from __future__ import annotations

from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import TYPE_CHECKING

from planrunner.diagnostics import did_you_mean
from planrunner.errors import ResolveError
from planrunner.plan.model import ProbeSpec
from planrunner.probe_kinds import kind
from planrunner.resolve.model import BinaryRef

if TYPE_CHECKING:
    from planrunner.elf.symbols import Symbol
    from planrunner.usdt.model import UsdtProbe

SHOWN = 5  # matches named in the summary and in messages
_CODE = frozenset({"STT_FUNC", "STT_GNU_IFUNC"})


@dataclass(frozen=True, slots=True)
class SetFunction:
    """One function of a uprobe set: its name and where its code starts."""

    name: str
    vaddr: int  # link-time address probed (an IFUNC's implementation)
    size: int


def first_few(names: list[str]) -> str:
    """'a, b, c, d, e and 12 more'."""
    shown = ", ".join(names[:SHOWN])
    return shown if len(names) <= SHOWN else f"{shown} and {len(names) - SHOWN} more"


def match_functions(spec: ProbeSpec, binary: BinaryRef
                    ) -> tuple[list[SetFunction], list[str]]:
    """The functions of `binary` whose name matches the glob `spec.symbol`, and notes
    (IFUNCs resolved or left out, aliases)."""
    from planrunner.elf.symbols import find_symbols

    pattern = str(spec.symbol)
    syms = [s for s in find_symbols(binary.path) if s.type in _CODE and s.value
            and s.size and not s.hidden]
    by_addr: dict[int, list[Symbol]] = {}
    for sym in syms:
        if fnmatchcase(sym.name, pattern):
            by_addr.setdefault(sym.value, []).append(sym)
    if not by_addr:
        raise _no_match(spec, pattern, {s.name for s in syms}, binary,
                        "`nm -D --defined-only` lists a library's functions")
    from planrunner.elf.instructions import starts_evex, starts_locked

    notes: list[str] = []
    chosen: dict[int, SetFunction] = {}
    unresolved: list[str] = []
    evex: list[str] = []
    locked: list[str] = []
    aliases = 0
    for group in by_addr.values():
        group.sort(key=lambda s: (s.name.startswith("_"), len(s.name), s.name))
        aliases += len({s.name for s in group}) - 1
        sym = group[0]
        start, size = sym.value, sym.size
        if sym.type == "STT_GNU_IFUNC":
            from planrunner.elf.ifunc import resolve_ifunc

            try:
                impl = resolve_ifunc(binary.path, sym)
            except ResolveError:
                unresolved.append(sym.name)
                continue
            start, size = impl.vaddr, impl.size
        if starts_evex(binary.path, start, binary.machine):
            evex.append(sym.name)
            continue
        if starts_locked(binary.path, start, binary.machine):
            locked.append(sym.name)
            continue
        # two IFUNCs may pick one implementation: the first name (sorted) keeps it
        if start not in chosen or sym.name < chosen[start].name:
            chosen[start] = SetFunction(sym.name, start, size)
    if aliases:
        notes.append(f"{aliases} alias{'es' if aliases != 1 else ''} of a matched "
                     "function (another name at its address) counted once")
    if unresolved:
        notes.append(f"{len(unresolved)} IFUNC{'s' if len(unresolved) != 1 else ''} left "
                     f"out (not loaded by planrunner, so not resolved here): "
                     f"{first_few(sorted(unresolved))}")
    if evex:
        notes.append(f"{len(evex)} function{'s' if len(evex) != 1 else ''} left out: "
                     f"{'they start' if len(evex) != 1 else 'it starts'} with an AVX-512 "
                     "(EVEX) instruction, which the kernel's uprobes execute wrongly "
                     f"(the traced program would compute wrong results): "
                     f"{first_few(sorted(evex))}")
    if locked:
        notes.append(f"{len(locked)} function{'s' if len(locked) != 1 else ''} left out: "
                     f"{'they start' if len(locked) != 1 else 'it starts'} with a "
                     f"lock-prefixed instruction, which the kernel's uprobes refuse: "
                     f"{first_few(sorted(locked))}")
    funcs = sorted(chosen.values(), key=lambda f: f.name)
    if not funcs:
        raise ResolveError(f"no function matching '{pattern}' in {binary.display} can be "
                           "probed", spec.spec_span, hints=tuple(notes))
    return funcs, notes


def match_usdt(spec: ProbeSpec, binary: BinaryRef) -> list[UsdtProbe]:
    """The USDT probes of `binary` whose provider and name match the set's globs."""
    from planrunner.elf.reader import read_notes
    from planrunner.usdt.probes import group_notes, read_probes

    name, provider = str(spec.probe), spec.provider
    probes = read_probes(binary.path, only=lambda prov, n: fnmatchcase(n, name) and (
        provider is None or fnmatchcase(prov, provider)))
    if not probes:
        keys = group_notes(read_notes(binary.path))
        wanted = f"{provider}:{name}" if provider else name
        raise _no_match(spec, wanted, {f"{p}:{n}" if provider else n for p, n in keys},
                        binary, f"`planrunner list {binary.display}` shows its "
                        f"{len(keys)} probes" if keys else
                        f"{binary.display} has no USDT probes (no .note.stapsdt section)")
    return sorted(probes, key=lambda p: (p.provider, p.name))


def usdt_func(probe: UsdtProbe, spec: ProbeSpec) -> str:
    """`func` of a USDT set's probe: its name, with its provider when the set's
    provider is a glob or left out (two providers may share a probe name)."""
    from planrunner.plan.model import is_glob

    if spec.provider is not None and not is_glob(spec.provider):
        return probe.name
    return probe.qualified


def match_tracepoints(spec: ProbeSpec) -> list[tuple[str, str]]:
    """(category, event) of every tracepoint matching the set's globs, sorted."""
    from planrunner import tracefs

    root = tracefs.find_root()
    if root is None:
        raise ResolveError("tracefs is not mounted: tracepoint sets are matched against "
                           "its events", spec.spec_span,
                           hints=("mount -t tracefs nodev /sys/kernel/tracing",))
    category, event = str(spec.category), str(spec.event)
    every = tracefs.event_names(root)
    found = [(c, e) for c, e in every if fnmatchcase(c, category) and fnmatchcase(e, event)]
    if not found:
        raise _no_match(spec, f"{category}:{event}", {f"{c}:{e}" for c, e in every},
                        None, "`planrunner list --tracepoints 'CATEGORY:*'` lists events")
    return found


def tracepoint_func(category: str, event: str, spec: ProbeSpec) -> str:
    """`func` of a tracepoint: its event, with its category when the set's is a glob."""
    from planrunner.plan.model import is_glob

    return f"{category}:{event}" if spec.category and is_glob(spec.category) else event


def _no_match(spec: ProbeSpec, pattern: str, names: set[str], binary: BinaryRef | None,
              hint: str) -> ResolveError:
    where = f" in {binary.display}" if binary is not None else " on this kernel"
    hints = []
    folded = sorted(n for n in names if fnmatchcase(n.lower(), pattern.lower()))
    if folded:  # the glob is case-sensitive
        hints.append(f"did you mean '{folded[0]}'? (matching is case-sensitive)")
    else:
        stem = pattern.replace("*", "").replace("?", "")
        guess = did_you_mean(stem, [n for n in names if len(n) <= 2 * len(stem) + 4])
        if guess:
            hints.append(f"did you mean '{guess}'?")
    hints.append(hint)
    return ResolveError(f"no {_what(spec)} matches '{pattern}'{where}", spec.spec_span,
                        hints=tuple(hints))


def _what(spec: ProbeSpec) -> str:
    return kind(spec.kind).set_of
