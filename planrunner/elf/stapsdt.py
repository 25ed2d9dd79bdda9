"""SystemTap SDT (`.note.stapsdt`) note decoding. Pure: bytes in, records out.

Format (SystemTap wiki, "UserSpaceProbeImplementation", section "Version 3"; also the
comments in <sys/sdt.h>): each probe is one ELF note with owner "stapsdt" and type 3
(NT_STAPSDT). Its descriptor is

    pc        address-sized word: the probe's link-time address (the NOP)
    base      address-sized word: link-time address of `.stapsdt.base` (prelink check)
    semaphore address-sized word: address of the `unsigned short` semaphore, 0 when none
    provider  NUL-terminated string
    name      NUL-terminated string
    args      NUL-terminated string: `[-]SIZE[f]@OPERAND` separated by spaces (may be empty)

Words are 4 bytes in ELFCLASS32 and 8 in ELFCLASS64, in the ELF's own byte order.
pyelftools labels these notes NT_GNU_BUILD_ID (type 3) and keeps the payload raw, so notes
are recognised by owner name, never by type alone.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass

STAPSDT_OWNER = "stapsdt"
NT_STAPSDT = 3
ELFCLASS32 = 1
ELFCLASS64 = 2


@dataclass(frozen=True, slots=True)
class NoteRecord:
    """One decoded stapsdt note. Addresses are as stored, or adjusted by elf/reader.py."""

    pc: int
    base: int
    semaphore: int
    provider: str
    name: str
    args: str


def decode_stapsdt(desc: bytes, elfclass: int, little_endian: bool) -> NoteRecord:
    """Decode one stapsdt note descriptor. Raises ValueError on a malformed payload."""
    if elfclass not in (ELFCLASS32, ELFCLASS64):
        raise ValueError(f"unknown ELF class {elfclass}")
    word = "Q" if elfclass == ELFCLASS64 else "I"
    fmt = ("<" if little_endian else ">") + word * 3
    head = struct.calcsize(fmt)
    if len(desc) < head:
        raise ValueError(f"stapsdt note too short ({len(desc)} bytes, need {head})")
    pc, base, semaphore = struct.unpack_from(fmt, desc, 0)
    strings = desc[head:].split(b"\0")
    # Three terminated strings give at least four pieces; the last is padding.
    if len(strings) < 4:
        raise ValueError("stapsdt note strings are not NUL-terminated")
    provider, name, args = (s.decode("utf-8", "replace") for s in strings[:3])
    if not provider or not name:
        raise ValueError("stapsdt note has an empty provider or probe name")
    return NoteRecord(pc, base, semaphore, provider, name, args)


def iter_notes(data: bytes, little_endian: bool, align: int = 4
               ) -> Iterator[tuple[str, int, bytes]]:
    """Walk an SHT_NOTE section: yield (owner, type, descriptor) for each note.

    Name and descriptor are each padded to `align` (4 for stapsdt notes in either class;
    8 only for sections aligned so, such as .note.gnu.property in ELFCLASS64).
    """
    fmt = "<III" if little_endian else ">III"
    pos, end = 0, len(data)
    while pos + 12 <= end:
        namesz, descsz, ntype = struct.unpack_from(fmt, data, pos)
        pos += 12
        name_end = pos + namesz
        desc_start = _align_up(name_end, align)
        desc_end = desc_start + descsz
        if desc_end > end:
            raise ValueError(f"note at offset {pos - 12} runs past the end of its section")
        owner = data[pos:name_end].rstrip(b"\0").decode("ascii", "replace")
        yield owner, ntype, data[desc_start:desc_end]
        pos = _align_up(desc_end, align)


def _align_up(value: int, align: int) -> int:
    return (value + align - 1) & ~(align - 1)
