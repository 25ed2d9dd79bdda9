"""One call from a captured user stack to Frames, for the record reader.

`frames_from_capture(capture, registry, symbolizer, mode, max_frames)` unwinds a DWARF-
mode capture (unwind.py) and symbolizes it; `frames_from_addresses(pid, start_time,
addrs, registry, symbolizer)` symbolizes a frame-pointer-mode stack (bpf_get_stack's
addresses, ip first). Both read the process's maps only through `registry` (snapshot per
pid and start time), so a reused pid is never read.
"""

from __future__ import annotations

from collections.abc import Sequence

from planrunner.stacks.capture import UserStackCapture
from planrunner.stacks.frame import Frame
from planrunner.stacks.modules import ProcessRegistry
from planrunner.stacks.symbolize import Symbolizer
from planrunner.stacks.unwind import DEFAULT_MAX_FRAMES, JitLookup, unwind


def frames_from_capture(capture: UserStackCapture, registry: ProcessRegistry,
                        symbolizer: Symbolizer, mode: str = "auto",
                        max_frames: int = DEFAULT_MAX_FRAMES,
                        jit: JitLookup | None = None) -> list[Frame]:
    """`jit`: the process's perf map (perfmap.BoundPerfMap), for JIT frames."""
    process = registry.bind(capture.pid, capture.start_time)
    result = unwind(capture, process, mode, max_frames, jit)
    return symbolizer.symbolize(result.addrs, process, jit=jit)


def frames_from_addresses(pid: int, start_time: int, addrs: Sequence[int],
                          registry: ProcessRegistry, symbolizer: Symbolizer,
                          max_frames: int = DEFAULT_MAX_FRAMES) -> list[Frame]:
    live = [a for a in addrs[:max_frames] if a]  # bpf_get_stack pads with zeros
    return symbolizer.symbolize(live, registry.bind(pid, start_time))
