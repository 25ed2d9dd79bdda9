"""Record and aggregation key layouts: the single source of truth for event records and
for the keys of aggregation maps.

One `RecordLayout` drives both the C struct (templates/program.bpf.c.j2 renders
`c_members`) and the Python decoder (runtime/decode.py builds a struct.Struct from
`struct_format`). The two cannot drift: change one field kind here and both follow.
Every member is 8-byte aligned by construction, so the C struct has no hidden padding;
the template adds a _Static_assert on the size to prove it.

One `KeyLayout` per aggregation does the same for its map's key: render/aggregates.py
makes it and declares the C struct from `c_members`; runtime/aggregates.py unpacks the
key's bytes with `unpacker` (no member names, no kind strings to parse).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from planrunner.render import pyframes
from planrunner.render.contracts import PR_HDR

# The status word of a string field (render/contracts.py), named here for the decoders
from planrunner.render.contracts import STR_NULL as STR_NULL
from planrunner.render.contracts import STR_OK as STR_OK
from planrunner.render.contracts import STR_TRUNCATED as STR_TRUNCATED

# struct pr_hdr (render/contracts.py PR_HDR): ts, output, pid, tid, a spare word (0),
# comm[16]; the format skips the spare word.
HEADER_FORMAT = PR_HDR.format
HEADER_SIZE = PR_HDR.size

# Sizes of the last string's part of a variable record (see RecordLayout.variable):
# each a separate constant reservation, the first that holds the string is used.
STR_CLASSES = (16, 64)


def _pad8(n: int) -> int:
    return (n + 7) & ~7


@dataclass(frozen=True, slots=True)
class LayoutField:
    """One record field. Stacks (render/stacks.py): `stack` is a stack id (__s64, a
    kernel stack or a user stack walked by frame pointers), `ucopy` a copied user stack
    (struct pr_ustack of planrunner/stacks: pid, len, time, regs[4], data[size]);
    `stack_kind` and `limit` say which stack and how many frames to keep. `usym` is a
    code address (__u64) the reader names with the process of the record's pid."""

    key: str  # record key
    kind: Literal["int", "uint", "bool", "str", "stack", "ucopy", "usym"]
    member: str  # C member name (generated: f0, f1...)
    size: int = 8  # str: buffer bytes (content + NUL); ucopy: stack bytes
    stack_kind: str = ""  # "user" | "kernel" for stack and ucopy
    limit: int = 0  # frames kept
    unwind: str = ""  # ucopy: "auto" | "dwarf"
    python: int = 0  # ucopy: Python frames the copy holds (render/pyframes.py)

    @property
    def c_members(self) -> tuple[str, ...]:
        if self.kind == "ucopy":
            m = self.member
            return (f"__u32 {m}_pid;", f"__u32 {m}_len;", f"__u64 {m}_time;",
                    f"__u64 {m}_regs[4];", *pyframes.members(f"{m}_", self.python),
                    f"char {m}_data[{self.size}];")
        if self.kind == "str":
            pad = _pad8(self.size) - self.size
            tail = (f"char {self.member}_pad[{pad}];",) if pad else ()
            return (f"__u64 {self.member}_ptr;", f"__s64 {self.member}_st;",
                    f"char {self.member}[{self.size}];", *tail)
        ctype = "__s64" if self.kind in ("int", "stack") else "__u64"
        return (f"{ctype} {self.member};",)

    @property
    def struct_format(self) -> str:
        if self.kind == "ucopy":
            # parsed by stacks.capture.parse_ustack_record
            return f"{48 + pyframes.section_size(self.python) + self.size}s"
        if self.kind == "str":
            return f"Qq{self.size}s{_pad8(self.size) - self.size}x"
        return "q" if self.kind in ("int", "stack") else "Q"

    @property
    def byte_size(self) -> int:
        if self.kind == "ucopy":
            return 48 + pyframes.section_size(self.python) + _pad8(self.size)
        return 16 + _pad8(self.size) if self.kind == "str" else 8


@dataclass(frozen=True, slots=True)
class RecordLayout:
    """One print output's record. `variable`: the record ends with a string whose length
    the body knows before it reserves (render/bodies.py print_block), so it reserves only
    as much of that string's buffer as the string needs, in one of a few constant sizes
    (`sizes`; the ring buffer only takes constant ones). Shorter records stride less far
    through the ring: fewer cold cache lines written per event, and more records in the
    same ring (issue 17). The decoder takes the string from whatever follows `prefix`."""

    output_id: int
    c_name: str  # struct name, e.g. pr_rec_0
    fields: tuple[LayoutField, ...]
    variable: bool = False

    @property
    def in_memory(self) -> tuple[LayoutField, ...]:
        """The members in record order: fixed-size fields first, strings last. A string
        is copied up to its NUL only, so a short one leaves the rest of its buffer, and
        the cache lines under it, untouched: writing cold ring buffer lines is most of
        what a printed event costs the traced thread (issue 7). A stack copy comes last
        for the same reason: most of its 16 KiB is seldom written."""
        return (tuple(f for f in self.fields if f.kind not in ("str", "ucopy"))
                + tuple(f for f in self.fields if f.kind == "str")
                + tuple(f for f in self.fields if f.kind == "ucopy"))

    @property
    def size(self) -> int:
        return HEADER_SIZE + sum(f.byte_size for f in self.fields)

    @property
    def struct_format(self) -> str:
        return HEADER_FORMAT + "".join(f.struct_format for f in self.in_memory)

    @property
    def last_string(self) -> LayoutField | None:
        """The string that ends the record (a variable record's), when one does."""
        last = self.in_memory[-1] if self.fields else None
        return last if last is not None and last.kind == "str" else None

    @property
    def prefix_size(self) -> int:
        """Bytes before the last string's buffer (the whole record when there is none)."""
        last = self.last_string
        return self.size - _pad8(last.size) if last is not None else self.size

    @property
    def prefix_format(self) -> str:
        """struct format of the record up to the last string's buffer (its pointer and
        status included): what every record of a variable layout holds at least."""
        last = self.last_string
        if last is None:
            return self.struct_format
        return HEADER_FORMAT + "".join(f.struct_format for f in self.in_memory[:-1]) + "Qq"

    @property
    def sizes(self) -> tuple[int, ...]:
        """The record sizes a variable layout reserves, smallest first (the last is the
        whole record); a fixed layout's only size."""
        last = self.last_string
        if not self.variable or last is None:
            return (self.size,)
        full = _pad8(last.size)
        return tuple(self.prefix_size + c for c in STR_CLASSES if c < full) + (self.size,)


