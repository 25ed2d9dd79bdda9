"""Per-probe C statements: operand reads (thunks), string reads, filters and print
records. Aggregation map updates live in render/aggregates.py, span bookkeeping in
render/spans.py.

`Body` is the probe body being emitted: it names the C of every symbolic reference
(`c_of`), hands out scratch buffers (`alloc`) and records what the statements need
(builtins the prologue must compute, helpers the program must include, whether a read
faults pages in and so makes the probe sleepable: `fault`), so that
render/program.py decides what to emit from that data, never by reading the C back.
Everything emitted comes from typed models: generated names (`pr_...`), integers
formatted here, lowered expressions (render/expr_c.py, which owns literal escaping) and
operand reads (render/operand_c.py). No plan text is pasted.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from planrunner.expr.typed import (
    ArgRef,
    Builtin,
    BuiltinRef,
    CaptureRef,
    DepthRef,
    LatencyRef,
    ParamRef,
    Ref,
    StackRef,
    TExpr,
    TRef,
    TStrRead,
    names_symbols,
)
from planrunner.expr.types import BoolType, IntType, StackType, StrType, SymType
from planrunner.plan.model import StackSpec
from planrunner.probe_kinds import kind
from planrunner.render import pyframes
from planrunner.render.expr_c import lower
from planrunner.render.layout import LayoutField, RecordLayout
from planrunner.render.names import c_ident
from planrunner.render.needs import Helper
from planrunner.render.operand_c import lower_operand
from planrunner.render.params import c_of_param
from planrunner.render.stacks import copied, pid_notice_lines, ustack_copy_lines
from planrunner.resolve.model import ArgSlot, ResolvedProbe, ResolvedSite

# Builtins the prologue can compute, in prologue order; the body computes only what it
# uses (pid and tid always: pr_id holds both).
PROLOGUE: dict[Builtin, str] = {
    "pid": "__u32 pr_pid = pr_id >> 32;",
    "tid": "__u32 pr_tid = (__u32)pr_id;",
    "uid": "__u32 pr_uid = (__u32)bpf_get_current_uid_gid();",
    "gid": "__u32 pr_gid = bpf_get_current_uid_gid() >> 32;",
    "cpu": "__u32 pr_cpu = bpf_get_smp_processor_id();",
    "ts": "__u64 pr_ts = bpf_ktime_get_ns();",
    # no helper where the kernel has BTF (runtime_helpers.h pr_current_comm)
    "comm": "char pr_comm[16] __attribute__((aligned(8)));\n    pr_current_comm(pr_comm);",
    # the name of the function, probe or event that fired: the thunk set a->func to
    # its index in the program's name table (a set's attach cookie, else a constant)
    "func": "char pr_func[PR_FUNC_SIZE] = {};\n    {\n        __u32 pr_fk = a->func;\n"
            "        struct pr_func_name *pr_fv = pr_func_names.lookup(&pr_fk);\n"
            "        if (pr_fv)\n            __builtin_memcpy(pr_func, pr_fv->s, PR_FUNC_SIZE);\n"
            "    }",
}


@dataclass
class StringSource:
    """Where a string value's user pointer and read status live (for record fields), and
    the bytes it takes in its buffer with its NUL (`length`, "" when not kept)."""

    ptr: str
    status: str
    length: str = ""


@dataclass(frozen=True, slots=True)
class ScratchMember:
    """One member of a probe's per-CPU scratch struct: its C declaration, and the string
    argument whose buffer, status or length it is (None: anything else)."""

    decl: str
    string_of: int | None = None


@dataclass
class Body:
    """One probe body under construction (see the module docstring)."""

    scratch_name: str
    slots: dict[int, ArgSlot]
    scratch: list[ScratchMember] = field(default_factory=list)  # through `member`
    builtins: set[Builtin] = field(default_factory=lambda: {"pid", "tid"})
    helpers: set[Helper] = field(default_factory=set)
    captures: dict[CaptureRef, str] = field(default_factory=dict)  # the span being ended
    # of those, the user stacks kept as the hash of a copy, with its unwind mode
    copied_captures: dict[CaptureRef, str] = field(default_factory=dict)
    stack: StackSpec = field(default_factory=StackSpec)  # how the probe captures ustack
    ucopy_bytes: int = 0  # the largest stack copy an aggregation key hashes (pr_ucopies)
    ucopy_python: int = 0  # Python frames each pr_ucopies value holds (render/pyframes.py)
    # A user-space probe's body: its user-memory reads may fault pages in, which makes
    # its program sleepable (`sleepable`, set by the first such read) where the kernel
    # allows. Never a tracepoint's: a tracepoint program cannot sleep.
    faults: bool = False
    sleepable: bool = False
    announces: bool = False  # sends "new process" notices (pid_notice_lines)
    # string arguments read straight into their print record (render/program.py
    # `_print_only_strings`), not at the top of the body
    direct: frozenset[int] = frozenset()
    # the scratch holds only those strings' buffers: looked up where one is too long
    # (direct_read_lines), not at the top of the body
    lazy_scratch: bool = False
    _tmp: int = 0

    # -- LoweringContext (render/expr_c.py) ------------------------------------------

    def alloc(self, size: int) -> str:
        """A fresh char[size] buffer in the scratch struct."""
        member = f"t{self._tmp}"
        self._tmp += 1
        self.member(f"char {member}[{size}];")
        return f"sc->{member}"

    def c_of(self, ref: Ref) -> str:
        if isinstance(ref, ArgRef):
            return arg_value(self.slots[ref.index])
        if isinstance(ref, BuiltinRef):
            return self.builtin(ref.name)
        if isinstance(ref, LatencyRef):  # set by render/spans.end_block
            return latency_local(ref.span)
        if isinstance(ref, DepthRef):
            return f"pr_depth_{c_ident(ref.span)}"  # set by render/spans.nested_prologue
        if isinstance(ref, StackRef):  # a stack id, taken by the thunk (render/stacks.py)
            assert ref.kind == "kernel" or not copied(self.stack), "a copy has no id"
            return "a->kstack" if ref.kind == "kernel" else "a->ustack"
        if isinstance(ref, ParamRef):
            return c_of_param(ref)
        return self.captures[ref]

    def need(self, helper: Helper) -> None:
        self.helpers.add(helper)

    def fault(self) -> bool:
        """Whether the user-memory read being emitted may fault pages in; when it may,
        the body is now sleepable."""
        self.sleepable = self.sleepable or self.faults
        return self.faults

    def fault_arg(self) -> str:
        """The `fault` argument of the readers in templates/runtime_helpers.h."""
        return "PR_FAULT" if self.fault() else "PR_NOFAULT"

    # -- the rest --------------------------------------------------------------------

    def member(self, decl: str, string_of: int | None = None) -> None:
        """Declare a member of the scratch struct (`string_of`: see ScratchMember)."""
        self.scratch.append(ScratchMember(decl, string_of))

    @property
    def members(self) -> tuple[str, ...]:
        """The scratch struct's member declarations, in order."""
        return tuple(m.decl for m in self.scratch)

    def scratch_only_for_direct_strings(self) -> bool:
        """Whether the scratch holds nothing but the buffers of the strings read straight
        into their print record (`direct`)."""
        return all(m.string_of is not None and m.string_of in self.direct
                   for m in self.scratch)

    def builtin(self, name: Builtin) -> str:
        """The C local holding builtin `name`, which the prologue will now compute."""
        self.builtins.add(name)
        return f"pr_{name}"

    def string_source(self, ref: Ref) -> StringSource | None:
        """Where the pointer and status of the string `ref` names live, when it has them
        (a string argument, or a capture of one); None for strings always read whole."""
        if isinstance(ref, ArgRef) and self.slots[ref.index].kind != "int":
            return StringSource(f"a->v{ref.index}", f"sc->st{ref.index}",
                                f"sc->n{ref.index}")
        if isinstance(ref, CaptureRef) and isinstance(ref.expr.type, StrType):
            member = self.captures[ref]
            return StringSource(f"{member}_ptr", f"{member}_st")
        return None


