"""Stacks in C: what a thunk captures, what a record or an aggregation key holds, and the
maps behind them. The reader is runtime/stacks.py; the capture contract of a copied
user stack is planrunner/stacks/__init__.py's.

- Kernel stacks (`kstack`), and user stacks with `unwind: fp`, are walked by the kernel in
  the thunk (`get_stackid`, the thunk has `ctx`) into a stack map of addresses; the
  record or key holds the id (__s64; negative: not captured, counted in
  PR_STACK_LOST). User addresses are symbolized over the process's maps at the event
  (the kernel's mmap records, runtime/task_events.py), so a process that exited or
  unloaded a library still symbolizes. (A BPF_F_STACK_BUILD_ID map would need no maps,
  but the kernel's build-id lookup per frame costs more than the walk: issue 17.)
- User stacks with `unwind: dwarf | auto`: the thunk saves ip, sp and bp in `pr_args`;
  the body copies up to `bytes` of the stack from sp. A print record holds the copy
  (`struct pr_ustack` inline, last in the record, so only the bytes copied are
  written); an aggregation key holds a hash of the copy (and the tgid), the copy itself
  goes once per hash into the `pr_ucopies` map, which the reader drains, unwinds and
  empties every turn: nothing of 16 KiB crosses per event.
- Templates (issue 28 item 5): a profile's samples are new copies (a local changed) of
  the same native stack. For each copy it unwinds, the reader writes into `pr_utmpl`,
  keyed by (tgid, copy length, ip, sp), the words and frame pointer that walk used
  (stacks/walk_template.py). A later copy under that key with the same values walks the
  same way: the key then holds a hash of the template's id and the Python frames, and
  `pr_ulight` gets the copy's head and Python section (~1 KiB) instead of 16 KiB to
  unwind (runtime/stack_templates.py). A template also holds for the other pcs of its
  first step's CFI row (walk_template.first_span): it is also under the key of each
  page of that span (ip field SPAN_PAGE | page), with the span's bounds, which the
  match checks when the pc's own key is absent; such a sample's hash takes its pc.
- Known light copies: with Python frames, a light copy's hash takes the template's class
  (one id for a process's templates whose named frames are the same but for the eval
  loop frame the Python frames replace) and each frame's line where the reader wrote it
  into `pr_pyline` (else its instruction), so samples that show the same stack have one
  hash; the reader writes each hash it has named into `pr_uknown`, and a light copy
  whose hash is there is not sent again: a profile's steady state sends nothing.
"""

from __future__ import annotations

from planrunner.expr.types import StackKind, StackType
from planrunner.plan.model import StackSpec
from planrunner.render import pyframes
from planrunner.render.contracts import (
    SPAN_PAGE,
    SPAN_PAGE_SHIFT,
    TEMPLATE_WORDS,
    UTMPL_KEY,
    UTMPL_VAL,
)
from planrunner.render.model import NEWPID_OUTPUT, UCOPY_ENTRIES, StackMaps
from planrunner.render.names import c_ident

# Entries of each stack-id map; a full map (a hash collision, the kernel's stack maps
# keep one stack per bucket) makes get_stackid fail: counted, shown as an empty stack.
STACK_MAP_ENTRIES = 4096
# Processes already announced to the reader (see pid_notice_lines).
SEEN_MAP = "pr_seen"
SEEN_ENTRIES = 16384

KSTACK_MAP = "pr_kstacks"
USTACK_MAP = "pr_ustacks"
UCOPY_MAP = "pr_ucopies"
ULIGHT_MAP = "pr_ulight"  # copies whose native stack is a template's (docstring)
UTMPL_MAP = "pr_utmpl"
UKNOWN_MAP = "pr_uknown"  # light copies' hashes the reader has named (docstring)
UKNOWN_ENTRIES = 16384
# Templates kept (an LRU map: the reader writes, the oldest go): a CPython worker's
# samples fall on a few hundred (ip, sp) pairs.
UTMPL_ENTRIES = 4096
# struct pr_ustack's head: pid, len, time, regs[4] (then a Python section, if any)
USTACK_HEAD = 48
# the same head in the copies map's value and, after the template's id, a light copy's
_COPY_HEAD = "    __u32 pid;\n    __u32 len;\n    __u64 time;\n    __u64 regs[4];\n"


