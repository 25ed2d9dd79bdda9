"""Contracts between the C and the Python: the constants and struct layouts both sides
use, written here once.

The C gets them as one generated block (`c_block`: #defines, struct definitions and a
`_Static_assert` on each struct's size and each member's offset), which
templates/program.bpf.c.j2 puts before templates/runtime_helpers.h; the helpers there
and in templates/record_helpers.h use the macros and structs by name and define none
of them. The Python packs and unpacks with the struct formats derived from the same
`CStruct` (`format`, `pack`, `offset`, `ctypes_fields`), never a re-typed format string.
Change a value or a member here and both sides follow; the asserts make the compiler
refuse a C that disagrees (tests/unit/test_contracts.py checks that no template holds a
second copy).

render/layout.py's `RecordLayout` does the same for each print's record; this module
holds its header (`PR_HDR`). Pure: stdlib only (ctypes imported only by `ctypes_fields`),
cheap to import from the runtime and commands.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from enum import IntEnum, IntFlag
from typing import Any


@dataclass(frozen=True, slots=True)
class CType:
    """A C scalar both sides know: its name in the C, its struct code, its size."""

    c: str
    code: str
    size: int

    def pack(self, value: int) -> bytes:
        return struct.pack("<" + self.code, value)


U32 = CType("__u32", "I", 4)
U64 = CType("__u64", "Q", 8)
S32 = CType("__s32", "i", 4)
S64 = CType("__s64", "q", 8)
CHAR = CType("char", "s", 1)


@dataclass(frozen=True, slots=True)
class CMember:
    """A struct member: `count` elements of `ctype` (char: a byte string of `count`).
    `read`: False for a member the Python neither packs nor unpacks (zero bytes)."""

    name: str
    ctype: CType
    count: int = 1
    read: bool = True

    @property
    def size(self) -> int:
        return self.ctype.size * self.count

    @property
    def align(self) -> int:
        return self.ctype.size

    @property
    def c_decl(self) -> str:
        dims = f"[{self.count}]" if self.count > 1 or self.ctype is CHAR else ""
        return f"{self.ctype.c} {self.name}{dims};"

    @property
    def format(self) -> str:
        if not self.read:
            return f"{self.size}x"
        if self.ctype is CHAR:
            return f"{self.count}s"
        return f"{self.count}{self.ctype.code}" if self.count > 1 else self.ctype.code


@dataclass(frozen=True, slots=True)
class CStruct:
    """A struct the C declares and the Python packs or reads: `struct <name>`, members
    laid out as C lays them out (each at its natural alignment, the size rounded up to
    the largest), which `format` spells out padding and all."""

    name: str
    members: tuple[CMember, ...]
    why: str  # a comment on the C definition: who fills or reads it
    # the compiled `format`: a template is packed per copy unwound (runtime/stack_templates.py)
    _packer: struct.Struct = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_packer", struct.Struct(self.format))

    @property
    def offsets(self) -> dict[str, int]:
        out, at = {}, 0
        for m in self.members:
            at = _round(at, m.align)
            out[m.name] = at
            at += m.size
        return out

    def offset(self, member: str) -> int:
        return self.offsets[member]

    def member_format(self, member: str) -> str:
        """The struct format of one member alone (read at `offset(member)`)."""
        return "<" + next(m for m in self.members if m.name == member).format

    @property
    def size(self) -> int:
        last = self.members[-1]
        return _round(self.offset(last.name) + last.size,
                      max(m.align for m in self.members))

    @property
    def format(self) -> str:
        """The struct module format of the whole struct (little-endian, padding as x)."""
        out, at = ["<"], 0
        for m in self.members:
            start = self.offset(m.name)
            if start > at:
                out.append(f"{start - at}x")
            out.append(m.format)
            at = start + m.size
        if self.size > at:
            out.append(f"{self.size - at}x")
        return "".join(out)

    def pack(self, *values: Any) -> bytes:
        """The struct's bytes from the values of its `read` members, in order."""
        return self._packer.pack(*values)

    def unpack(self, data: bytes) -> tuple[Any, ...]:
        return self._packer.unpack_from(data)

    @property
    def c_definition(self) -> str:
        body = "".join(f"    {m.c_decl}\n" for m in self.members)
        return f"/* {self.why} */\nstruct {self.name} {{\n{body}}};\n"

    @property
    def c_asserts(self) -> str:
        lines = [f"_Static_assert(sizeof(struct {self.name}) == {self.size}, "
                 f'"{self.name} (render/contracts.py)");']
        lines += [f"_Static_assert(__builtin_offsetof(struct {self.name}, {m.name}) == "
                  f'{self.offset(m.name)}, "{self.name}.{m.name} (render/contracts.py)");'
                  for m in self.members]
        return "\n".join(lines) + "\n"

    def ctypes_fields(self) -> list[tuple[str, Any]]:
        """`_fields_` of a ctypes Structure of the same layout (arrays as arrays)."""
        import ctypes as ct  # noqa: PLC0415 - only the tracer registry uses a ctypes view

        scalars: dict[str, Any] = {"I": ct.c_uint32, "Q": ct.c_uint64, "q": ct.c_int64,
                                   "s": ct.c_char}
        fields: list[tuple[str, Any]] = []
        for m in self.members:
            base = scalars[m.ctype.code]
            fields.append((m.name, base * m.count if m.count > 1 else base))
        return fields