def arg_value(slot: ArgSlot) -> str:
    """The C of argument `slot`'s value in a body: a string's buffer, else the integer."""
    if slot.kind == "int":
        return f"a->v{slot.index}"
    return f"sc->s{slot.index}"


def slot_member(slot: ArgSlot) -> str:
    ctype = "__s64" if (slot.kind == "int" and slot.signed) else "__u64"
    return f"{ctype} v{slot.index};"


def thunk_reads(site: ResolvedSite, probe: ResolvedProbe, machine: str) -> list[str]:
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


def string_reads(probe: ResolvedProbe, body: Body) -> list[str]:
    """Read the probe's string arguments into scratch once, at the top of the body."""
    kernel = kind(probe.spec.kind).fields  # a kernel event's fields
    lines: list[str] = []
    for slot in probe.slots:
        if slot.kind == "int":
            continue
        i = slot.index
        body.member(f"char s{i}[{slot.size + 1}];", string_of=i)
        body.member(f"__s64 st{i};", string_of=i)
        body.member(f"__u32 n{i};", string_of=i)
        if i in body.direct:
            continue
        if slot.kind == "lstring" and slot.length_expr is not None:
            low = lower(slot.length_expr, body)
            lines.extend(low.prelude)
            body.need(Helper.READ_LSTR)
            lines.append(f"sc->st{i} = pr_read_lstr(sc->s{i}, {slot.size}, a->v{i}, "
                         f"(__s64)({low.c}), {body.fault_arg()}, &sc->n{i});")
        elif kernel:
            arrays = {f.name for f in probe.tracepoint_fields if f.array_len}
            more = 0 if slot.name in arrays else 1
            body.need(Helper.READ_KSTR)
            lines.append(f"sc->st{i} = pr_read_kstr(sc->s{i}, {slot.size + 1}, a->v{i}, "
                         f"{more}, &sc->n{i});")
        else:
            body.need(Helper.READ_STR)
            lines.append(f"sc->st{i} = pr_read_str(sc->s{i}, {slot.size + 1}, a->v{i}, "
                         f"{body.fault_arg()}, &sc->n{i});")
    return lines


