"""Walk a captured user stack: `unwind(capture, modules, mode, max_frames)` -> Unwound.

mode "dwarf": every frame by CFI (unwind_dwarf.dwarf_step); "fp": every frame by the
frame-pointer chain (unwind_fp.fp_step); "auto": per frame, the frame-pointer step where
the frame's module has frame pointers (fp_detect.has_frame_pointers) and CFI elsewhere,
and CFI at the probe's own frame whenever it has some (the probe may sit before the
prologue); when one step cannot go on the other is tried (the fp chain ends at _start,
whose CFI marks the outermost frame; a module without CFI may keep frame pointers).
Mixing is sound because both steps yield the caller's pc, sp and fp.
JIT code (unwind_jit.py), in every mode but "fp": a frame in anonymous executable
memory, or in no known mapping but named by the process's perf map (`jit`, anything
with `find(addr) -> JitSymbol | None`: perfmap.BoundPerfMap), is walked by its frame
pointer (a CPython perf trampoline by its fixed two-word step), and so is a frame of a
file the perf map names where the file has no CFI for it (V8's builtins, in node's
text); the walk then goes on with CFI in native code.
`modules` is anything with `find(addr) -> Mapping | None` (ProcessModules, or a
registry bound to one process). The walk stops cleanly at the outermost frame, at the
first address outside the stack copy, or after `max_frames` addresses (ustack(N)).
"""

from __future__ import annotations

from typing import Protocol

from planrunner.stacks.capture import ArchSpec, StackWindow, UserStackCapture
from planrunner.stacks.fp_detect import has_frame_pointers
from planrunner.stacks.modules import Mapping, ProcessModules
from planrunner.stacks.perfmap import JitSymbol
from planrunner.stacks.state import Stop, UnwindState, Unwound
from planrunner.stacks.unwind_dwarf import dwarf_step
from planrunner.stacks.unwind_fp import fp_step
from planrunner.stacks.unwind_jit import is_jit_region, jit_step
from planrunner.stacks.walk_memo import WalkMemo

MODES = ("auto", "fp", "dwarf")
NO_CFI = ("no-cfi", "no-module")  # a file's frame the perf map may name instead
DEFAULT_MAX_FRAMES = 64


class MappingLookup(Protocol):
    def find(self, addr: int) -> Mapping | None: ...


class JitLookup(Protocol):
    def find(self, addr: int) -> JitSymbol | None: ...


def unwind(capture: UserStackCapture, modules: MappingLookup, mode: str = "dwarf",
           max_frames: int = DEFAULT_MAX_FRAMES, jit: JitLookup | None = None,
           memo: WalkMemo | None = None) -> Unwound:
    """`memo`: walks remembered (walk_memo.py): from the probe's caller on, a walk
    equal in everything it read to an earlier one is not taken again."""
    if mode not in MODES:
        raise ValueError(f"unknown unwind mode {mode!r}: one of {', '.join(MODES)}")
    arch, r = capture.arch, capture.regs
    regs = {arch.sp: r.sp, arch.fp: r.fp}
    if arch.lr is not None and r.lr is not None:
        regs[arch.lr] = r.lr
    state = UnwindState(pc=r.pc, regs=regs, first=True)
    return unwind_from(state, modules, mode, capture.window, arch, max_frames, jit, memo)[0]


def unwind_from(state: UnwindState, modules: MappingLookup, mode: str, window: StackWindow,
                arch: ArchSpec, max_frames: int, jit: JitLookup | None,
                memo: WalkMemo | None = None) -> tuple[Unwound, bool]:
    """The walk from the probe's own state (`unwind`'s; walk_template.py hands it
    watched registers and window), and whether it asked the JIT lookup anything. The
    probe's frame is always stepped; from its caller on, `memo` may give the walk."""
    if max_frames <= 1:
        return Unwound((state.pc,), "depth"), False
    step, asked_jit = _step(state, modules, mode, window, arch, jit)
    if isinstance(step, Stop):
        return Unwound((state.pc,), step.reason), asked_jit
    if memo is not None and isinstance(modules, ProcessModules):
        rest, stop, asked = memo.rest(step, modules, window, arch, mode, max_frames - 1,
                                      lambda s, w: walk(s, modules, mode, w, arch,
                                                        max_frames - 1, jit))
    else:
        rest, stop, asked = walk(step, modules, mode, window, arch, max_frames - 1, jit)
    return Unwound((state.pc, *rest), stop), asked_jit or asked


def walk(state: UnwindState, modules: MappingLookup, mode: str, window: StackWindow,
         arch: ArchSpec, max_frames: int,
         jit: JitLookup | None) -> tuple[tuple[int, ...], str, bool]:
    """The addresses from `state` on (its pc first), why the walk stopped, and whether it
    asked the JIT lookup anything (a perf map changes as it grows: walk_memo.py keeps
    no such walk)."""
    addrs = [state.pc]
    asked_jit = False
    while True:
        if len(addrs) >= max_frames:
            return tuple(addrs), "depth", asked_jit
        step, by_jit = _step(state, modules, mode, window, arch, jit)
        asked_jit = asked_jit or by_jit
        if isinstance(step, Stop):
            return tuple(addrs), step.reason, asked_jit
        state = step
        addrs.append(state.pc)


def _step(state: UnwindState, modules: MappingLookup, mode: str, window: StackWindow,
          arch: ArchSpec, jit: JitLookup | None) -> tuple[UnwindState | Stop, bool]:
    """One step by the mode's rules (see the module docstring); and whether the JIT
    lookup was asked or its step taken."""
    lookup = state.pc if state.first else state.pc - 1
    mapping = modules.find(lookup)
    by_jit = False
    if mode == "fp":
        step: UnwindState | Stop = fp_step(state, window, arch)
    elif is_jit_region(mapping):
        step, by_jit = jit_step(state, window, arch, jit.find(lookup) if jit else None), True
    elif mapping is None:
        symbol = jit.find(lookup) if jit else None
        if symbol is None:
            return Stop("no-module"), jit is not None
        step, by_jit = jit_step(state, window, arch, symbol), True
    elif mode == "dwarf":
        step = dwarf_step(state, mapping, window, arch)
    else:
        step = _auto_step(state, mapping, window, arch)
    if isinstance(step, Stop) and step.reason in NO_CFI and jit is not None:
        by_jit = True
        if (symbol := jit.find(lookup)) is not None:
            step = jit_step(state, window, arch, symbol)  # JIT code in a file
    if by_jit and not isinstance(step, Stop) and modules.find(step.pc - 1) is None \
            and (jit is None or jit.find(step.pc - 1) is None):
        step = Stop("bad-fp")  # JIT code without frame pointers: rbp held anything
    return step, by_jit


def _auto_step(state: UnwindState, mapping: Mapping, window: StackWindow,
               arch: ArchSpec) -> UnwindState | Stop:
    """The fp step in modules with frame pointers (except at the probe's frame), CFI
    elsewhere; each falls back on the other when it cannot go on (the fp chain ends at
    _start, whose CFI marks the outermost frame; a module without CFI may keep fp)."""
    fp_first = not state.first and has_frame_pointers(mapping.source, mapping.build_id)
    first = (fp_step(state, window, arch) if fp_first
             else dwarf_step(state, mapping, window, arch))
    if not isinstance(first, Stop) or first.reason == "end":
        return first
    second = (dwarf_step(state, mapping, window, arch) if fp_first
              else fp_step(state, window, arch))
    if isinstance(second, Stop) and not fp_first:
        return first  # report why CFI stopped, not why the fallback did
    return second