def _round(n: int, to: int) -> int:
    return (n + to - 1) // to * to


# --- the constants ------------------------------------------------------------------


class Counter(IntEnum):
    """Slots of the per-CPU counter array (`RenderedProgram.counters_map`; PR_<name>)."""

    LOST_RINGBUF = 0  # print records the full ring buffer refused
    LOST_MAPFULL = 1  # aggregation updates a full map refused
    SUBMITS = 2  # bytes submitted since this CPU's last forced wakeup (not a loss)
    SPAN_REPLACED = 3  # span begins that replaced an open begin of their key
    SPAN_OVERFLOW = 4  # nested span begins past settings.span_depth (not timed)
    STACK_LOST = 5  # stacks not captured (stack map collision or full, copy map full)
    SPAN_UNMATCHED = 6  # ends of nested spans with `match:` that matched no open begin
    SPAN_DROPPED = 7  # open begins above the one such an end matched (end never came)


# The counter array's slots after the counters, not counters: each CPU's wakeup
# threshold in bytes (templates/record_helpers.h pr_wakeup_flags), and whether its last
# print record found the ring full (1) or went in (0): pr_ring_full asks the ring for
# room only after a record was lost.
WAKE_AT = len(Counter)
RING_FULL = WAKE_AT + 1
COUNTER_SLOTS = RING_FULL + 1


class ConfigSlot(IntEnum):
    """Slots of the config array (`RenderedProgram.config_map`; PR_CFG_<name>), set
    after loading (runtime/scope.py)."""

    SCOPE_UPROBE = 0  # ScopeFlag bits uprobe/USDT thunks check (one --pid: at attach)
    SELF = 1  # planrunner's own tgid (in its pid namespace), whose events are dropped
    SCOPE_TRACEPOINT = 2  # ScopeFlag bits tracepoint thunks check
    NS_DEV = 3  # planrunner's pid namespace (kernel dev_t of nsfs) when not the init one
    NS_INO = 4  # its inode; 0: planrunner runs in the init pid namespace
    CGROUPS = 5  # entries of the cgroup array in use
    NR_CPUS = 6  # possible CPUs: scales the ring buffer's wakeup watermark
    COMMAND = 7  # the -c command until its exec (pr_on_exec clears it): still planrunner


class ScopeFlag(IntFlag):
    """Filters a config SCOPE_* slot turns on (PR_SCOPE_<name>): AND across, OR within."""

    PIDS = 1  # the tgid is in `scope_pids_map`
    COMM = 2  # the thread's comm is in `scope_comms_map`
    CGROUP = 4  # the task is under a cgroup of `scope_cgroups_map`


class ScopeEntry(IntEnum):
    """Values of `scope_pids_map` (PR_SCOPE_<name>)."""

    GIVEN = 1  # a --pid or the -c command
    CHILD = 2  # a descendant added by pr_scope_fork


class Born(IntEnum):
    """Values of `born_map` (PR_BORN_<name>)."""

    EXEC = 1  # exec'd as planrunner (pr_on_exec)
    FORK = 2  # forked by a planrunner process: one until it execs


SCOPE_GIVEN = ScopeEntry.GIVEN
BORN_EXEC = Born.EXEC
# The key bit of `scope_pids_map` for a pid of planrunner's own pid namespace, not an
# init one (pids stay below 2^22).
SCOPE_NS_KEY = 0x80000000
MAX_CGROUPS = 8  # entries of the --cgroup array
MAX_TRACERS = 16  # planrunner runs at once that exclude each other
COMM_LEN = 16  # TASK_COMM_LEN, with its NUL
# Where the registry of running planrunner processes is pinned by default, and the
# macro holding the pin in the C (the loader moves it with -D: runtime/registry_pin.py).
TRACERS_PIN = "/sys/fs/bpf/planrunner_tracers"
TRACERS_MAP = "pr_tracers"  # its C name (the first run creates it under this name)
TRACERS_PIN_MACRO = "PR_TRACERS_PIN"

# Status word of a string field of a record (templates/runtime_helpers.h pr_read_str).
STR_NULL = 0
STR_OK = 1
STR_TRUNCATED = 2


# --- the structs --------------------------------------------------------------------

TRACER_TABLE = CStruct("pr_tracer_table", (
    CMember("tgid", U32, MAX_TRACERS),
    CMember("start", U64, MAX_TRACERS),  # for user space: a pid reused is not the tracer
), "every planrunner on the machine (init-namespace tgids, 0: free), runtime/tracers.py")
PR_COMM = CStruct("pr_comm", (CMember("c", CHAR, COMM_LEN),),
                  "a --comm key of the scope (runtime/scope.py)")
