"""One frame-pointer unwind step over the copied stack window.

x86-64 (push %rbp; mov %rsp,%rbp) and aarch64 (stp x29, x30, [sp, #-N]!; mov x29, sp)
lay out a frame record alike: at fp, the caller's fp; at fp + word, the return address.
`fp_step(state, window, arch)` follows one record: the caller's sp is fp + 2 words.
A frame pointer outside the window, misaligned, or not above the current sp ends the
walk ("bad-fp"): in code built without frame pointers the register holds anything.
At the probe's own frame the record is only right once the prologue has run; a probe on
a function's first instruction skips its caller (as bpf_get_stack does): the walker in
unwind.py uses CFI for that frame when it can.
"""

from __future__ import annotations

from planrunner.stacks.capture import ArchSpec, StackWindow
from planrunner.stacks.state import Stop, UnwindState


def fp_step(state: UnwindState, window: StackWindow, arch: ArchSpec) -> UnwindState | Stop:
    fp = state.regs.get(arch.fp)
    sp = state.regs.get(arch.sp, window.base)
    if fp is None or fp % arch.word or fp < sp:
        return Stop("bad-fp")
    caller_fp = window.read_word(fp)
    ra = window.read_word(fp + arch.word)
    if caller_fp is None or ra is None:
        return Stop("outside-window")
    ra &= arch.ra_mask
    if ra == 0:
        return Stop("end")
    regs = {arch.sp: fp + 2 * arch.word, arch.fp: caller_fp}
    return UnwindState(pc=ra, regs=regs, first=False)