def condition(texpr: TExpr | None, body: Body) -> list[str]:
    """Statements that `break` out of the enclosing do-while when `texpr` is false."""
    if texpr is None:
        return []
    low = lower(texpr, body)
    return [*low.prelude, f"if (!({low.c})) break;"]


def symbol_notice(exprs: list[TExpr], body: Body) -> list[str]:
    """Before an output whose record or key holds a `usym(...)`: the address is named
    over its process's maps in user space, so the first event of each process wakes the
    reader to read them before the process can exit (render/stacks.py)."""
    if not any(names_symbols(e) for e in exprs):
        return []
    body.announces = True
    return pid_notice_lines()


def latency_local(span: str) -> str:
    """The end block's local holding span `span`'s latency (a span on a span may read
    the latency of the span it ends at, inside its own end block)."""
    return f"pr_latency_{c_ident(span)}"


def stack_copied(texpr: TExpr, spec: StackSpec) -> bool:
    """A user stack of this probe that the body copies (dwarf, auto), not an id."""
    return (isinstance(texpr, TRef) and isinstance(texpr.ref, StackRef)
            and texpr.ref.kind == "user" and copied(spec))


def length_known(texpr: TExpr) -> bool:
    """A string field whose length the body has before it reserves the record: a string
    argument (read once at the top of the body) or a `str(...)` read (see StringSource)."""
    if isinstance(texpr, TStrRead):
        return True
    return (isinstance(texpr, TRef) and isinstance(texpr.ref, ArgRef)
            and isinstance(texpr.type, StrType))


def layout_for(output_id: int, fields: list[tuple[str, TExpr]],
               stack: StackSpec | None = None) -> RecordLayout:
    spec = stack or StackSpec()
    out = []
    for i, (key, texpr) in enumerate(fields):
        typ = texpr.type
        if isinstance(typ, StackType) and stack_copied(texpr, spec):
            out.append(LayoutField(key, "ucopy", f"f{i}", spec.bytes, typ.kind, typ.limit,
                                   spec.unwind, pyframes.frames_kept(spec)))
        elif isinstance(typ, StackType):
            out.append(LayoutField(key, "stack", f"f{i}", 8, typ.kind, typ.limit))
        elif isinstance(typ, SymType):
            out.append(LayoutField(key, "usym", f"f{i}"))
        elif isinstance(typ, StrType):
            out.append(LayoutField(key, "str", f"f{i}", typ.size))
        elif isinstance(typ, BoolType):
            out.append(LayoutField(key, "bool", f"f{i}"))
        else:
            assert isinstance(typ, IntType)
            out.append(LayoutField(key, "int" if typ.signed else "uint", f"f{i}"))
    fixed = RecordLayout(output_id, f"pr_rec_{output_id}", tuple(out))
    last = fixed.last_string
    texprs = {f"f{i}": texpr for i, (_key, texpr) in enumerate(fields)}
    if last is None or not length_known(texprs[last.member]):
        return fixed
    variable = RecordLayout(output_id, fixed.c_name, fixed.fields, variable=True)
    return variable if len(variable.sizes) > 1 else fixed  # else no shorter size


