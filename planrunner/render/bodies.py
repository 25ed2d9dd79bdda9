"""Per-probe C statements: operand reads (thunks), the body prologue, filters, print
records and span bookkeeping. Aggregation map updates live in render/aggregates.py.

Everything emitted here comes from typed models: generated names (`pr_...`), integers
formatted here, lowered expressions (expr/lower_c.py, which owns literal escaping) and
operand reads (usdt/lower_c.py). No plan text is pasted.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from planrunner.expr.lower_c import lower
from planrunner.expr.typed import TExpr, TStrRead, TVar
from planrunner.expr.types import BoolType, IntType, StrType
from planrunner.render.layout import LayoutField, RecordLayout
from planrunner.resolve.model import ArgSlot, AttachSite, ResolvedProbe
from planrunner.usdt.lower_c import lower_operand

# Builtins the prologue can compute; the body computes only what is used.
PROLOGUE = {
    "pid": "__u32 pr_pid = pr_id >> 32;",
    "tid": "__u32 pr_tid = (__u32)pr_id;",
    "uid": "__u32 pr_uid = (__u32)bpf_get_current_uid_gid();",
    "gid": "__u32 pr_gid = bpf_get_current_uid_gid() >> 32;",
    "cpu": "__u32 pr_cpu = bpf_get_smp_processor_id();",
    "ts": "__u64 pr_ts = bpf_ktime_get_ns();",
    "comm": "char pr_comm[16] = {};\n    bpf_get_current_comm(pr_comm, sizeof(pr_comm));",
}


@dataclass
class Scratch:
    """The per-CPU scratch struct of one probe: string buffers too big for the stack."""

    name: str
    members: list[str] = field(default_factory=list)
    _tmp: int = 0

    def alloc(self, size: int) -> str:
        """StringAllocator for expression lowering: a fresh char[size] buffer."""
        member = f"t{self._tmp}"
        self._tmp += 1
        self.members.append(f"char {member}[{size}];")
        return f"sc->{member}"


@dataclass
class StringSource:
    """Where a string value's pointer and status live (for record fields)."""

    ptr: str
    status: str


def slot_member(slot: ArgSlot) -> str:
    ctype = "__s64" if (slot.kind == "int" and slot.signed) else "__u64"
    return f"{ctype} v{slot.index};"


def thunk_reads(site: AttachSite, probe: ResolvedProbe, machine: str) -> list[str]:
    """C statements that fill `pr_a` (struct pr_args_<probe>) at one site."""
    lines: list[str] = []
    for slot in probe.slots:
        operand = site.args[slot.index] if slot.index < len(site.args) else None
        if operand is None:
            continue
        lines.extend(lower_operand(operand, site.pc, machine, f"pr_a.v{slot.index}"))
    return lines


def tracepoint_reads(probe: ResolvedProbe) -> list[str]:
    """C statements that fill `pr_a` from a tracepoint record (`ctx`)."""
    lines = []
    by_name = {f.name: f for f in probe.tracepoint_fields}
    for slot in probe.slots:
        fld = by_name[slot.name or ""]
        if fld.is_string and fld.array_len:
            lines.append(f"pr_a.v{slot.index} = (__u64)((char *)ctx + {fld.offset});")
        elif fld.is_string:
            lines.append(f"pr_a.v{slot.index} = (__u64)((char *)ctx + "
                         f"(*(__u32 *)((char *)ctx + {fld.offset}) & 0xffff));")
        else:
            ctype = f"__{'s' if fld.signed else 'u'}{fld.size * 8}"
            lines.append(f"pr_a.v{slot.index} = *({ctype} *)((char *)ctx + {fld.offset});")
    return lines


def string_reads(probe: ResolvedProbe, scratch: Scratch, kernel: bool,
                 sources: dict[str, StringSource]) -> list[str]:
    """Read the probe's string arguments into scratch once, at the top of the body."""
    lines = []
    for slot in probe.slots:
        if slot.kind == "int":
            continue
        i = slot.index
        scratch.members.append(f"char s{i}[{slot.size + 1}];")
        scratch.members.append(f"__s64 st{i};")
        sources[f"sc->s{i}"] = StringSource(f"a->v{i}", f"sc->st{i}")
        if slot.kind == "lstring" and slot.length_expr is not None:
            low = lower(slot.length_expr, scratch)
            lines.extend(low.prelude)
            lines.append(f"sc->st{i} = pr_read_lstr(sc->s{i}, {slot.size}, a->v{i}, "
                         f"(__s64)({low.c}));")
        elif kernel:
            arrays = {f.name for f in probe.tracepoint_fields if f.array_len}
            more = 0 if slot.name in arrays else 1
            lines.append(f"sc->st{i} = pr_read_kstr(sc->s{i}, {slot.size + 1}, a->v{i}, "
                         f"{more});")
        else:
            lines.append(f"sc->st{i} = pr_read_str(sc->s{i}, {slot.size + 1}, a->v{i});")
    return lines