def copied(spec: StackSpec) -> bool:
    """User stacks are copied and unwound in user space (dwarf, auto)."""
    return spec.unwind != "fp"


def arg_members(stacks: tuple[StackKind, ...], spec: StackSpec) -> list[str]:
    """Members of struct pr_args_<probe> the thunk fills."""
    out = []
    for kind in stacks:
        if kind == "kernel":
            out.append("__s64 kstack;")
        elif copied(spec):
            out.append("__u64 u_regs[3];  /* ip, sp, bp at the event */")
        else:
            out.append("__s64 ustack;")
    return out


def thunk_lines(stacks: tuple[StackKind, ...], spec: StackSpec, perf: bool) -> list[str]:
    """C statements of a thunk (`ctx` in scope) that capture the probe's stacks. A perf
    event's ctx holds the registers of whatever was interrupted (the kernel, often), a
    tracepoint's its fields (`perf` for both): the user registers are at the top of the
    task's kernel stack."""
    out = []
    for kind in stacks:
        if kind == "kernel":
            out.append(f"pr_a.kstack = {KSTACK_MAP}.get_stackid(ctx, 0);")
        elif not copied(spec):
            out.append(f"pr_a.ustack = {USTACK_MAP}.get_stackid(ctx, BPF_F_USER_STACK);")
        elif perf:
            out += ["struct pt_regs pr_ur = {};",
                    "bpf_probe_read_kernel(&pr_ur, sizeof(pr_ur), "
                    "(void *)bpf_task_pt_regs(bpf_get_current_task_btf()));",
                    "pr_a.u_regs[0] = pr_ur.ip;", "pr_a.u_regs[1] = pr_ur.sp;",
                    "pr_a.u_regs[2] = pr_ur.bp;"]
        else:
            out += ["pr_a.u_regs[0] = ctx->ip;", "pr_a.u_regs[1] = ctx->sp;",
                    "pr_a.u_regs[2] = ctx->bp;"]
    return out


def map_decls(maps: StackMaps) -> list[str]:
    """One declaration (struct and map) per stack map."""
    out = []
    if maps.kernel:
        name, frames = maps.kernel
        out.append(f"struct {name}_val {{\n    __u64 ip[{frames}];\n}};\n"
                   f'BPF_TABLE("stacktrace", int, struct {name}_val, {name}, '
                   f"{STACK_MAP_ENTRIES});")
    if maps.user:
        name, frames = maps.user
        out.append(f"struct {name}_val {{\n    __u64 ip[{frames}];\n}};\n"
                   f'BPF_TABLE("stacktrace", int, struct {name}_val, {name}, '
                   f"{STACK_MAP_ENTRIES});")
    if maps.seen:
        out.append(f'BPF_TABLE("lru_hash", __u32, __u8, {SEEN_MAP}, {SEEN_ENTRIES});')
    if maps.copies:
        name, size = maps.copies
        py = "".join(f"    {m}\n" for m in pyframes.members("", maps.python))
        out.append(f"struct {name}_val {{\n{_COPY_HEAD}{py}    char data[{size}];\n}};\n"
                   f"BPF_HASH({name}, __u64, struct {name}_val, {UCOPY_ENTRIES});")
        out.append(_template_decls(name, size, py, maps.python))
    return out


