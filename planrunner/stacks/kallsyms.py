"""Kernel addresses -> Frames, from /proc/kallsyms.

`KernelSymbols.parse(text)` keeps the text symbols (types t/T/w/W), sorted by address
for bisect (their lines, parsed when looked up); `KernelSymbols.load()` reads
/proc/kallsyms once. A symbol runs to the next one (kallsyms gives no sizes); addresses
before the first or after the last are unknown. When kptr_restrict hides the addresses
(all zero: not root) the table is empty and `usable` is False. Module symbols
("name [ext4]") report module "[ext4]", core kernel ones "[kernel.kallsyms]" (perf's
spelling). `kernel_build_id(module)`: the running kernel's or a module's build-id, from
their notes in /sys (for pprof's mappings).
"""

from __future__ import annotations

import bisect
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from operator import itemgetter

from planrunner.stacks.frame import Frame

KERNEL = "[kernel.kallsyms]"


@dataclass(frozen=True, slots=True)
class KernelSymbols:
    """The text symbols' lines of kallsyms, sorted by address, each parsed only when an
    address falls in it: reading, splitting and sorting 121k lines into Python values
    cost a profile ~0.2 s of CPU every run (issue 28 item 5); kept as bytes, found by a
    regular expression and sorted by their fixed-width address, ~0.04 s."""

    lines: tuple[bytes, ...]
    width: int  # hex digits of every address (kallsyms prints them zero-padded)

    @property
    def usable(self) -> bool:
        return bool(self.lines)

    @classmethod
    def parse(cls, text: str | bytes) -> KernelSymbols:
        data = text.encode() if isinstance(text, str) else text
        first = re.match(rb"\s*([0-9a-fA-F]+)\s", data)
        if first is None:
            return cls((), 0)
        width = len(first.group(1))
        lines = re.findall(rb"^[0-9a-fA-F]{%d}[ \t]+[tTwW][ \t]+\S.*$" % width, data, re.M)
        key = itemgetter(slice(0, width))
        lines.sort(key=key)  # stable: of equal addresses, the last in kallsyms wins
        zero = bisect.bisect_right(lines, b"0" * width, key=key)  # kptr_restrict: hidden
        return cls(tuple(lines[zero:]), width)

    @classmethod
    def load(cls, path: str = "/proc/kallsyms") -> KernelSymbols:
        with open(path, "rb") as fh:
            return cls.parse(fh.read())

    def frame(self, addr: int) -> Frame:
        lines, width = self.lines, self.width
        i = bisect.bisect_right(lines, b"%0*x" % (width, addr),
                                key=itemgetter(slice(0, width))) - 1
        if i < 0:
            return Frame(addr, None, addr, KERNEL)
        parts = lines[i].split()
        start = int(parts[0], 16)
        if i == len(lines) - 1 and addr != start:
            return Frame(addr, None, addr, KERNEL)
        module = f"[{parts[3].strip(b'[]').decode(errors='replace')}]" if len(parts) > 3 \
            else KERNEL
        return Frame(addr, parts[2].decode(errors="replace"), addr - start, module)

    def symbolize(self, addrs: Sequence[int]) -> list[Frame]:
        return [self.frame(a) for a in addrs]


def kernel_build_id(module: str = KERNEL) -> str:
    """The GNU build-id (hex) of the running kernel ("[kernel.kallsyms]",
    /sys/kernel/notes) or of a loaded module ("[ext4]",
    /sys/module/ext4/notes/.note.gnu.build-id); "" when it cannot be read."""
    name = module.strip("[]")
    path = ("/sys/kernel/notes" if module == KERNEL
            else f"/sys/module/{name}/notes/.note.gnu.build-id")
    if "/" in name:
        return ""
    try:
        with open(path, "rb") as fh:
            return build_id_from_notes(fh.read())
    except OSError:
        return ""


def build_id_from_notes(data: bytes) -> str:
    """NT_GNU_BUILD_ID's descriptor from raw ELF notes (Elf_Nhdr: namesz, descsz, type
    in the machine's byte order, then name and descriptor, each padded to 4 bytes), as
    hex; "" when absent."""
    pos = 0
    while pos + 12 <= len(data):
        namesz, descsz, kind = (int.from_bytes(data[pos + i:pos + i + 4], sys.byteorder)
                                for i in (0, 4, 8))
        name_at = pos + 12
        desc_at = name_at + (namesz + 3) // 4 * 4
        if desc_at + descsz > len(data):
            return ""
        if kind == 3 and data[name_at:name_at + namesz].rstrip(b"\0") == b"GNU":
            return data[desc_at:desc_at + descsz].hex()
        pos = desc_at + (descsz + 3) // 4 * 4
    return ""