def condition(texpr: TExpr | None, scratch: Scratch) -> list[str]:
    """Statements that `break` out of the enclosing do-while when `texpr` is false."""
    if texpr is None:
        return []
    low = lower(texpr, scratch)
    return [*low.prelude, f"if (!({low.c})) break;"]


def layout_for(output_id: int, fields: list[tuple[str, TExpr]]) -> RecordLayout:
    out = []
    for i, (key, texpr) in enumerate(fields):
        typ = texpr.type
        if isinstance(typ, StrType):
            out.append(LayoutField(key, "str", f"f{i}", typ.size))
        elif isinstance(typ, BoolType):
            out.append(LayoutField(key, "bool", f"f{i}"))
        else:
            assert isinstance(typ, IntType)
            out.append(LayoutField(key, "int" if typ.signed else "uint", f"f{i}"))
    return RecordLayout(output_id, f"pr_rec_{output_id}", tuple(out))


@dataclass
class StrField(StringSource):
    buf: str = ""


def str_field_read(texpr: TStrRead, scratch: Scratch, body: list[str]) -> StrField:
    """A record field that is itself `str(...)`: read with a status, so that the record
    says null for a NULL pointer and lists the key in `truncated` when it was cut."""
    addr = lower(texpr.addr, scratch)
    body.extend(addr.prelude)
    buf = scratch.alloc(texpr.cap + 1)
    status = buf + "_st"
    scratch.members.append(f"__s64 {status[len('sc->'):]};")
    ptr = "pr_p_" + buf[len("sc->"):]
    body.append(f"__u64 {ptr} = (__u64)({addr.c});")
    if texpr.length is None:
        body.append(f"{status} = pr_read_str({buf}, {texpr.cap + 1}, {ptr});")
    else:
        length = lower(texpr.length, scratch)
        body.extend(length.prelude)
        body.append(f"{status} = pr_read_lstr({buf}, {texpr.cap}, {ptr}, "
                    f"(__s64)({length.c}));")
    return StrField(ptr, status, buf)


def print_block(layout: RecordLayout, fields: list[tuple[str, TExpr]], where: TExpr | None,
                scratch: Scratch, sources: dict[str, StringSource]) -> list[str]:
    """One `print` output: filter, reserve a record, fill it, submit. Strings are copied
    up to their NUL (the decoder cuts there): the tail of the buffer is never written."""
    body = condition(where, scratch)
    fills: list[str] = []
    for lf, (_key, texpr) in zip(layout.fields, fields, strict=True):
        if lf.kind == "str" and isinstance(texpr, TStrRead):
            src = str_field_read(texpr, scratch, body)
            dst = f"ev->{lf.member}"
            fills += [f"{dst}_ptr = {src.ptr};", f"{dst}_st = {src.status};",
                      f"bpf_probe_read_kernel_str({dst}, {lf.size}, {src.buf});"]
            continue
        low = lower(texpr, scratch)
        body.extend(low.prelude)
        dst = f"ev->{lf.member}"
        if lf.kind == "str":
            src = sources.get(texpr.c_expr) if isinstance(texpr, TVar) else None
            fills.append(f"{dst}_ptr = {src.ptr if src else '0'};")
            fills.append(f"{dst}_st = {src.status if src else 'PR_STR_OK'};")
            fills.append(f"bpf_probe_read_kernel_str({dst}, {lf.size}, {low.c});")
        else:
            ctype = "__s64" if lf.kind == "int" else "__u64"
            fills.append(f"{dst} = ({ctype})({low.c});")
    body.append(f"struct {layout.c_name} *ev = pr_events.ringbuf_reserve("
                f"sizeof(struct {layout.c_name}));")
    body.append("if (!ev) { pr_count(PR_LOST_RINGBUF); break; }")
    body.append(f"pr_fill_hdr(&ev->h, {layout.output_id}, pr_id, pr_ts);")
    body.extend(fills)
    body.append(f"pr_events.ringbuf_submit(ev, pr_wakeup_flags(sizeof(struct {layout.c_name})));")
    return body
