"""A minimal reader of the kernel's BTF: byte offsets of struct members, nothing more.

Why: BPF C compiled by bcc sees the installed kernel headers (Debian's 6.1 here), but a
`task_struct` offset must be the RUNNING kernel's. Its BTF (/sys/kernel/btf/vmlinux) is
that kernel's own type information. No maintained, light BTF reader exists on PyPI or
in Debian (libbpf's is C; bpftool dumps text), so this module walks the format itself:

    header  magic 0xeB9F, version, flags, hdr_len, type_off, type_len, str_off, str_len
    types   `struct btf_type {name_off; info; size_or_type}` (ids from 1, in order), each
            followed by data whose length its kind and vlen give (kernel btf.h)

`member_offset(btf, "task_struct", "thread.fsbase")` follows struct/union members by
name (through anonymous members, typedefs and qualifiers) and adds their bit offsets.
`kernel_offset(member)` computes the offset of a `KernelMember` in the running kernel
once per process, and `runtime_cflags(constants)` turns the rendered program's
(macro, member) pairs into `-DMACRO=N` for the compiler: the rendered C only names the
macros (render/operand_c.py names them), so it is the same on every host.
`optional_cflags(constants)` does the same for macros the C only tests with `#ifdef`
(a faster path where the kernel has BTF): a member it cannot find is left undefined,
not an error. `identity()` is what all those values are a function of, learnt without
parsing: the program cache keys a program by it, not by the values.
PLANRUNNER_VMLINUX_BTF overrides the file (tests use it to stand for a kernel without
BTF).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass
from typing import NamedTuple

from planrunner import inputs

VMLINUX = "/sys/kernel/btf/vmlinux"
BTF_MAGIC = 0xEB9F

# kinds (include/uapi/linux/btf.h)
INT, PTR, ARRAY, STRUCT, UNION, ENUM, FWD, TYPEDEF, VOLATILE, CONST, RESTRICT = range(1, 12)
FUNC, FUNC_PROTO, VAR, DATASEC, FLOAT, DECL_TAG, TYPE_TAG, ENUM64 = range(12, 20)

# Bytes of kind-specific data after the 12-byte btf_type: fixed, or per vlen entry.
_FIXED = {INT: 4, ARRAY: 12, VAR: 4, DECL_TAG: 4}
_PER_ENTRY = {STRUCT: 12, UNION: 12, ENUM: 8, FUNC_PROTO: 8, DATASEC: 12, ENUM64: 12}
_SKIP_TO = (TYPEDEF, VOLATILE, CONST, RESTRICT, TYPE_TAG)



class KernelMember(NamedTuple):
    """A member of a kernel struct, by its path (`thread.fsbase` in `task_struct`)."""

    struct: str
    path: str


# where x86-64 Linux keeps a task's thread pointer (what %fs: addresses)
THREAD_POINTER = KernelMember("task_struct", "thread.fsbase")
# a task's command name, char[16] (runtime_helpers.h pr_current_comm)
TASK_COMM = KernelMember("task_struct", "comm")

_HEADER = struct.Struct("<HBBIIIIII")
_TYPE = struct.Struct("<III")
_MEMBER = struct.Struct("<III")


class BtfError(Exception):
    """The kernel has no (readable) BTF, or it lacks the member asked for."""


# 32-bit words of kind-specific data after a btf_type: fixed, or per vlen entry, by kind
_FIXED_WORDS = [_FIXED.get(kind, 0) // 4 for kind in range(32)]
_ENTRY_WORDS = [_PER_ENTRY.get(kind, 0) // 4 for kind in range(32)]


class TypeOffsets:
    """Where each btf_type starts in the blob (index: type id; 0, void, has none), found by
    walking the type section only as far as a lookup needs. A vmlinux has ~126k types
    and the structs planrunner reads come early (task_struct is id 114 in Linux 6.18):
    the whole walk, ~70 ms of Python on an AMD EPYC, is paid only by len() or a name
    the kernel lacks. An unknown kind is an error when the walk reaches it."""

    __slots__ = ("_words", "_start", "_next", "_offsets", "_what")

    def __init__(self, data: bytes, start: int, end: int, what: str) -> None:
        self._words = memoryview(data)[start:end].cast("I")
        self._start = start
        self._next = 0  # the word where the next type not walked yet starts
        self._offsets = [0]
        self._what = what

    def _walk_one(self) -> bool:
        """One type more; False at the end of the section."""
        i = self._next
        if i >= len(self._words):
            return False
        info = self._words[i + 1]
        kind = (info >> 24) & 0x1F
        if kind > ENUM64 or kind == 0:
            raise BtfError(f"{self._what}: unknown BTF kind {kind} (type {len(self._offsets)})")
        self._offsets.append(self._start + 4 * i)
        self._next = i + 3 + _FIXED_WORDS[kind] + _ENTRY_WORDS[kind] * (info & 0xFFFF)
        return True

    def get(self, type_id: int) -> int | None:
        """The offset of type `type_id`, None when the blob has no such type."""
        while len(self._offsets) <= type_id:
            if not self._walk_one():
                return None
        return self._offsets[type_id]

    def __getitem__(self, type_id: int) -> int:
        at = self.get(type_id)
        if at is None:
            raise BtfError(f"type id {type_id} is out of range")
        return at

    def __len__(self) -> int:
        while self._walk_one():
            pass
        return len(self._offsets)


@dataclass(frozen=True, slots=True)
class Btf:
    """A parsed BTF blob: its bytes and where each type and the strings are in them."""

    data: bytes
    strings_at: int  # offset of the string section in `data`
    strings_end: int
    types: TypeOffsets  # offset in `data` of each btf_type; index = type id (0: void)

    def name(self, name_off: int) -> str:
        at = self.strings_at + name_off
        end = self.data.find(b"\0", at, self.strings_end)
        return self.data[at:end if end >= 0 else self.strings_end].decode("utf-8", "replace")

    def header(self, type_id: int) -> tuple[int, int, int, int]:
        """(name_off, kind, vlen, size_or_type); kind_flag is folded into vlen's bit 16."""
        at = self.types.get(type_id) if type_id > 0 else None
        if at is None:
            raise BtfError(f"type id {type_id} is out of range")
        name_off, info, size = _TYPE.unpack_from(self.data, at)
        kind_flag = (info >> 31) & 1
        return name_off, (info >> 24) & 0x1F, (info & 0xFFFF) | (kind_flag << 16), size


