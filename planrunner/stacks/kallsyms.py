"""Kernel addresses -> Frames, from /proc/kallsyms.

`KernelSymbols.parse(text)` keeps the text symbols (types t/T/w/W), sorted by address
for bisect; `KernelSymbols.load()` reads /proc/kallsyms once. A symbol runs to the next
one (kallsyms gives no sizes); addresses before the first or after the last are unknown.
When kptr_restrict hides the addresses (all zero: not root) the table is empty and
`usable` is False. Module symbols ("name [ext4]") report module "[ext4]", core kernel
ones "[kernel.kallsyms]" (perf's spelling). `kernel_build_id(module)`: the running
kernel's or a module's build-id, from their notes in /sys (for pprof's mappings).
"""

from __future__ import annotations

import bisect
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from planrunner.stacks.frame import Frame

KERNEL = "[kernel.kallsyms]"
_TEXT = frozenset("tTwW")


@dataclass(frozen=True, slots=True)
class KernelSymbols:
    starts: tuple[int, ...]
    names: tuple[str, ...]
    modules: tuple[str, ...]

    @property
    def usable(self) -> bool:
        return bool(self.starts)

    @classmethod
    def parse(cls, text: str) -> KernelSymbols:
        rows: list[tuple[int, str, str]] = []
        for line in text.splitlines():
            parts = line.split()
            if len(parts) < 3 or parts[1] not in _TEXT:
                continue
            try:
                addr = int(parts[0], 16)
            except ValueError:
                continue
            if addr == 0:
                continue
            module = f"[{parts[3].strip('[]')}]" if len(parts) > 3 else KERNEL
            rows.append((addr, parts[2], module))
        rows.sort(key=lambda r: r[0])
        return cls(tuple(r[0] for r in rows), tuple(r[1] for r in rows),
                   tuple(r[2] for r in rows))

    @classmethod
    def load(cls, path: str = "/proc/kallsyms") -> KernelSymbols:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return cls.parse(fh.read())

    def frame(self, addr: int) -> Frame:
        i = bisect.bisect_right(self.starts, addr) - 1
        if i < 0 or i == len(self.starts) - 1 and addr != self.starts[i]:
            return Frame(addr, None, addr, KERNEL)
        return Frame(addr, self.names[i], addr - self.starts[i], self.modules[i])

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