def _template_decls(copies: str, size: int, py: str, py_capacity: int) -> str:
    """The light copies map, the templates map and the match (see the docstring). A
    light copy is the template's id, then the copy's head and Python section as
    pr_ucopies lays them out (copied in one read, up to `data`)."""
    key, val = UTMPL_KEY.name, UTMPL_VAL.name
    return (f"struct {ULIGHT_MAP}_val {{\n    __u64 tmpl;\n{_COPY_HEAD}{py}}};\n"
            f"BPF_HASH({ULIGHT_MAP}, __u64, struct {ULIGHT_MAP}_val, {UCOPY_ENTRIES});\n"
            f'BPF_TABLE("lru_hash", __u64, __u8, {UKNOWN_MAP}, {UKNOWN_ENTRIES});\n'
            f"{pyframes.line_map_decl(py_capacity)}"
            f"{UTMPL_KEY.c_definition}{UTMPL_KEY.c_asserts}"
            f"{UTMPL_VAL.c_definition}{UTMPL_VAL.c_asserts}"
            f'BPF_TABLE("lru_hash", struct {key}, struct {val}, {UTMPL_MAP}, {UTMPL_ENTRIES});\n'
            f"/* The id of the template copy c's native stack is (0: none holds), its\n"
            f"   class in *cls, and whether its pc is hidden by Python frames in *hidden:\n"
            f"   the template of c's pc, or of a span of pcs under c's pc's page. */\n"
            f"static __always_inline __u64 {UTMPL_MAP}_match(struct {copies}_val *c, "
            f"__u64 *cls, __u32 *hidden)\n"
            f"{{\n"
            f"    struct {key} k = {{c->pid, c->len, c->regs[0], c->regs[1]}};\n"
            f"    struct {val} *t = {UTMPL_MAP}.lookup(&k);\n"
            f"    if (!t) {{\n"
            f"        k.ip = {SPAN_PAGE:#x}ULL | (c->regs[0] >> {SPAN_PAGE_SHIFT});\n"
            f"        t = {UTMPL_MAP}.lookup(&k);\n"
            f"        if (!t || c->regs[0] < t->lo || c->regs[0] >= t->hi)\n"
            f"            return 0;\n"
            f"    }}\n"
            f"    if (t->bp_used && t->bp != c->regs[2])\n"
            f"        return 0;\n"
            f"    __u32 n = t->n;\n"
            f"    for (__u32 i = 0; i < {TEMPLATE_WORDS}; i++) {{\n"
            f"        if (i >= n)\n"
            f"            break;\n"
            f"        __u32 o = t->off[i];\n"
            f"        if (o > {size - 8} || *(__u64 *)(c->data + o) != t->val[i])\n"
            f"            return 0;\n"
            f"    }}\n"
            f"    *cls = t->cls;\n"
            f"    *hidden = t->hidden;\n"
            f"    return t->id;\n"
            f"}}")


def pid_notice_lines() -> list[str]:
    """At the top of a body that copies user stacks: the first event of a process sends
    a notice with a forced wakeup, so that the reader snapshots the process's maps
    before it can exit (a copy is unwound over them, runtime/stacks.py)."""
    return ["{  /* a process seen for the first time: wake the reader now */",
            "    __u32 pr_tgid = pr_id >> 32;",
            f"    if (!{SEEN_MAP}.lookup(&pr_tgid)) {{",
            "        __u8 pr_one = 1;",
            f"        {SEEN_MAP}.update(&pr_tgid, &pr_one);",
            "        struct pr_hdr *pr_n = pr_events.ringbuf_reserve(sizeof(struct pr_hdr));",
            "        if (pr_n) {",
            f"            pr_fill_hdr(pr_n, {NEWPID_OUTPUT:#x}, pr_id, 0);",
            "            pr_events.ringbuf_submit(pr_n, BPF_RB_FORCE_WAKEUP);",
            "        }",
            "    }",
            "}"]


