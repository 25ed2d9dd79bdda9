"""One DWARF CFI unwind step, as `perf --call-graph dwarf` takes it.

`dwarf_step(state, mapping, window, arch)` -> the caller's `UnwindState`, or a `Stop`
saying why not. The row in force at the pc (for a return address, at pc - 1: the call
instruction, which matters after a call to a noreturn function) gives the CFA
(register + offset; an expression is refused) and the rules that restore registers from
memory at CFA + offset. Memory is read only from the copied stack window: a rule that
points outside it ends the walk. The return address comes from the CIE's
return-address column; an undefined one marks the outermost frame (_start, clone).
"""

from __future__ import annotations

from planrunner.errors import ResolveError
from planrunner.stacks.capture import ArchSpec, StackWindow
from planrunner.stacks.cfi import module_cfi
from planrunner.stacks.modules import Mapping
from planrunner.stacks.state import Stop, UnwindState


def dwarf_step(state: UnwindState, mapping: Mapping, window: StackWindow,
               arch: ArchSpec) -> UnwindState | Stop:
    lookup = state.pc if state.first else state.pc - 1
    vaddr = mapping.to_vaddr(lookup)
    if vaddr is None:
        return Stop("no-module")
    try:
        row = module_cfi(mapping.source, mapping.build_id).row_at(vaddr)
    except ResolveError:
        return Stop("no-module")
    if row is None:
        return Stop("no-cfi")
    if row.cfa_reg is None:
        return Stop("cfa-expression")
    base = state.regs.get(row.cfa_reg)
    if base is None:
        return Stop("unknown-register")
    cfa = base + row.cfa_offset

    regs: dict[int, int] = {}
    undefined: set[int] = set()
    for reg, value in state.regs.items():  # no rule: same value (callee-saved)
        if reg not in row.rules and reg != arch.sp:
            regs[reg] = value
    for reg, (kind, arg) in row.rules.items():
        if kind == "OFFSET":
            v = window.read_word(cfa + arg)
            if v is None:
                if reg == row.ra:
                    return Stop("outside-window")
                continue
            regs[reg] = v
        elif kind == "VAL_OFFSET":
            regs[reg] = cfa + arg
        elif kind == "REGISTER":
            if arg in state.regs:
                regs[reg] = state.regs[arg]
        elif kind == "SAME_VALUE":
            if reg in state.regs:
                regs[reg] = state.regs[reg]
        elif kind == "UNDEFINED":
            undefined.add(reg)
        elif reg == row.ra:
            return Stop("ra-expression")

    if row.ra in undefined:
        return Stop("end")
    ra = regs.get(row.ra)
    if ra is None:
        return Stop("no-return-address")
    ra &= arch.ra_mask
    if ra == 0:
        return Stop("end")
    if cfa < state.regs.get(arch.sp, 0) or (cfa == state.regs.get(arch.sp) and ra == state.pc):
        return Stop("loop")
    regs[arch.sp] = cfa
    if arch.lr is not None and arch.lr not in row.rules:
        # a link register with no rule was this frame's return address; the caller's own
        # return address is unknown until a rule restores it
        regs.pop(arch.lr, None)
    return UnwindState(pc=ra, regs=regs, first=False)
