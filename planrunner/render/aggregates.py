"""In-kernel aggregation maps and their update statements (count, sum, min, max, avg,
hist, lhist), one map per output.

Contract with runtime/aggregates.py (which reads the maps):

- Map `pr_agg_<index>`: BPF_PERCPU_HASH (no contention between CPUs; the reader sums or
  combines the per-CPU values) from `struct pr_agg_<index>_key` to the value below, with
  `settings.map_size` entries. The key is a render/layout.py KeyLayout (`key_layout`),
  which the reader unpacks with: members `k0, k1, ...` in `by` order, integers and
  bools as __s64/__u64, strings as `char[size rounded up to 8]` holding the string up to
  its NUL and zeros after it, stacks and symbols followed by their tgid (`kI_pid`);
  histograms add `__u64 slot` (the bucket index), so their map holds one entry per
  (key, bucket). Without `by` the key is `__u64 pr_none = 0`.
  The key is zeroed first (on the stack, or in the probe's per-CPU scratch when it holds
  a string), so padding or stale bytes never split a key.
- Values: count `__u64`; sum `__s64` (`__u64` when the value is uint64); min/max
  `struct {__u64 n; __s64 v;}` (n == 0: this CPU saw nothing, so the first value sets
  v); avg `struct {__u64 n; __s64 sum;}`; hist/lhist `struct {__u64 n; __s64 sum;}` per
  (key, slot): the bucket's count and the exact sum of its values (a Prometheus
  histogram's `_sum`).
- log2 slot: the value as an unsigned 64-bit integer, 0 for 0, else 1 + floor(log2 v)
  (records.log2_bucket_index), by an unrolled binary search (no loops for the
  verifier). A negative value is a huge unsigned one: it lands in slot 64.
- lhist slot: 0 below min, 1 + (v - min) / step inside, n + 1 at or above max (n =
  ceil((max - min) / step)); compared signed unless the value is uint64.
- A full map (lookup_or_try_init fails) counts in `pr_counters[PR_LOST_MAPFULL]` (the
  session's stderr report) and in `pr_agg_<index>_lost` (AggSnapshot.dropped): never
  silent. Per-CPU slots are updated without atomics: an update interrupted by another
  program on the same CPU may be lost (BPF programs on one CPU do not nest for uprobes).
"""

from __future__ import annotations

from planrunner.expr.typed import CaptureRef, TExpr, TRef
from planrunner.expr.types import INT64, UINT64, BoolType, IntType, StackType, StrType, SymType
from planrunner.records import lhist_bucket_count
from planrunner.render.bodies import Body, condition, stack_copied, symbol_notice
from planrunner.render.expr_c import c_int_literal, lower
from planrunner.render.layout import KeyField, KeyLayout
from planrunner.render.model import AggregateOutput
from planrunner.render.pyframes import frames_kept
from planrunner.render.stacks import (
    UCOPY_MAP,
    UKNOWN_MAP,
    ULIGHT_MAP,
    UTMPL_MAP,
    light_hash_lines,
    ustack_copy_lines,
    ustack_hash_lines,
)
from planrunner.resolve.model import CheckedField, ResolvedOutput

# Keys up to this size live on the BPF stack (512 bytes in all); larger ones, and keys
# holding strings, live in the probe's per-CPU scratch.
STACK_KEY_MAX = 128
# clang's BPF backend inlines a memset of at most 128 stores (1024 bytes at 8 each), or
# fails on a call to memset: bigger keys are zeroed in chunks.
MEMSET_CHUNK = 512
_HIST = ("hist", "lhist")


def key_layout(by: tuple[CheckedField, ...], body: Body | None = None,
               slot: bool = False) -> KeyLayout:
    """The key of an aggregation by `by` (render/layout.py KeyField per field, in
    order); `slot`: a histogram's. Stacks (render/stacks.py) are a kernel stack id, a
    user stack id (frame pointers) or the hash of a copied user stack, unwound as the
    body's stack (or the begin's, for a captured one) says."""
    return KeyLayout(tuple(_key_field(f, body) for f in by), slot)