@dataclass
class StrField(StringSource):
    buf: str = ""


def str_field_read(texpr: TStrRead, body: Body, lines: list[str]) -> StrField:
    """A record field that is itself `str(...)`: read with a status, so that the record
    says null for a NULL pointer and lists the key in `truncated` when it was cut."""
    addr = lower(texpr.addr, body)
    lines.extend(addr.prelude)
    buf = body.alloc(texpr.cap + 1)
    status, length = buf + "_st", buf + "_n"
    body.member(f"__s64 {status[len('sc->'):]};")
    body.member(f"__u32 {length[len('sc->'):]};")
    ptr = "pr_p_" + buf[len("sc->"):]
    lines.append(f"__u64 {ptr} = (__u64)({addr.c});")
    if texpr.length is None:
        body.need(Helper.READ_STR)
        lines.append(f"{status} = pr_read_str({buf}, {texpr.cap + 1}, {ptr}, "
                     f"{body.fault_arg()}, &{length});")
    else:
        size = lower(texpr.length, body)
        lines.extend(size.prelude)
        body.need(Helper.READ_LSTR)
        lines.append(f"{status} = pr_read_lstr({buf}, {texpr.cap}, {ptr}, "
                     f"(__s64)({size.c}), {body.fault_arg()}, &{length});")
    return StrField(ptr, status, length, buf)


def print_block(layout: RecordLayout, fields: list[tuple[str, TExpr]], where: TExpr | None,
                body: Body) -> list[str]:
    """One `print` output: filter, reserve a record, fill it, submit. Strings are copied
    up to their NUL (the decoder cuts there): the tail of the buffer is never written.
    A variable layout (render/layout.py) reserves by the length of its last string."""
    lines = condition(where, body) + symbol_notice([e for _, e in fields], body)
    fills: list[str] = []
    last = layout.last_string if layout.variable else None
    last_copy: tuple[str, str] = ("", "")  # (the string's length, its source buffer)
    direct: int | None = None  # the argument read straight into the record (Body.direct)
    for lf, (_key, texpr) in zip(layout.fields, fields, strict=True):
        if lf.kind == "ucopy":
            fills += ustack_copy_lines(f"ev->{lf.member}_", lf.size, lf.python, lf.python)
            continue
        if lf.kind == "str" and isinstance(texpr, TStrRead):
            src = str_field_read(texpr, body, lines)
            dst = f"ev->{lf.member}"
            fills += [f"{dst}_ptr = {src.ptr};", f"{dst}_st = {src.status};"]
            if lf is last:
                last_copy = (src.length, src.buf)
            else:
                fills.append(f"bpf_probe_read_kernel_str({dst}, {lf.size}, {src.buf});")
            continue
        low = lower(texpr, body)
        lines.extend(low.prelude)
        dst = f"ev->{lf.member}"
        if lf.kind == "str":
            source = body.string_source(texpr.ref) if isinstance(texpr, TRef) else None
            fills.append(f"{dst}_ptr = {source.ptr if source else '0'};")
            fills.append(f"{dst}_st = {source.status if source else 'PR_STR_OK'};")
            if lf is last and isinstance(texpr, TRef) and isinstance(texpr.ref, ArgRef) \
                    and texpr.ref.index in body.direct:
                direct = texpr.ref.index
                fills[-1] = f"{dst}_st = pr_st_{layout.output_id};"
            elif lf is last:
                assert source is not None and source.length, "layout_for: length known"
                last_copy = (source.length, low.c)
            else:
                fills.append(f"bpf_probe_read_kernel_str({dst}, {lf.size}, {low.c});")
        else:
            ctype = "__s64" if lf.kind in ("int", "stack") else "__u64"
            fills.append(f"{dst} = ({ctype})({low.c});")
            if lf.kind == "stack":
                fills.append(f"if ({dst} < 0 && {dst} != -EFAULT) pr_count(PR_STACK_LOST);")
    rec = f"struct {layout.c_name}"
    if last is not None and direct is not None:
        lines += direct_read_lines(layout, last, direct, body)
        size = f"pr_size_{layout.output_id}"
    elif last is None:
        size = f"sizeof({rec})"
        lines.append(f"{rec} *ev = pr_events.ringbuf_reserve({size});")
    else:
        lines += _reserve_by_length(layout, last, *last_copy)
        size = f"pr_size_{layout.output_id}"
    if direct is None:
        lines.append("if (!ev) { pr_lost_record(); break; }")
    lines.append(f"pr_fill_hdr(&ev->h, {layout.output_id}, pr_id, {body.builtin('ts')});")
    lines.extend(fills)
    lines.append(f"pr_events.ringbuf_submit(ev, pr_wakeup_flags({size}));")
    return lines