def ustack_copy_lines(dst: str, size: int, py_capacity: int = 0,
                      py_keep: int = 0) -> list[str]:
    """Statements that fill `dst` (a struct pr_ustack with data[size]) from `a->u_regs`:
    a read past the end of the stack mapping fails as a whole, so after the full read
    fails, the largest power-of-two pieces that still succeed are appended. With a
    Python section (`py_capacity` frames), its frames are read first (render/pyframes.py)."""
    lines = [f"{dst}pid = pr_id >> 32;",
             f"{dst}time = bpf_ktime_get_ns();  /* where it falls among maps changes */",
             f"{dst}regs[0] = a->u_regs[0];", f"{dst}regs[1] = a->u_regs[1];",
             f"{dst}regs[2] = a->u_regs[2];", f"{dst}regs[3] = 0;",
             *pyframes.capture_lines(dst, py_capacity, py_keep),
             f"if (bpf_probe_read_user({dst}data, {size}, (void *)a->u_regs[1]) == 0) {{",
             f"    {dst}len = {size};", "} else {", "    __u32 pr_got = 0;"]
    chunk = size // 2
    while chunk >= 256:
        lines += [f"    if (pr_got <= {size - chunk} && bpf_probe_read_user({dst}data + pr_got, "
                  f"{chunk}, (void *)(a->u_regs[1] + pr_got)) == 0)",
                  f"        pr_got += {chunk};"]
        chunk //= 2
    lines += [f"    {dst}len = pr_got;", "}"]
    return lines


def ustack_hash_lines(src: str, size: int, out: str, py_capacity: int = 0,
                      declare: bool = True) -> list[str]:
    """`out` = an FNV-1a-style hash of the copy in `src` (regs, length and the bytes
    copied, 64 at a time: one loop turn per word made the verifier walk 2048 turns per
    path; the last len % 64 bytes, the outermost frames' top, are left out). The loop's
    bound is the length read back from `src` (a map value) through a volatile load: the
    copy's ~64 paths each leave a different constant length in the register, and the
    verifier walked the loop once for each (cpu-profile: 546k instructions processed,
    1.7 s of its load); read back, the length is one unknown and the loop walked once
    (60k, 0.3 s). `declare`: declare `out` (else it is assigned)."""
    words = [f"    {out} = ({out} ^ pr_w[{k}]) * 0x100000001b3ULL;" for k in range(8)]
    return [f"{'__u64 ' if declare else ''}{out} = 0xcbf29ce484222325ULL ^ {src}len;",
            f"{out} = ({out} ^ {src}regs[0]) * 0x100000001b3ULL;",
            f"{out} = ({out} ^ {src}regs[1]) * 0x100000001b3ULL;",
            f"{out} = ({out} ^ {src}regs[2]) * 0x100000001b3ULL;",
            f"__u32 {out}_len = *(volatile __u32 *)&{src}len;",
            f"for (__u32 pr_i = 0; pr_i < {size // 64}; pr_i++) {{",
            f"    if (pr_i * 64 + 64 > {out}_len)",
            "        break;",
            f"    __u64 *pr_w = (__u64 *)({src}data + pr_i * 64);",
            *words,
            "}",
            *pyframes.hash_lines(src, py_capacity, out),
            f"if (!{out})",
            f"    {out} = 1;  /* 0 means: no stack */"]


def frames_of(typ: StackType) -> int:
    return typ.limit


def probe_ucopy_member(probe: str) -> str:
    return f"ucopy_{c_ident(probe)}"


def light_hash_lines(src: str, tmpl: str, cls: str, hidden: str, out: str,
                     py_capacity: int) -> list[str]:
    """`out` = the hash of a light copy: the template's id `tmpl` (unique to a process's
    template: the reader counts them), or with Python frames its class `cls`, then the
    pc unless Python frames hide it (`hidden`: a template of a span holds for other
    pcs), and the Python frames of `src` by line where known (see the docstring)."""
    if py_capacity:
        first = f"({src}py_n ? {cls} : {tmpl})"
        shows_pc = f"!({src}py_n && {hidden})"
    else:
        first, shows_pc = tmpl, "1"
    return [f"{out} = (0x9e3779b97f4a7c15ULL ^ {first}) * 0x100000001b3ULL;",
            f"if ({shows_pc})",
            f"    {out} = ({out} ^ {src}regs[0]) * 0x100000001b3ULL;",
            *pyframes.hash_lines(src, py_capacity, out, by_line=True),
            f"if (!{out})",
            f"    {out} = 1;  /* 0 means: no stack */"]
