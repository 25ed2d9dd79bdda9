"""What the BPF side hands to user space for one stack, as plain values.

`ArchSpec` names the DWARF register numbers an unwinder needs (X86_64, AARCH64);
`UserRegs` are the registers at the probe; `StackWindow` is the copied user stack, read
word by word (an address outside the copy reads as None: the unwinder stops there);
`UserStackCapture` is one event's DWARF-mode capture; `parse_ustack_record(raw, arch)`
unpacks the record layout proposed in planrunner/stacks/__init__.py.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from planrunner.stacks.python_frames import PythonSection, parse_section, section_size


@dataclass(frozen=True, slots=True)
class ArchSpec:
    name: str
    machine: str  # ELF e_machine name, as planrunner.elf.reader reports it
    sp: int  # DWARF register numbers
    fp: int
    ra: int  # the usual return-address column (a CIE may name another)
    lr: int | None  # a link register (aarch64 x30), None where calls push the return address
    word: int = 8
    little_endian: bool = True
    # bits of a saved return address that are the address (aarch64: pointer
    # authentication, -mbranch-protection, signs x30 in its top bits; Linux user space
    # addresses have 48 bits)
    ra_mask: int = (1 << 64) - 1


X86_64 = ArchSpec("x86_64", "EM_X86_64", sp=7, fp=6, ra=16, lr=None)
AARCH64 = ArchSpec("aarch64", "EM_AARCH64", sp=31, fp=29, ra=30, lr=30,
                   ra_mask=(1 << 48) - 1)
ARCHES = {a.name: a for a in (X86_64, AARCH64)}


@dataclass(frozen=True, slots=True)
class UserRegs:
    """Registers at the probe: x86-64 rip, rsp, rbp (lr None); aarch64 pc, sp, x29, x30."""

    pc: int
    sp: int
    fp: int
    lr: int | None = None


@dataclass(frozen=True, slots=True)
class StackWindow:
    """`data` is a copy of user memory from `base` (the sp at the probe) upwards."""

    base: int
    data: bytes
    word: int = 8
    little_endian: bool = True

    @property
    def end(self) -> int:
        return self.base + len(self.data)

    def contains(self, addr: int, size: int | None = None) -> bool:
        return self.base <= addr and addr + (size or self.word) <= self.end

    def read_word(self, addr: int) -> int | None:
        """The word at `addr`, or None when any byte of it is outside the copy."""
        at = addr - self.base  # `contains`, inline: ~5 reads a frame of every profile
        if at < 0 or at + self.word > len(self.data):
            return None
        return int.from_bytes(self.data[at:at + self.word],
                              "little" if self.little_endian else "big")


@dataclass(frozen=True, slots=True)
class UserStackCapture:
    """One event's user stack in DWARF mode: process identity, registers, stack copy."""

    pid: int  # tgid
    start_time: int  # clock ticks since boot, as field 22 of /proc/PID/stat (the reader's)
    arch: ArchSpec
    regs: UserRegs
    window: StackWindow
    time: int = 0  # CLOCK_MONOTONIC ns of the event (bpf_ktime_get_ns); 0: unknown
    python: PythonSection | None = None  # CPython frames read at the event, if kept


# struct pr_ustack { u32 pid; u32 len; u64 time; u64 regs[4]; u8 data[]; }
_HEAD = struct.Struct("<IIQ4Q")


def parse_ustack_record(raw: bytes | memoryview, arch: ArchSpec = X86_64,
                        python: int = 0) -> UserStackCapture:
    """Unpack `struct pr_ustack` (see the package docstring), whose Python section holds
    `python` frames (0: it has none; render/pyframes.py). `len` beyond the bytes
    present is clamped: a short copy is still unwound as far as it goes."""
    pid, length, time, r0, r1, r2, r3 = _HEAD.unpack_from(raw, 0)
    section = parse_section(raw, _HEAD.size, python) if python else None
    at = _HEAD.size + section_size(python)
    data = bytes(raw[at:at + length])
    regs = UserRegs(pc=r0, sp=r1, fp=r2, lr=r3 if arch.lr is not None else None)
    return UserStackCapture(pid, 0, arch, regs,
                            StackWindow(r1, data, arch.word, arch.little_endian), time,
                            section)


def boottime_ns_to_ticks(ns: int, clk_tck: int | None = None) -> int:
    """task->start_boottime (ns) -> the clock ticks /proc/PID/stat shows."""
    import os
    tck = clk_tck or os.sysconf("SC_CLK_TCK")
    return ns // (1_000_000_000 // tck)
