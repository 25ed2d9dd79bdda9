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
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Frame:
    """One stack frame: its address and, when known, symbol+offset in module."""

    address: int = field(compare=False)
    symbol: str | None
    offset: int
    module: str
