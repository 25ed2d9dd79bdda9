"""One symbolized stack frame, the unit every output format is made of.

`Frame(address, symbol, offset, module)`: `symbol` is the demangled function name or
None; `offset` is address - symbol start when the symbol is known, else the link-time
address inside the module (what addr2line or a later symbolization takes), else the
address itself; `module` is the file's path ("" when the address is in no file-backed
mapping, "[kernel.kallsyms]" or "[module]" for kernel frames).

Two frames are equal when they name the same place (symbol, offset, module): the
address is not compared, so one stack in two processes (each loaded elsewhere: ASLR)
is one aggregation key, as `UserSymbol` is (records.py). A frame without a module keeps
its address as its offset, so it is never equal to another address.

A CPython frame (`kind="python"`) has the code object's address, the function's
qualified name, its line as offset and `line`, its file as module.
A JIT frame (`kind="jit"`, named from the process's perf map: stacks/perfmap.py) has
the map's name as symbol, the offset from the region's start and module "[jit]".

`mapping` is the process's mapping the address fell in (start, end, file offset, path,
build-id: what pprof's Mapping needs), when the symbolizer knew it; it is not compared,
so one stack in two processes is still one stack.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from planrunner.stacks.modules import Mapping


@dataclass(frozen=True, slots=True)
class Frame:
    """One stack frame: its address and, when known, symbol+offset in module."""

    address: int = field(compare=False)
    symbol: str | None
    offset: int
    module: str
    mapping: Mapping | None = field(default=None, compare=False, repr=False)
    # "native" (machine code), "python" (a CPython frame: symbol is its qualified name,
    # module its file, offset and line its line: stacks/python_frames.py); "jit" is
    # JIT-compiled code named from a perf map
    kind: str = "native"
    line: int | None = field(default=None, compare=False)
