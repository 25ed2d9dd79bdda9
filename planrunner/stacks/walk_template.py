"""A walk's template (issue 28 item 5): what the BPF side must find equal in a later
sample for that sample's native stack to be this walk's, so that it sends the sample's
Python frames alone (a few hundred bytes) instead of a new 16 KiB copy to unwind.

`template_walk(capture, modules, mode, max_frames, jit)` walks the whole stack, from the
probe's own frame, with every register and stack word watched (walk_memo.py's `_Watched`
ints note themselves when they take part in arithmetic, a comparison or an index). The
walk's result is a function of what it was handed and used, so a sample of the same
process with the same pc, sp and copy length (the same window: the same reads fall
inside it and outside it), the same frame pointer where the walk used it, and the same
word at every offset the walk used, walks the same addresses: `WalkTemplate` lists
those. The process's maps are the other input: runtime/stack_templates.py checks them
in user space, where they are known.

No template is made (None) for a walk that asked the JIT lookup (a perf map grows), one
that used a register BPF does not capture, or a word not 8-byte aligned from sp. (How
many words the BPF side compares is runtime/stack_templates.py's to check.)

The pc takes part in the first step only through the CFI row it falls in (copies are
walked in dwarf and auto modes, and both take the probe's frame by its CFI): `first_span`
gives the pcs of that row, in its mapping, where the step is the same for the same
words, so the template holds for a sample at any of them, its walk's first address
being that sample's pc (`at_pc`). A row whose CFA is not sp plus a positive offset (the
step's loop check compares the pc) gives none.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

from planrunner.errors import ResolveError
from planrunner.stacks.capture import ArchSpec, StackWindow, UserStackCapture
from planrunner.stacks.cfi import module_cfi
from planrunner.stacks.modules import ProcessModules
from planrunner.stacks.state import UnwindState, Unwound
from planrunner.stacks.unwind import JitLookup, MappingLookup, unwind_from
from planrunner.stacks.walk_memo import WalkMemo, _Reads, _Watched, _WatchedWindow


@dataclass(frozen=True, slots=True)
class WalkTemplate:
    """pid, pc, sp and the copy's length are its key; `fp` is None when the walk did not
    use the frame pointer; `words` are (offset from sp, word) pairs."""

    pid: int
    pc: int
    sp: int
    length: int
    fp: int | None
    words: tuple[tuple[int, int], ...]


def template_walk(capture: UserStackCapture, modules: MappingLookup, mode: str,
                  max_frames: int, jit: JitLookup | None, memo: WalkMemo | None = None
                  ) -> tuple[Unwound, WalkTemplate | None]:
    """The walk unwind.unwind gives, and its template (see the module docstring).

    With `memo`, the walk from the probe's caller on is the memo's (walk_memo.py): on a
    hit, its comparisons note what that walk used (each value it compares is watched
    here, registers carrying where the first step got them), so the template holds
    the first step's words and those; on a miss, the memo's own watching of the
    caller's state notes all of it (a template stricter than needed, never looser)."""
    arch, r = capture.arch, capture.regs
    seen = _Reads()
    regs: dict[int, int] = {arch.sp: r.sp, arch.fp: _Watched(r.fp, seen, arch.fp, None)}
    if arch.lr is not None and r.lr is not None:
        regs[arch.lr] = _Watched(r.lr, seen, arch.lr, None)
    window = cast(StackWindow, _WatchedWindow(capture.window, seen))
    walked, asked_jit = unwind_from(UnwindState(pc=r.pc, regs=regs, first=True), modules,
                                    mode, window, arch, max_frames, jit, memo)
    # (int() notes each address read from the stack as used: it is the walk's output)
    result = Unwound(tuple(int(a) for a in walked.addrs), walked.stop)
    if asked_jit or set(seen.regs) - {arch.fp}:
        return result, None
    words = []
    for addr, value in sorted(seen.words.items()):
        off = addr - r.sp
        if off % 8 or off < 0:
            return result, None
        words.append((off, value))
    return result, WalkTemplate(capture.pid, r.pc, r.sp, len(capture.window.data),
                                seen.regs.get(arch.fp), tuple(words))


def holds(template: WalkTemplate, capture: UserStackCapture) -> bool:
    """Whether the BPF side's match (render/stacks.py pr_utmpl_match) takes `capture` for
    `template`: its key, its frame pointer where used, and every word (spelled out here
    for the tests, which check that a capture it takes walks as the template did)."""
    r, data = capture.regs, capture.window.data
    if (capture.pid, len(data), r.pc, r.sp) != \
            (template.pid, template.length, template.pc, template.sp):
        return False
    if template.fp is not None and r.fp != template.fp:
        return False
    return all(int.from_bytes(data[off:off + 8], "little") == word
               for off, word in template.words)


def first_span(pc: int, modules: ProcessModules, arch: ArchSpec) -> tuple[int, int] | None:
    """The pcs [lo, hi) around `pc` whose first step is the same as `pc`'s for the same
    registers and words (see the module docstring), or None."""
    mapping = modules.find(pc)
    vaddr = mapping.to_vaddr(pc) if mapping is not None else None
    if mapping is None or vaddr is None:
        return None
    try:
        span = module_cfi(mapping.source, mapping.build_id).row_span(vaddr)
    except ResolveError:
        return None
    if span is None:
        return None
    lo, hi, row = span
    if row.cfa_reg != arch.sp or row.cfa_offset <= 0:
        return None
    return max(pc - (vaddr - lo), mapping.start), min(pc + (hi - vaddr), mapping.end)


def at_pc(walk: Unwound, pc: int) -> Unwound:
    """A template's walk for a sample at `pc` of its span."""
    return walk if walk.addrs[0] == pc else Unwound((pc, *walk.addrs[1:]), walk.stop)