def vmlinux_path() -> str:
    return inputs.getenv("PLANRUNNER_VMLINUX_BTF") or VMLINUX


def load(path: str | None = None) -> Btf:
    """Parse a BTF blob (the running kernel's by default). BtfError when there is none."""
    path = path or vmlinux_path()
    try:
        with open(path, "rb") as fh:
            inputs.opened_fd(path, fh.fileno())  # sysfs too: its inode is the kernel's
            data = fh.read()
    except OSError as exc:
        inputs.stat(path)
        raise BtfError(f"the kernel's BTF is not readable ({path}: {exc.strerror}); "
                       "the kernel needs CONFIG_DEBUG_INFO_BTF=y") from None
    return parse(data, path)


def parse(data: bytes, what: str = "BTF") -> Btf:
    if len(data) < _HEADER.size:
        raise BtfError(f"{what} is too short for a BTF header")
    magic, _version, _flags, hdr_len, type_off, type_len, str_off, str_len = \
        _HEADER.unpack_from(data)[:8]
    if magic != BTF_MAGIC:
        raise BtfError(f"{what} is not BTF (magic {magic:#x})")
    start, end = hdr_len + type_off, hdr_len + type_off + type_len
    strings_at = hdr_len + str_off
    if end > len(data) or strings_at + str_len > len(data):
        raise BtfError(f"{what} is truncated")
    if start % 4 or type_len % 4:
        raise BtfError(f"{what}: the type section is not 4-byte aligned")
    return Btf(data, strings_at, strings_at + str_len, TypeOffsets(data, start, end, what))


def find_struct(btf: Btf, name: str) -> int:
    """The id of the (complete) struct called `name`."""
    strings = btf.data[btf.strings_at:btf.strings_end]
    wanted = b"\0" + name.encode() + b"\0"
    name_offs: set[int] = set()
    at = strings.find(wanted)
    while at >= 0:
        name_offs.add(at + 1)
        at = strings.find(wanted, at + 1)
    unpack = _TYPE.unpack_from
    type_id = 1
    while (where := btf.types.get(type_id)) is not None:  # walked only this far
        name_off, info, _ = unpack(btf.data, where)
        if name_off in name_offs and (info >> 24) & 0x1F == STRUCT:
            return type_id
        type_id += 1
    raise BtfError(f"the kernel's BTF has no struct {name}")


