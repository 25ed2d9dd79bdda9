"""Record layouts: the single source of truth for event records.

One `RecordLayout` drives both the C struct (templates/program.bpf.c.j2 renders
`c_members`) and the Python decoder (runtime/decode.py builds a struct.Struct from
`struct_format`). The two cannot drift: change one field kind here and both follow.
Every member is 8-byte aligned by construction, so the C struct has no hidden padding;
the template adds a _Static_assert on the size to prove it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

# struct pr_hdr in templates/record_helpers.h: ts, output, pid, tid, uid, comm[16]
HEADER_FORMAT = "<QIIII16s"
HEADER_SIZE = 40

# Status word of a string field (see pr_read_str in the template).
STR_NULL = 0
STR_OK = 1
STR_TRUNCATED = 2


def _pad8(n: int) -> int:
    return (n + 7) & ~7


@dataclass(frozen=True, slots=True)
class LayoutField:
    """One record field. Stacks (render/stacks.py): `stack` is a stack id (__s64, a
    kernel stack or a user stack walked by frame pointers), `ucopy` a copied user stack
    (struct pr_ustack of planrunner/stacks: pid, len, time, regs[4], data[size]);
    `stack_kind` and `limit` say which stack and how many frames to keep."""

    key: str  # record key
    kind: Literal["int", "uint", "bool", "str", "stack", "ucopy"]
    member: str  # C member name (generated: f0, f1...)
    size: int = 8  # str: buffer bytes (content + NUL); ucopy: stack bytes
    stack_kind: str = ""  # "user" | "kernel" for stack and ucopy
    limit: int = 0  # frames kept
    unwind: str = ""  # ucopy: "auto" | "dwarf"

    @property
    def c_members(self) -> tuple[str, ...]:
        if self.kind == "ucopy":
            m = self.member
            return (f"__u32 {m}_pid;", f"__u32 {m}_len;", f"__u64 {m}_time;",
                    f"__u64 {m}_regs[4];", f"char {m}_data[{self.size}];")
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
            return f"{48 + self.size}s"  # parsed by stacks.capture.parse_ustack_record
        if self.kind == "str":
            return f"Qq{self.size}s{_pad8(self.size) - self.size}x"
        return "q" if self.kind in ("int", "stack") else "Q"

    @property
    def byte_size(self) -> int:
        if self.kind == "ucopy":
            return 48 + _pad8(self.size)
        return 16 + _pad8(self.size) if self.kind == "str" else 8


@dataclass(frozen=True, slots=True)
class RecordLayout:
    output_id: int
    c_name: str  # struct name, e.g. pr_rec_0
    fields: tuple[LayoutField, ...]

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
