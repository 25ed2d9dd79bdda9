"""Does a module keep frame pointers? `has_frame_pointers(path)` for `unwind: auto`.

No ELF flag records -fno-omit-frame-pointer, so this judges from the module's own CFI,
which the compiler writes from the code it generated. It samples up to SAMPLE FDEs
(evenly over `.eh_frame`) and sorts each function by its decoded rows:
- "framed": some row defines the CFA by the frame-pointer register (x86-64 rbp, aarch64
  x29): the function set up a frame record (`push %rbp; mov %rsp,%rbp` then
  `DW_CFA_def_cfa_register r6`);
- "unframed": it moves sp or saves registers (more than one row) yet keeps the CFA on sp;
- neutral: one row (a leaf that touches nothing: it cannot break an fp chain), or a CFA
  given by an expression (PLT stubs).
With -fno-omit-frame-pointer every function with a frame is "framed"; with
-fomit-frame-pointer (Debian's default at -O2) only those needing alloca, VLAs or stack
realignment are (libc 6.x: ~1%). The verdict is framed >= THRESHOLD of the non-neutral
functions. The prologue bytes were tried first and rejected: gcc -O2 schedules the
`mov %rsp,%rbp` after other instructions (libfx.so's lib_outer: push %rbp; mov %rdi,%rax;
lea; mov %rsp,%rbp), so a byte pattern misjudges -O2 frame-pointer code.
A module without CFI is judged as having none (`sampled == 0`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from planrunner.elf.reader import open_binary
from planrunner.errors import ResolveError
from planrunner.stacks.capture import ARCHES

SAMPLE = 64
THRESHOLD = 0.5


@dataclass(frozen=True, slots=True)
class FramePointerJudgement:
    sampled: int  # non-neutral functions looked at
    framed: int

    @property
    def has_frame_pointers(self) -> bool:
        return self.sampled > 0 and self.framed >= THRESHOLD * self.sampled


_CACHE: dict[object, FramePointerJudgement] = {}


def has_frame_pointers(path: str, build_id: str | None = None) -> bool:
    return judge(path, build_id).has_frame_pointers


def judge(path: str, build_id: str | None = None) -> FramePointerJudgement:
    """Cached per build-id (else path, dev, inode, mtime). A file that cannot be read is
    judged as having none."""
    if build_id is not None:  # asked per frame (`unwind: auto`): no stat, no open
        known = _CACHE.get(("build-id", build_id))
        if known is not None:
            return known
    try:
        info = open_binary(path)
        st = os.stat(path)
    except (ResolveError, OSError):
        return FramePointerJudgement(0, 0)
    ident = build_id or info.build_id
    key: object = ("build-id", ident) if ident else (path, st.st_dev, st.st_ino,
                                                     st.st_mtime_ns)
    verdict = _CACHE.get(key)
    if verdict is None:
        arch = next((a for a in ARCHES.values() if a.machine == info.machine), None)
        verdict = _CACHE[key] = (_judge(path, arch.fp) if arch is not None
                                 else FramePointerJudgement(0, 0))
    return verdict


def _judge(path: str, fp_reg: int) -> FramePointerJudgement:
    from planrunner.stacks.cfi import module_cfi

    try:
        cfi = module_cfi(path)
    except ResolveError:
        return FramePointerJudgement(0, 0)
    starts = cfi.function_starts
    step = max(1, len(starts) // SAMPLE)
    sampled = framed = 0
    for start in starts[::step][:SAMPLE]:
        rows = cfi.rows_of(start)
        if len(rows) < 2 or any(r.cfa_reg is None for r in rows):
            continue
        sampled += 1
        framed += any(r.cfa_reg == fp_reg for r in rows)
    return FramePointerJudgement(sampled, framed)