def _key_field(f: CheckedField, body: Body | None) -> KeyField:
    typ = f.expr.type
    if isinstance(typ, StackType):
        captured = _captured(f.expr, body)
        if typ.kind == "kernel":
            return KeyField(f.key, "kstack", limit=typ.limit)
        if captured is not None and body is not None and captured in body.copied_captures:
            return KeyField(f.key, "ucopy", limit=typ.limit,
                            unwind=body.copied_captures[captured])
        if body is not None and stack_copied(f.expr, body.stack):
            return KeyField(f.key, "ucopy", limit=typ.limit, unwind=body.stack.unwind)
        return KeyField(f.key, "ustack", limit=typ.limit)
    if isinstance(typ, SymType):
        return KeyField(f.key, "usym")
    if isinstance(typ, StrType):
        return KeyField(f.key, "str", size=typ.size)
    if isinstance(typ, BoolType):
        return KeyField(f.key, "bool")
    assert isinstance(typ, IntType)
    return KeyField(f.key, "int" if typ.signed else "uint")


def _captured(texpr: TExpr, body: Body | None) -> CaptureRef | None:
    """The span capture `texpr` reads as it is (a begin's stack), if any."""
    if body is None or not isinstance(texpr, TRef) or not isinstance(texpr.ref, CaptureRef):
        return None
    return texpr.ref


def value_signed(out: ResolvedOutput) -> bool:
    """Values are kept as __s64 unless they are uint64 (then __u64, compared unsigned)."""
    typ = out.value.type if out.value is not None else INT64
    return not (isinstance(typ, IntType) and typ == UINT64)


def _value_decl(kind: str, ctype: str, val_struct: str) -> tuple[str | None, str]:
    """(struct declaration or None, C type of the map's value)."""
    if kind == "count":
        return None, "__u64"
    if kind == "sum":
        return None, ctype
    second = "v" if kind in ("min", "max") else "sum"
    return f"struct {val_struct} {{\n    __u64 n;\n    {ctype} {second};\n}};", \
        f"struct {val_struct}"


def log2_slot_lines(var: str, slot: str) -> list[str]:
    """Statements setting `slot` (declared __u64 = 0) to the log2 bucket of `var` (an
    __u64 lvalue it may clobber): 1 + floor(log2 var), 0 for 0. No loops."""
    lines = [f"if ({var}) {{", f"    {slot} = 1;"]
    for shift in (32, 16, 8, 4, 2):
        lines.append(f"    if ({var} >> {shift}) {{ {var} >>= {shift}; {slot} += {shift}; }}")
    lines.append(f"    if ({var} >> 1) {slot} += 1;")
    lines.append("}")
    return lines


def lhist_slot_lines(var: str, slot: str, lo: int, hi: int, step: int,
                     signed: bool) -> list[str]:
    """Statements setting `slot` to the linear bucket of `var` (see module docstring)."""
    n = lhist_bucket_count(lo, hi, step)
    typ = INT64 if signed else UINT64
    under = f"{var} < {c_int_literal(lo, typ)}" if signed or lo > 0 else "0"
    if signed or hi > 0:
        over = f"{var} >= {c_int_literal(hi, typ)}"
    else:
        over = "1"  # an unsigned value is always >= a max <= 0
    # v - lo as unsigned: the true difference, which fits 64 bits inside [lo, hi).
    inside = (f"{slot} = 1 + ((__u64){var} - (__u64){c_int_literal(lo, INT64)}) / "
              f"{step}ULL;")
    return [f"if ({under})", f"    {slot} = 0;", f"else if ({over})",
            f"    {slot} = {n + 1};", "else", f"    {inside}"]