PR_CGROUP = CStruct("pr_cgroup", (CMember("id", U64), CMember("level", U64)),
                    "a --cgroup: (cgroup id, depth below the v2 root), runtime/scope.py")
# The header of every print record (render/layout.py RecordLayout). No uid: no view
# shows one, and reading it cost a helper call per event (issue 17).
PR_HDR = CStruct("pr_hdr", (
    CMember("ts", U64), CMember("output", U32), CMember("pid", U32), CMember("tid", U32),
    CMember("spare", U32, read=False), CMember("comm", CHAR, COMM_LEN),
), "the header of every print record (render/layout.py, runtime/decode.py)")
STRUCTS = (TRACER_TABLE, PR_COMM, PR_CGROUP, PR_HDR)

# Copy templates (render/stacks.py, written by runtime/stack_templates.py): declared only
# by programs that copy user stacks into an aggregation key, so not in STRUCTS.
TEMPLATE_WORDS = 48  # words one template compares (stacks/walk_template.py makes no more)
UTMPL_KEY = CStruct("pr_utmpl_key", (
    CMember("pid", U32), CMember("len", U32), CMember("ip", U64), CMember("sp", U64),
), "a copy template's key: tgid, copy length, ip (or its page, SPAN_PAGE) and sp")
# A template that holds for a span of pcs (stacks/walk_template.py first_span) is also
# under the key of each page the span touches, its ip field SPAN_PAGE | (ip >> 12)
SPAN_PAGE = 1 << 63
SPAN_PAGE_SHIFT = 12
UTMPL_VAL = CStruct("pr_utmpl_val", (
    # id: the template's (a light copy names it); cls: its class, one id for templates
    # whose named native frames are the same but for the eval loop frame Python frames
    # replace (hashed in its place when the copy has Python frames); [lo, hi): the pcs
    # it holds for; hidden: with Python frames the pc does not show (the eval loop)
    CMember("id", U64), CMember("cls", U64), CMember("bp", U64), CMember("lo", U64),
    CMember("hi", U64), CMember("bp_used", U32), CMember("n", U32), CMember("hidden", U32),
    CMember("val", U64, TEMPLATE_WORDS),
    CMember("off", U32, TEMPLATE_WORDS),  # from sp, 8-byte aligned
), "a copy template: the words (and bp) its walk used, stacks/walk_template.py")
# A Python frame's line where the reader named it (render/pyframes.py, the light copies'
# hash): the instruction, in its code object and line table, of a process.
PYLINE_KEY = CStruct("pr_pyline_key", (
    CMember("tgid", U32), CMember("lasti", S32), CMember("code", U64),
    CMember("linetable", U64),
), "a Python instruction whose line planrunner knows (runtime/stacks.py)")


def _c_int(value: int) -> str:
    return f"{value:#x}u" if value >= 1 << 31 else str(value)


def defines() -> tuple[tuple[str, str], ...]:
    """(macro, C value) of every constant the C shares with the Python, in block order."""
    out = [(f"PR_STR_{n}", str(v)) for n, v in
           (("NULL", STR_NULL), ("OK", STR_OK), ("TRUNCATED", STR_TRUNCATED))]
    out += [(f"PR_CFG_{s.name}", str(s.value)) for s in ConfigSlot]
    out.append(("PR_CFG_SLOTS", str(len(ConfigSlot))))
    out += [(f"PR_SCOPE_{f.name}", str(f.value)) for f in ScopeFlag if f.name]
    out += [(f"PR_SCOPE_{e.name}", str(e.value)) for e in ScopeEntry]
    out.append(("PR_NS_KEY", _c_int(SCOPE_NS_KEY)))
    out.append(("PR_MAX_CGROUPS", str(MAX_CGROUPS)))
    out.append(("PR_MAX_TRACERS", str(MAX_TRACERS)))
    out += [(f"PR_BORN_{b.name}", str(b.value)) for b in Born]
    out += [(f"PR_{c.name}", str(c.value)) for c in Counter]
    out.append(("PR_WAKE_AT", str(WAKE_AT)))
    out.append(("PR_RING_FULL", str(RING_FULL)))
    out.append(("PR_COUNTER_SLOTS", str(COUNTER_SLOTS)))
    return tuple(out)


def c_block() -> str:
    """The C of the contracts: what templates/program.bpf.c.j2 puts first."""
    lines = ["/* render/contracts.py: constants and structs shared with the Python "
             "(generated) */\n"]
    lines += [f"#define {name} {value}\n" for name, value in defines()]
    lines.append(f"#ifndef {TRACERS_PIN_MACRO}\n"
                 f'#define {TRACERS_PIN_MACRO} "{TRACERS_PIN}"\n#endif\n')
    for s in STRUCTS:
        lines.append(s.c_definition)
        lines.append(s.c_asserts)
    return "".join(lines)
