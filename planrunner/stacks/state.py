"""The walk's state between unwind steps, shared by the CFI and frame-pointer steps.

`UnwindState(pc, regs, first)`: regs maps DWARF register numbers (see capture.ArchSpec)
to known values; `first` marks the frame at the probe, whose pc is exact (later pcs are
return addresses). `Stop(reason)` ends a walk; `Unwound` is its result.
"""

from __future__ import annotations

from dataclasses import dataclass

# Stop reasons: "end" (outermost frame reached: the normal end), "depth" (max frames),
# "no-module" (pc in no mapped file), "no-cfi", "cfa-expression", "ra-expression",
# "unknown-register", "outside-window" (a saved value lies beyond the copied stack),
# "no-return-address", "loop" (the stack did not grow towards the caller), "bad-fp".
STOP_REASONS = ("end", "depth", "no-module", "no-cfi", "cfa-expression", "ra-expression",
                "unknown-register", "outside-window", "no-return-address", "loop", "bad-fp")


@dataclass(frozen=True, slots=True)
class UnwindState:
    pc: int
    regs: dict[int, int]
    first: bool = False


@dataclass(frozen=True, slots=True)
class Stop:
    reason: str


@dataclass(frozen=True, slots=True)
class Unwound:
    """addrs[0] is the pc at the probe; the others are return addresses, innermost first."""

    addrs: tuple[int, ...]
    stop: str