def _resolve(btf: Btf, type_id: int) -> int:
    """Through typedefs and qualifiers to the type they name."""
    for _ in range(64):
        _n, kind, _v, ref = btf.header(type_id)
        if kind not in _SKIP_TO:
            return type_id
        type_id = ref
    raise BtfError("a typedef chain does not end")


def _members(btf: Btf, type_id: int) -> list[tuple[str, int, int]]:
    """(name, type id, bit offset) of a struct's or union's members."""
    _n, kind, vlen, _size = btf.header(type_id)
    if kind not in (STRUCT, UNION):
        return []
    bitfields, count = vlen >> 16, vlen & 0xFFFF
    at = btf.types[type_id] + _TYPE.size
    out = []
    for k in range(count):
        name_off, member_type, offset = _MEMBER.unpack_from(btf.data, at + k * _MEMBER.size)
        bits = offset & 0xFFFFFF if bitfields else offset
        out.append((btf.name(name_off) if name_off else "", member_type, bits))
    return out


def _find_member(btf: Btf, type_id: int, name: str) -> tuple[int, int] | None:
    """(type id, bit offset) of member `name`, looking into anonymous members too."""
    for member, member_type, bits in _members(btf, _resolve(btf, type_id)):
        if member == name:
            return member_type, bits
        if not member:
            inner = _find_member(btf, member_type, name)
            if inner is not None:
                return inner[0], bits + inner[1]
    return None


def member_offset(btf: Btf, struct_name: str, path: str) -> int:
    """Byte offset of `path` (`a.b.c`) in struct `struct_name`."""
    type_id, bits = find_struct(btf, struct_name), 0
    for part in path.split("."):
        got = _find_member(btf, type_id, part)
        if got is None:
            raise BtfError(f"the kernel's struct {struct_name} has no member {path}")
        type_id, bits = got[0], bits + got[1]
    if bits % 8:
        raise BtfError(f"{struct_name}.{path} is a bit field")
    return bits // 8


_COMPUTED: dict[tuple[str, KernelMember], int] = {}


def kernel_offset(member: KernelMember) -> int:
    """The byte offset of `member` in the running kernel (computed once)."""
    return kernel_offsets([member])[member]


def kernel_offsets(members: Iterable[KernelMember]) -> dict[KernelMember, int]:
    """The byte offsets of `members` in the running kernel, each computed once, those
    not computed yet from one parse of the BTF (~0.12 s on an AMD EPYC: a parse per
    member made a plan with stacks wait ~0.4-0.8 s for its seven before compiling)."""
    path = vmlinux_path()
    inputs.stat(path)  # each call: the values are kept for the process
    wanted = set(members)
    missing = [m for m in wanted if (path, m) not in _COMPUTED]
    if missing:
        kernel = load(path)
        for member in sorted(missing):
            _COMPUTED[path, member] = member_offset(kernel, member.struct, member.path)
    return {member: _COMPUTED[path, member] for member in wanted}


def runtime_cflags(constants: Iterable[tuple[str, KernelMember]]) -> list[str]:
    """`-DMACRO=N` for each (macro, kernel member) the rendered C uses."""
    pairs = sorted(set(constants))
    offsets = kernel_offsets(member for _, member in pairs)
    return [f"-D{macro}={offsets[member]}" for macro, member in pairs]


def optional_cflags(constants: Iterable[tuple[str, KernelMember]]) -> list[str]:
    """`-DMACRO=N` for each (macro, kernel member) the running kernel's BTF has; none for
    one it lacks, or for all when it has no BTF (the C then takes its fallback)."""
    out = []
    for macro, member in sorted(set(constants)):
        try:
            out.append(f"-D{macro}={kernel_offset(member)}")
        except BtfError:
            continue
    return out


def identity() -> str:
    """What `optional_cflags` depends on, learnt with one stat (a parse takes ~0.1 s): the
    BTF file's path and, but for the running kernel's own file (whose kernel a program
    cache key names already), its fingerprint; absent: "-"."""
    path = vmlinux_path()
    st = inputs.stat(path)
    if st is None:
        return f"{path}:{inputs.ABSENT}"
    return f"{path}:{'kernel' if path == VMLINUX else inputs.stat_fingerprint(st)}"