def _key_lines(out: ResolvedOutput, layout: KeyLayout, key_struct: str, body: Body,
               index: int) -> list[str]:
    size = layout.size
    strings = any(f.kind == "str" for f in layout.fields)
    if strings or size > STACK_KEY_MAX:
        member = f"agg{index}_key"
        body.member(f"struct {key_struct} {member};")
        lines = [f"struct {key_struct} *pr_k = &sc->{member};"]
        for off in range(0, size, MEMSET_CHUNK):
            n = min(MEMSET_CHUNK, size - off)
            if off:  # a compiler barrier: clang would merge the chunks into one memset
                lines.append('asm volatile("" ::: "memory");')
            dst = "pr_k" if off == 0 else f"(char *)pr_k + {off}"
            lines.append(f"__builtin_memset({dst}, 0, {n});")
    else:
        lines = [f"struct {key_struct} pr_kv = {{}};", f"struct {key_struct} *pr_k = &pr_kv;"]
    for i, (f, field) in enumerate(zip(out.by, layout.fields, strict=True)):
        k = f"pr_k->{layout.member(i)}"
        captured = _captured(f.expr, body)
        if captured is not None and field.kind in ("ucopy", "ustack"):
            # a begin's user stack: its id or hash, and its process, kept with the span
            held = body.captures[captured]
            lines += [f"{k} = {held};", f"{k}_pid = {held}_pid;"]
            continue
        if field.kind == "ucopy":
            lines += _ucopy_key_lines(i, k, index, body)
            continue
        low = lower(f.expr, body)
        lines.extend(low.prelude)
        if field.kind == "str":
            # _str: copy up to the NUL only; stale bytes after it in a reused buffer
            # would otherwise make equal strings different keys.
            lines.append(f"bpf_probe_read_kernel_str({k}, {field.size}, {low.c});")
        elif field.kind in ("kstack", "ustack"):
            lines += [f"{k} = {low.c};", f"if ({k} < 0 && {k} != -EFAULT)",
                      "    pr_count(PR_STACK_LOST);  /* -EFAULT: no such stack here */"]
            if field.with_pid:
                lines.append(f"{k}_pid = pr_id >> 32;")
        elif field.kind == "usym":
            lines += [f"{k} = {low.c};", f"{k}_pid = pr_id >> 32;"]
        else:
            ctype = "__s64" if field.kind == "int" else "__u64"
            lines.append(f"{k} = ({ctype})({low.c});")
    return lines


def _ucopy_key_lines(i: int, k: str, index: int, body: Body) -> list[str]:
    """Key member `k` (field i's) = the hash of this event's copied user stack; the copy
    goes into pr_ucopies once per hash (the reader drains it every turn)."""
    lines = ucopy_hash_lines(body, f"agg{index}_uc{i}", f"pr_uc{i}", f"pr_h{i}")
    return lines + [f"{k} = (__s64)pr_h{i};", f"{k}_pid = pr_id >> 32;"]