# --- aggregation keys ---------------------------------------------------------------

KeyKind = Literal["int", "uint", "bool", "str", "kstack", "ustack", "ucopy", "usym"]
_KEY_CTYPES = {"int": "__s64", "uint": "__u64", "bool": "__u64", "kstack": "__s64",
               "ustack": "__s64", "ucopy": "__s64", "usym": "__u64"}
_KEY_FORMATS = {"int": "q", "uint": "Q", "bool": "Q", "kstack": "q", "ustack": "q",
                "ucopy": "q", "usym": "Q"}


@dataclass(frozen=True, slots=True)
class KeyField:
    """One `by` field of an aggregation key (render/aggregates.py key_layout). `str`:
    `size` bytes of the string (NUL included) in a member rounded up to 8; stacks: a
    kernel stack id (`kstack`), a user stack id walked by frame pointers (`ustack`) or
    the hash of a copied user stack unwound with `unwind` (`ucopy`), `limit` frames
    kept; `usym`: a code address. A user stack's or symbol's member is followed by the
    tgid whose process names it (`with_pid`)."""

    key: str  # record key
    kind: KeyKind
    size: int = 0  # str
    limit: int = 0  # kstack, ustack, ucopy
    unwind: str = ""  # ucopy: "auto" | "dwarf"

    @property
    def stack(self) -> bool:
        return self.kind in ("kstack", "ustack", "ucopy")

    @property
    def with_pid(self) -> bool:
        return self.kind in ("ustack", "ucopy", "usym")

    def c_members(self, member: str) -> tuple[str, ...]:
        if self.kind == "str":
            return (f"char {member}[{_pad8(self.size)}];",)
        pid = (f"__u64 {member}_pid;",) if self.with_pid else ()
        return (f"{_KEY_CTYPES[self.kind]} {member};", *pid)

    @property
    def struct_format(self) -> str:
        if self.kind == "str":
            return f"{_pad8(self.size)}s"
        return _KEY_FORMATS[self.kind] + ("Q" if self.with_pid else "")


KeyValues = tuple[tuple[tuple[object, int], ...], int]  # ((value, pid) per field, slot)


@dataclass(frozen=True, slots=True)
class KeyLayout:
    """The key struct of one aggregation map: the C members (`k0`, `k1`... in `by`
    order, each field's companions after it; `slot` last for a histogram, whose map
    holds an entry per key and bucket) and how the reader unpacks its bytes. Every
    member is 8 bytes or a multiple of 8: no padding. Without fields or slot the key is
    one `__u64 pr_none` (0)."""

    fields: tuple[KeyField, ...] = ()
    slot: bool = False

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(f.key for f in self.fields)

    @staticmethod
    def member(index: int) -> str:
        """The C member of field `index` (its pid companion: member + "_pid")."""
        return f"k{index}"

    @property
    def c_members(self) -> tuple[str, ...]:
        out = [m for i, f in enumerate(self.fields) for m in f.c_members(self.member(i))]
        if self.slot:
            out.append("__u64 slot;")
        return tuple(out) or ("__u64 pr_none;",)

    @property
    def struct_format(self) -> str:
        fmt = "".join(f.struct_format for f in self.fields) + ("Q" if self.slot else "")
        return "<" + (fmt or "8x")

    @property
    def size(self) -> int:
        return struct.calcsize(self.struct_format)

    def unpacker(self) -> Callable[[bytes], KeyValues]:
        """A function from a key's bytes to (value, pid) per field (pid 0 when the field
        has none; a string as its whole buffer) and the slot (0 without one): made once
        per map read, called per key."""
        unpack = struct.Struct(self.struct_format).unpack_from
        with_pid = tuple(f.with_pid for f in self.fields)
        slot = self.slot

        def values(raw: bytes) -> KeyValues:
            flat = unpack(raw)
            out, at = [], 0
            for pid in with_pid:
                out.append((flat[at], flat[at + 1] if pid else 0))
                at += 2 if pid else 1
            return tuple(out), flat[at] if slot else 0

        return values
