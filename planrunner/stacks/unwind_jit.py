"""One unwind step through JIT code: code in no file, or named by a perf map, has no
CFI, so its frames are walked by their frame pointers (V8, and Java run with
`-XX:+PreserveFramePointer`, keep them), and the walk goes on with CFI in native code
(unwind.py chooses the step per frame; every step yields the caller's pc, sp and fp).

CPython 3.12's perf trampolines (`-X perf`: a stub per code object, named `py::...` in
the map, between the interpreter and `_PyEval_EvalFrameDefault`) are a fixed frame on
x86-64: `sub $8,%rsp; call *%rcx; add $8,%rsp; ret` (3.12; later versions push %rbp
instead of the `sub`). At its return address the caller's return address is the second
word from sp and the caller's sp two words up: the fixed two-word step; %rbp is the
caller's, unless the stub pushed it (then it equals sp and the saved one is at sp).
"""

from __future__ import annotations

from planrunner.stacks.capture import X86_64, ArchSpec, StackWindow
from planrunner.stacks.modules import Mapping
from planrunner.stacks.perfmap import JitSymbol
from planrunner.stacks.state import Stop, UnwindState
from planrunner.stacks.unwind_fp import fp_step

PY_TRAMPOLINE = "py::"  # CPython's perf map names: py::QUALNAME:FILE


def is_jit_region(mapping: Mapping | None) -> bool:
    """Executable memory that is no file (anonymous: JIT code, trampolines)."""
    return (mapping is not None and mapping.executable and mapping.bias is None
            and not mapping.file and not mapping.path.startswith("/"))


def jit_step(state: UnwindState, window: StackWindow, arch: ArchSpec,
             symbol: JitSymbol | None) -> UnwindState | Stop:
    if symbol is not None and arch is X86_64 and symbol.name.startswith(PY_TRAMPOLINE):
        return trampoline_step(state, window, arch, symbol)
    return fp_step(state, window, arch)


def trampoline_step(state: UnwindState, window: StackWindow, arch: ArchSpec,
                    symbol: JitSymbol) -> UnwindState | Stop:
    """The fixed step of a CPython perf trampoline (see the module docstring)."""
    sp = state.regs.get(arch.sp)
    fp = state.regs.get(arch.fp)
    if sp is None:
        return Stop("unknown-register")
    # at the stub's first or last instruction (a sample there) the return address is
    # at sp itself; everywhere else (its call's return address) one word up
    at_edge = state.first and state.pc - symbol.start in (0, symbol.size - 1)
    ra_at = sp if at_edge else sp + arch.word
    ra = window.read_word(ra_at)
    if ra is None:
        return Stop("outside-window")
    ra &= arch.ra_mask
    if ra == 0:
        return Stop("end")
    regs = {arch.sp: ra_at + arch.word}
    if fp is not None and fp == sp and not at_edge:  # the stub pushed %rbp: restore it
        saved = window.read_word(sp)
        if saved is None:
            return Stop("outside-window")
        regs[arch.fp] = saved
    elif fp is not None:
        regs[arch.fp] = fp
    return UnwindState(pc=ra, regs=regs, first=False)