def ucopy_hash_lines(body: Body, tag: str, ptr: str, hashed: str) -> list[str]:
    """Statements that copy this event's user stack into scratch member `tag` (`ptr`
    points to it), put it into pr_ucopies once per hash (the reader drains it every
    turn), and leave its hash (0: lost, counted) in local `hashed`."""
    size = body.stack.bytes
    body.ucopy_bytes = max(body.ucopy_bytes, size)
    body.member(f"struct {UCOPY_MAP}_val {tag};")
    body.member(f"struct {ULIGHT_MAP}_val {tag}_l;")
    lines = [f"struct {UCOPY_MAP}_val *{ptr} = &sc->{tag};"]
    py = body.ucopy_python
    light = f"{ptr}_l"
    lines += ustack_copy_lines(f"{ptr}->", size, py, frames_kept(body.stack))
    lines += [f"__u64 {hashed} = 0;",
              f"__u64 {hashed}_c = 0;",
              f"__u32 {hashed}_x = 0;",
              f"__u64 {hashed}_t = {UTMPL_MAP}_match({ptr}, &{hashed}_c, &{hashed}_x);",
              f"if ({hashed}_t) {{  /* the native stack is a template's: send the rest */",
              *_indent(light_hash_lines(f"{ptr}->", f"{hashed}_t", f"{hashed}_c",
                                        f"{hashed}_x", hashed, py)),
              f"    if (!{UKNOWN_MAP}.lookup(&{hashed})) {{  /* not named yet */",
              f"        struct {ULIGHT_MAP}_val *{light} = &sc->{tag}_l;",
              f"        {light}->tmpl = {hashed}_t;",
              f"        bpf_probe_read_kernel(&{light}->pid, "
              f"__builtin_offsetof(struct {UCOPY_MAP}_val, data), &{ptr}->pid);",
              *_indent(_indent(_store_lines(ULIGHT_MAP, hashed, light))),
              "    }",
              "} else {",
              *_indent(ustack_hash_lines(f"{ptr}->", size, hashed, py, declare=False)),
              *_indent(_store_lines(UCOPY_MAP, hashed, ptr)),
              "}"]
    return lines


def _store_lines(map_name: str, hashed: str, ptr: str) -> list[str]:
    """Put `ptr` into `map_name` under `hashed` unless there (a full map: lost, 0)."""
    return [f"if (!{map_name}.lookup(&{hashed}) && {map_name}.update(&{hashed}, {ptr})) {{",
            "    pr_count(PR_STACK_LOST);",
            f"    {hashed} = 0;",
            "}"]


def _indent(lines: list[str]) -> list[str]:
    return ["    " + line for line in lines]


def _update_lines(kind: str, vtype: str) -> list[str]:
    """Statements after `pr_v` (a pointer to this CPU's value) was found."""
    if kind == "count":
        return ["*pr_v += 1;"]
    if kind == "sum":
        return ["*pr_v += pr_x;"]
    if kind in ("avg", "hist", "lhist"):
        return ["pr_v->n += 1;", "pr_v->sum += pr_x;"]
    op = "<" if kind == "min" else ">"
    return [f"if (pr_v->n == 0 || pr_x {op} pr_v->v)", "    pr_v->v = pr_x;",
            "pr_v->n += 1;"]