def direct_read_lines(layout: RecordLayout, last: LayoutField, index: int, body: Body
                      ) -> list[str]:
    """Read string argument `index` straight into the smallest record that may hold it;
    one that does not fit (the reader says it was cut) is discarded, read whole into
    scratch and reserved by its length (`_reserve_by_length`, as without this path).
    Sets `ev`, `pr_size_N` and the status `pr_st_N`."""
    n, small = layout.output_id, layout.sizes[0]
    room = min(small - layout.prefix_size, last.size)
    rec, dst, fault = f"struct {layout.c_name}", f"ev->{last.member}", body.fault_arg()
    body.need(Helper.READ_STR)
    whole = f"sc->s{index}"
    lookup = scratch_lookup_lines(body) if body.lazy_scratch else []
    return [
        f"__u32 pr_size_{n} = {small};",
        f"__u32 pr_len_{n};",
        f"{rec} *ev = pr_events.ringbuf_reserve({small});",
        "if (!ev) { pr_lost_record(); break; }",
        f"__s64 pr_st_{n} = pr_read_str({dst}, {room}, a->v{index}, {fault}, &pr_len_{n});",
        f"if (pr_st_{n} == PR_STR_TRUNCATED) {{",
        "    pr_events.ringbuf_discard(ev, BPF_RB_NO_WAKEUP);",
        *[f"    {line}" for line in lookup],
        f"    pr_st_{n} = pr_read_str({whole}, {last.size}, a->v{index}, {fault}, "
        f"&pr_len_{n});",
        *[f"    {line}" for line in _reserve_by_length(layout, last, f"pr_len_{n}", whole,
                                                      declare=False)],
        "    if (!ev) { pr_lost_record(); break; }",
        "}",
    ]


def scratch_lookup_lines(body: Body) -> list[str]:
    """Look the scratch up here (Body.lazy_scratch), as the template does at the top of
    other bodies: the task's own under PR_SLEEPABLE, else the CPU's."""
    name = body.scratch_name
    percpu = ["__u32 pr_zero = 0;", f"struct {name} *sc = {name}.lookup(&pr_zero);"]
    if not body.sleepable:
        return [*percpu, "if (!sc) break;"]
    return ["#ifdef PR_SLEEPABLE",
            f"struct {name} *sc = {name}.task_storage_get(",
            "    bpf_get_current_task_btf(), 0, BPF_LOCAL_STORAGE_GET_F_CREATE);",
            "#else", *percpu, "#endif", "if (!sc) break;"]


def _reserve_by_length(layout: RecordLayout, last: LayoutField, length: str, src: str,
                       declare: bool = True) -> list[str]:
    """Reserve the smallest of the layout's sizes that holds the last string (`length`
    bytes with its NUL), and copy the string into it. Each branch reserves a constant
    size and copies at most what it reserved, so the verifier sees every access in
    bounds on its own path."""
    n = layout.output_id
    rec, dst = f"struct {layout.c_name}", f"ev->{last.member}"
    out = ([f"__u32 pr_len_{n} = {length};", f"__u32 pr_size_{n};", f"{rec} *ev;"]
           if declare else [])
    for i, size in enumerate(layout.sizes):
        room = min(size - layout.prefix_size, last.size)
        head = "if" if i == 0 else "} else if"
        if size == layout.size:
            out.append("} else {" if i else "{")
            size_c = f"sizeof({rec})"
        else:
            out.append(f"{head} (pr_len_{n} <= {room}) {{")
            size_c = str(size)
        out += [f"    pr_size_{n} = {size_c};",
                f"    ev = pr_events.ringbuf_reserve({size_c});",
                "    if (ev)",
                f"        bpf_probe_read_kernel_str({dst}, {room}, {src});"]
    out.append("}")
    return out
