"""Read what tracing needs from an ELF file, and nothing more.

`open_binary(path)` -> BinaryInfo (machine, class, byte order, type, build id, inode);
`read_notes(path)` -> the `.note.stapsdt` records with the `.stapsdt.base` adjustment
applied; `vaddr_to_offset(info_or_path, vaddr)` -> file offset through PT_LOAD headers.

Only the ELF header, the program and section header tables, the section-name string table
and the few sections asked for are read (a 24 MB libjvm.so costs a few kilobytes of I/O).
These fixed-layout tables are unpacked with `struct` rather than pyelftools: importing
pyelftools alone takes ~28 ms, which would make `planrunner list` slower than tplist.
pyelftools is used where it earns its cost: symbol tables (elf/symbols.py).
Results are cached per (path, st_dev, st_ino, st_mtime_ns) for the life of the process.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass

from planrunner import inputs
from planrunner.elf.stapsdt import (
    ELFCLASS32,
    ELFCLASS64,
    NT_STAPSDT,
    STAPSDT_OWNER,
    NoteRecord,
    decode_stapsdt,
    iter_notes,
)
from planrunner.errors import ResolveError

PT_LOAD = 1
PT_NOTE = 4
PF_X = 1
SHT_NOTE = 7
SHN_XINDEX = 0xFFFF
NT_GNU_BUILD_ID = 3

# e_machine -> the name pyelftools and <elf.h> use (the operand registry keys on these).
MACHINES = {
    3: "EM_386", 8: "EM_MIPS", 20: "EM_PPC", 21: "EM_PPC64", 22: "EM_S390", 40: "EM_ARM",
    43: "EM_SPARCV9", 62: "EM_X86_64", 183: "EM_AARCH64", 243: "EM_RISCV", 258: "EM_LOONGARCH",
}
ELF_TYPES = {2: "ET_EXEC", 3: "ET_DYN"}
# e_type values that cannot be traced, named for the error
_UNTRACEABLE_TYPES = {0: "has no file type (ET_NONE)", 1: "an object file (ET_REL)",
                      4: "a core dump (ET_CORE)"}
# os.uname().machine -> the e_machine of the programs the running kernel runs natively
_HOST_MACHINES = {
    "x86_64": "EM_X86_64", "aarch64": "EM_AARCH64", "riscv64": "EM_RISCV",
    "ppc64le": "EM_PPC64", "ppc64": "EM_PPC64", "s390x": "EM_S390", "mips64": "EM_MIPS",
    "loongarch64": "EM_LOONGARCH",
}

# Header layouts after e_ident, and of one program / section header, per class.
_EHDR = {ELFCLASS32: "HHIIIIIHHHHHH", ELFCLASS64: "HHIQQQIHHHHHH"}
_PHDR = {ELFCLASS32: "IIIIIIII", ELFCLASS64: "IIQQQQQQ"}
_SHDR = {ELFCLASS32: "IIIIIIIIII", ELFCLASS64: "IIQQQQIIQQ"}


@dataclass(frozen=True, slots=True)
class Segment:
    """A PT_LOAD program header."""

    vaddr: int
    memsz: int
    offset: int
    filesz: int
    flags: int

    @property
    def executable(self) -> bool:
        return bool(self.flags & PF_X)


@dataclass(frozen=True, slots=True)
class Section:
    """One ELF section header."""

    name: str
    type: int
    addr: int
    offset: int
    size: int
    align: int


@dataclass(frozen=True, slots=True)
class BinaryInfo:
    """What tracing needs to know of an ELF file."""

    path: str
    machine: str  # 'EM_X86_64', 'EM_AARCH64', ...
    elfclass: int  # 1 (32-bit) or 2 (64-bit)
    little_endian: bool
    elf_type: str  # 'ET_EXEC' or 'ET_DYN'
    build_id: str | None
    st_dev: int
    st_ino: int
    segments: tuple[Segment, ...] = ()  # PT_LOAD headers (added; default keeps it optional)
    st_size: int = 0  # with st_dev, st_ino: the file these bytes were read from (fstat)
    st_mtime_ns: int = 0


@dataclass(frozen=True, slots=True)
class _Image:
    """The cached reading of one ELF file."""

    info: BinaryInfo
    sections: tuple[Section, ...]
    notes: tuple[NoteRecord, ...]


_CACHE: dict[tuple[str, int, int, int], _Image] = {}


def open_binary(path: str) -> BinaryInfo:
    """Identify an ELF executable or shared library. ResolveError when it is neither."""
    return _image(path).info


def read_notes(path: str) -> tuple[NoteRecord, ...]:
    """The stapsdt notes of `path`, in file order, addresses adjusted for `.stapsdt.base`."""
    return _image(path).notes


def sections(path: str) -> tuple[Section, ...]:
    """The section header table (names resolved)."""
    return _image(path).sections


def vaddr_to_offset(info_or_path: BinaryInfo | str, vaddr: int) -> int:
    """Translate a link-time virtual address to a file offset (what uprobes attach to).

    Works alike for ET_EXEC and ET_DYN: find the PT_LOAD segment holding `vaddr` and apply
    its vaddr -> offset delta. ResolveError when no segment holds it.
    """
    info = info_or_path if isinstance(info_or_path, BinaryInfo) else open_binary(info_or_path)
    for seg in info.segments:
        if seg.vaddr <= vaddr < seg.vaddr + seg.memsz:
            return vaddr - seg.vaddr + seg.offset
    raise ResolveError(
        f"address {vaddr:#x} is in no loadable segment of {info.path}",
        hints=("the file may be corrupt or not the one the notes were written for",))


def host_machine() -> str | None:
    """The e_machine name ('EM_X86_64', ...) of the running kernel's programs; None for an
    architecture not in the table."""
    return _HOST_MACHINES.get(os.uname().machine)


def clear_cache() -> None:
    _CACHE.clear()


# --- internals ------------------------------------------------------------------------

def _image(path: str) -> _Image:
    try:
        st = os.stat(path)
    except OSError as exc:
        inputs.stat(path)  # an absence is an input too (an optional target)
        raise ResolveError(f"cannot read {path}: {exc.strerror}",
                           hints=("give the path of an ELF executable or shared library",)
                           ) from None
    key = (path, st.st_dev, st.st_ino, st.st_mtime_ns)
    image = _CACHE.get(key)
    if image is None:
        image = _CACHE[key] = _load(path, st)
    else:
        inputs.opened(path, st)  # kept from an earlier read: still this compile's input
    return image


def _load(path: str, st: os.stat_result) -> _Image:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as exc:
        raise ResolveError(f"cannot open {path}: {exc.strerror}",
                           hints=("check the path and your permissions",)) from None
    try:
        st = os.fstat(fd)
        inputs.opened(path, st)  # the file read, fingerprinted now: before the compile
        return _parse(fd, path, st)  # the file read, even if `path` moved since
    except (ValueError, struct.error) as exc:
        raise ResolveError(f"{path} is a truncated or corrupt ELF file: {exc}",
                           hints=("the file may be partly copied or still being written: "
                                  "give the complete executable or library",)) from None
    finally:
        os.close(fd)


def _parse(fd: int, path: str, st: os.stat_result) -> _Image:
    ident = os.pread(fd, 16, 0)
    if ident[:4] != b"\x7fELF":
        what = "an empty file" if not ident else "not an ELF file"
        raise ResolveError(f"{path} is {what}",
                           hints=("give an executable or shared library, not a script",))
    if len(ident) < 16:
        raise ValueError(f"it ends after {len(ident)} bytes, in its ELF header")
    elfclass, little = ident[4], ident[5] == 1
    if elfclass not in _EHDR or ident[5] not in (1, 2):
        raise ValueError(f"unknown ELF class/data {ident[4]}/{ident[5]}")
    order = "<" if little else ">"
    efmt = order + _EHDR[elfclass]
    (e_type, e_machine, _ver, _entry, phoff, shoff, _flags, _ehsize, phentsize, phnum,
     shentsize, shnum, shstrndx) = struct.unpack(efmt, _read(fd, 16, struct.calcsize(efmt)))
    if e_type not in ELF_TYPES:
        what = _UNTRACEABLE_TYPES.get(e_type, f"of ELF type {e_type}")
        raise ResolveError(f"{path} is {what}, not an executable or shared library",
                           hints=("object files and core dumps cannot be traced: give the "
                                  "program or library they are linked into",))
    shdrs = _section_headers(fd, order, elfclass, shoff, shentsize, shnum)
    if shdrs and shstrndx == SHN_XINDEX:
        shstrndx = shdrs[0][6]  # extended numbering: the real index is in section 0's sh_link
    names = _read(fd, shdrs[shstrndx][4], shdrs[shstrndx][5]) if shstrndx < len(shdrs) else b""
    secs = tuple(Section(_cstr(names, h[0]), h[1], h[3], h[4], h[5], h[8]) for h in shdrs)
    if phnum == SHN_XINDEX and shdrs:
        phnum = shdrs[0][7]
    segs = _segments(fd, order, elfclass, phoff, phentsize, phnum)
    info = BinaryInfo(path, MACHINES.get(e_machine, f"EM_{e_machine}"), elfclass, little,
                      ELF_TYPES[e_type], _build_id(fd, secs, little), st.st_dev, st.st_ino,
                      tuple(Segment(*s[1:]) for s in segs if s[0] == PT_LOAD),
                      st.st_size, st.st_mtime_ns)
    return _Image(info, secs, _stapsdt_notes(fd, secs, info))


def _section_headers(fd: int, order: str, elfclass: int, shoff: int, shentsize: int,
                     shnum: int) -> list[tuple[int, ...]]:
    if shoff == 0:
        return []
    fmt = order + _SHDR[elfclass]
    size = struct.calcsize(fmt)
    if shnum == 0:  # extended numbering: the count is in section 0's sh_size
        shnum = struct.unpack(fmt, _read(fd, shoff, size))[5]
    raw = _read(fd, shoff, shentsize * shnum)
    return [struct.unpack_from(fmt, raw, i * shentsize) for i in range(shnum)]


def _segments(fd: int, order: str, elfclass: int, phoff: int, phentsize: int,
              phnum: int) -> list[tuple[int, int, int, int, int, int]]:
    """(p_type, vaddr, memsz, offset, filesz, flags) per program header."""
    fmt = order + _PHDR[elfclass]
    raw = _read(fd, phoff, phentsize * phnum) if phoff else b""
    out = []
    for i in range(phnum if phoff else 0):
        h = struct.unpack_from(fmt, raw, i * phentsize)
        if elfclass == ELFCLASS64:  # type flags offset vaddr paddr filesz memsz align
            out.append((h[0], h[3], h[6], h[2], h[5], h[1]))
        else:  # type offset vaddr paddr filesz memsz flags align
            out.append((h[0], h[2], h[5], h[1], h[4], h[6]))
    return out


def _stapsdt_notes(fd: int, secs: tuple[Section, ...], info: BinaryInfo
                   ) -> tuple[NoteRecord, ...]:
    base_sec = next((s for s in secs if s.name == ".stapsdt.base"), None)
    notes: list[NoteRecord] = []
    for sec in secs:
        if sec.name != ".note.stapsdt" or sec.type != SHT_NOTE:
            continue
        data = _read(fd, sec.offset, sec.size)
        for owner, ntype, desc in iter_notes(data, info.little_endian, _note_align(sec)):
            if owner == STAPSDT_OWNER and ntype == NT_STAPSDT:
                notes.append(_adjust(decode_stapsdt(desc, info.elfclass, info.little_endian),
                                     base_sec))
    return tuple(notes)


def _adjust(note: NoteRecord, base_sec: Section | None) -> NoteRecord:
    """Apply the prelink correction: the note (not allocated, so never relocated) records
    the link-time address of `.stapsdt.base`; if the section now lives elsewhere, every
    address in the note moved by the same delta. pc is adjusted as libbpf (usdt.c) and
    perf (symbol-elf.c sdt_adjust_loc) do; the semaphore as GDB (stap-probe.c) does,
    since it sits in `.probes` of the same image. Without the section, keep them as-is."""
    if base_sec is None or note.base == 0:
        return note
    delta = base_sec.addr - note.base
    if delta == 0:
        return note
    sema = note.semaphore + delta if note.semaphore else 0
    return NoteRecord(note.pc + delta, note.base, sema, note.provider, note.name, note.args)


def _build_id(fd: int, secs: tuple[Section, ...], little: bool) -> str | None:
    for sec in secs:
        if sec.type == SHT_NOTE and sec.name == ".note.gnu.build-id" and sec.size < 4096:
            for owner, ntype, desc in iter_notes(_read(fd, sec.offset, sec.size), little,
                                                 _note_align(sec)):
                if owner == "GNU" and ntype == NT_GNU_BUILD_ID:
                    return desc.hex()
    return None


def _note_align(sec: Section) -> int:
    return 8 if sec.align == 8 else 4


def is_elf(path: str) -> bool:
    """`path` is a readable file starting with the ELF magic."""
    try:
        with open(path, "rb") as fh:
            inputs.opened_fd(path, fh.fileno())
            return fh.read(4) == b"\x7fELF"
    except OSError:
        inputs.stat(path)  # what was not there or not readable
        return False


def _read(fd: int, offset: int, size: int) -> bytes:
    data = os.pread(fd, size, offset)
    if len(data) != size:
        raise ValueError(f"its headers say {size} bytes at offset {offset:#x}, "
                         f"{'past its end' if not data else f'only {len(data)} are there'}")
    return data


def _cstr(table: bytes, offset: int) -> str:
    end = table.find(b"\0", offset)
    return table[offset:end if end >= 0 else None].decode("ascii", "replace")