def aggregate_block(out: ResolvedOutput, body: Body, map_size: int, closing: bool = False
                    ) -> tuple[AggregateOutput, list[str], list[str]]:
    """The aggregation output `out`: its model for the runtime, the C statements of its
    block in the probe body (`break` leaves the block) and its map declarations. An
    `open:` output's block adds a begin, or with `closing` takes one off (its key found,
    never made: a begin that was added made it)."""
    spec = out.spec
    kind, index = spec.kind, spec.index
    map_name, lost_map = f"pr_agg_{index}", f"pr_agg_{index}_lost"
    key_struct = f"{map_name}_key"
    layout = key_layout(out.by, body, slot=kind in _HIST)
    signed = value_signed(out)
    ctype = "__s64" if signed else "__u64"
    val_decl, vtype = _value_decl(kind, ctype, f"{map_name}_val")
    lhist: tuple[int, int, int] | None = None
    if kind == "lhist":
        assert None not in (spec.lhist_min, spec.lhist_max, spec.lhist_step)
        lhist = (spec.lhist_min or 0, spec.lhist_max or 0, spec.lhist_step or 0)

    # aligned(8): clang expands the zeroing memset with 8-byte stores (it inlines at
    # most 128 stores; a char-only struct would get 1-byte ones).
    decls = ["struct " + key_struct + " {\n" + "".join(f"    {m}\n" for m in layout.c_members)
             + "} __attribute__((aligned(8)));"]
    if val_decl:
        decls.append(val_decl)
    if spec.open:
        # one value for all CPUs, updated atomically: a key whose begins all ended is
        # deleted at 0 (each copied stack is a key of its own: kept, they would fill
        # the map); per-CPU shares could not tell when the total is 0
        decls.append(f"BPF_HASH({map_name}, struct {key_struct}, {vtype}, {map_size});")
    else:
        decls.append(f"BPF_PERCPU_HASH({map_name}, struct {key_struct}, {vtype}, "
                     f"{map_size});")
    decls.append(f"BPF_PERCPU_ARRAY({lost_map}, __u64, 1);  /* updates refused: map full */")

    lines = [f"/* output {index}: {kind} */", *condition(out.where, body),
             *symbol_notice([f.expr for f in out.by], body)]
    lines += _key_lines(out, layout, key_struct, body, index)
    if out.value is not None:
        low = lower(out.value, body)
        lines.extend(low.prelude)
        xtype = "__u64" if kind == "hist" else ctype  # log2 takes the value as unsigned
        lines.append(f"{xtype} pr_x = ({xtype})({low.c});")
    if kind == "hist":
        # The slot is found on a copy: pr_x itself goes into the bucket's sum.
        lines += ["__u64 pr_t = pr_x;", "__u64 pr_slot = 0;",
                  *log2_slot_lines("pr_t", "pr_slot"), "pr_k->slot = pr_slot;"]
    elif lhist is not None:
        lines += ["__u64 pr_slot;", *lhist_slot_lines("pr_x", "pr_slot", *lhist, signed),
                  "pr_k->slot = pr_slot;"]
    if closing:
        assert kind in ("count", "sum"), "open outputs are counts and sums"
        by = "1" if kind == "count" else "pr_x"
        lines += [f"{vtype} *pr_v = {map_name}.lookup(pr_k);",
                  "if (!pr_v)",
                  "    break;",
                  f"__sync_fetch_and_add(pr_v, -({vtype}){by});",
                  "if (*pr_v == 0)  /* every begin of this key ended */",
                  f"    {map_name}.delete(pr_k);"]
    elif spec.open:
        by = "1" if kind == "count" else "pr_x"
        lines += _init_lines(kind, vtype, val_decl, map_name, lost_map)[:-1]
        lines.append(f"__sync_fetch_and_add(pr_v, ({vtype}){by});")
    else:
        lines += _init_lines(kind, vtype, val_decl, map_name, lost_map)
    agg = AggregateOutput(
        name=spec.name, probe=spec.probe, kind=kind, map_name=map_name, key=layout,
        value_label=value_label(out), unit=out.value_unit, every_ns=spec.every_ns,
        top=spec.top, lhist=lhist, map_size=map_size,
        value_signed=signed, lost_map=lost_map, gauge=spec.open)
    return agg, lines, decls


def _init_lines(kind: str, vtype: str, val_decl: str | None, map_name: str,
                lost_map: str) -> list[str]:
    """Find (or make) this key's value, count a full map, update the value."""
    return [
        f"{vtype} pr_init = {{}};" if val_decl else f"{vtype} pr_init = 0;",
        f"{vtype} *pr_v = {map_name}.lookup_or_try_init(pr_k, &pr_init);",
        "if (!pr_v) {",
        "    pr_count(PR_LOST_MAPFULL);",
        "    __u32 pr_lk = 0;",
        f"    __u64 *pr_lost = {lost_map}.lookup(&pr_lk);",
        "    if (pr_lost)",
        "        *pr_lost += 1;",
        "    break;",
        "}",
        *_update_lines(kind, vtype),
    ]


def value_label(out: ResolvedOutput) -> str:
    """The value's record key: a plain name keeps its last part (`latency` ->
    `latency_ns`, `begin.size` -> `size`); an expression is shown as written."""
    from planrunner.expr.ast import Name, to_source

    value = out.spec.value
    if value is None:
        return "count"
    if isinstance(value, Name):
        last = value.ident.rsplit(".", 1)[-1]
        return "latency_ns" if last == "latency" else last
    return to_source(value)
