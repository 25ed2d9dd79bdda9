"""Span bookkeeping in C: the begin probe stores the begin time and the span's captured
values in an LRU map under the span's key; the end probe looks them up, computes the
latency, runs the span's filter and outputs, and deletes the entry.

Captured values are members `c0, c1...` of `struct pr_span_<name>` in the order the
resolver lists them (first use); a string capture also keeps its source pointer and
read status for the record. A nested span with `match:` also keeps, in `m0, m1...`, its
begin's match values: an integer as is, a string as a 64-bit hash of its bytes (0: not
read, which matches any), so that an end compares a few integers per open begin.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from planrunner.expr.typed import CaptureRef, TExpr, TRef
from planrunner.expr.types import StackType, StrType
from planrunner.plan.model import StackSpec
from planrunner.render.aggregates import ucopy_hash_lines
from planrunner.render.bodies import Body, condition, latency_local, stack_copied
from planrunner.render.expr_c import Lowered, lower
from planrunner.render.names import c_ident
from planrunner.render.needs import Helper
from planrunner.render.stacks import copied
from planrunner.resolve.model import ResolvedProbe

# The map key of a span keyed by an expression within one process (scope: process):
# the same id in two processes is two spans. The thread default needs none of it:
# pid_tgid already names one thread of one process.
KEY_STRUCT = "pr_span_key"
# Nested spans: one entry per open begin, keyed by (key, process, level), and one depth
# counter per (key, process) in a second map (level 0 there).
LEVEL_KEY_STRUCT = "pr_span_lkey"
# Nested spans with `match:`: how many open begins, from the most recent down, an end
# compares with. A begin whose end never came stays on its key's stack; the next end of
# a call below it finds its begin within these levels, and the begins above it are
# dropped (counted). Bounded: an end that matches nothing (a return without an entry, as
# a Python profile hook's own) pays this many lookups.
MATCH_SEARCH = 8


@dataclass(frozen=True, slots=True)
class SpanView:
    c_name: str
    members: tuple[str, ...]
    map_size: int
    key_type: str
    depth_map: str | None  # nested spans: the open-begin count per key
    # "lru_hash", or "hash" for a span with `open:` outputs: an evicted begin would stay
    # in their sums for good, so a full map refuses the begin instead (counted)
    map_kind: str = "lru_hash"


# The `open:` outputs of a span, in order: for each, its map of drops and the C
# statements that add the begin whose values `body.captures` names to it (False), or
# take it off (True).
OpenBlocks = Callable[[Body, bool], list[tuple[str, list[str]]]]


def per_process_key(span: ResolvedProbe) -> bool:
    return span.key_begin is not None and span.spec.span_scope == "process"


def span_struct_of(cap: CaptureRef) -> str:
    return f"pr_span_{c_ident(cap.span)}"


def span_struct(span: ResolvedProbe) -> str:
    return f"pr_span_{c_ident(span.spec.name)}"


def depth_map(span: ResolvedProbe) -> str:
    return f"pr_spandepth_{c_ident(span.spec.name)}"


def depth_local(span: str) -> str:
    """The body local holding `depth` of nested span `span` (see nested_prologue)."""
    return f"pr_depth_{c_ident(span)}"


def begin_local(span: ResolvedProbe) -> str:
    """The end block's pointer to the begin it closes (named per span: a span on a span
    ends inside the end block of the span it is on)."""
    return f"pr_bg_{c_ident(span.spec.name)}"


def _member(index: int) -> str:
    return f"c{index}"


def span_view(span: ResolvedProbe, map_size: int, opens: int = 0) -> SpanView:
    """The span's map value and map; `opens`: how many `open:` outputs it has."""
    members = ["__u64 ts;"]
    for i, cap in enumerate(span.captures):
        m = _member(i)
        if isinstance(cap.expr.type, StrType):
            members += [f"__u64 {m}_ptr;", f"__s64 {m}_st;",
                        f"char {m}[{cap.expr.type.size}];"]
        elif isinstance(cap.expr.type, StackType):
            # a stack id, or the hash of a copy; the begin's process names its frames
            members += [f"__s64 {m};", f"__u64 {m}_pid;"]
        else:
            members.append(f"__s64 {m};")
    members += [f"__u64 m{i};" for i in range(len(span.match))]
    if opens:
        members.append("__u64 og;  /* the open outputs this begin was added to */")
    if span.spec.nested:
        return SpanView(span_struct(span), tuple(members), map_size,
                        f"struct {LEVEL_KEY_STRUCT}", depth_map(span))
    key_type = f"struct {KEY_STRUCT}" if per_process_key(span) else "__u64"
    return SpanView(span_struct(span), tuple(members), map_size, key_type, None,
                    "hash" if opens else "lru_hash")


def capture_names(span: ResolvedProbe, holder: str) -> dict[CaptureRef, str]:
    """The C lvalue of each capture of `span` in the begin `holder` points to."""
    return {cap: f"{holder}->{_member(i)}" for i, cap in enumerate(span.captures)}


def copied_captures(span: ResolvedProbe, begin_stack: StackSpec,
                    known: dict[CaptureRef, str]) -> dict[CaptureRef, str]:
    """The captured user stacks of `span` that are hashes of copies, with the unwind
    mode of their copy (`begin_stack`: how the begin's event captures stacks; `known`:
    those of the span the begin is on, when it captures one of its captures)."""
    out = {}
    for cap in span.captures:
        if not (isinstance(cap.expr.type, StackType) and cap.expr.type.kind == "user"):
            continue
        inner = cap.expr.ref if isinstance(cap.expr, TRef) else None
        if isinstance(inner, CaptureRef):
            if inner in known:
                out[cap] = known[inner]
        elif copied(begin_stack):
            out[cap] = begin_stack.unwind
    return out


def _key(span: ResolvedProbe, expr: TExpr | None, body: Body) -> list[str]:
    if expr is None:
        return ["__u64 pr_key = pr_id;"]  # tid default: pid_tgid is unique per thread
    low = lower(expr, body)
    if not per_process_key(span):
        return [*low.prelude, f"__u64 pr_key = (__u64)({low.c});"]
    return [*low.prelude, f"struct {KEY_STRUCT} pr_key = {{}};",
            f"pr_key.k = (__u64)({low.c});", f"pr_key.tgid = {body.builtin('pid')};"]


def _nested_key(span: ResolvedProbe, begin: bool) -> str:
    return f"pr_lkey_{c_ident(span.spec.name)}_{'b' if begin else 'e'}"


def at_local(span: str) -> str:
    """The end body's local holding the level the end closes (see _match_search)."""
    return f"pr_at_{c_ident(span)}"


def _match_value(span: ResolvedProbe, index: int, begin: bool, body: Body) -> list[str]:
    """`__u64 pr_m<i>_<span> = ...;`: match value `index` of this side, as the span's
    map keeps it (a string's hash over the bytes both sides read; 0 if unread)."""
    b, e = span.match[index]
    expr = b if begin else e
    low = lower(expr, body)
    local = f"pr_m{index}_{c_ident(span.spec.name)}"
    if not isinstance(expr.type, StrType):
        return [*low.prelude, f"__u64 {local} = (__u64)({low.c});"]
    assert isinstance(b.type, StrType) and isinstance(e.type, StrType)
    body.need(Helper.EXPR)
    size = min(b.type.size, e.type.size)
    source = body.string_source(expr.ref) if isinstance(expr, TRef) else None
    value = f"pr_str_hash({low.c}, {size})"
    if source is not None:
        value = f"{source.status} < 0 ? 0 : {value}"  # unreadable here: matches any
    return [*low.prelude, f"__u64 {local} = {value};"]


def _matches(span: ResolvedProbe, entry: str) -> str:
    """The C condition: open begin `*entry` has this end's match values."""
    name = c_ident(span.spec.name)
    tests = []
    for i, (b, _e) in enumerate(span.match):
        mine, theirs = f"pr_m{i}_{name}", f"{entry}->m{i}"
        if isinstance(b.type, StrType):
            tests.append(f"({theirs} == {mine} || !{theirs} || !{mine})")
        else:
            tests.append(f"{theirs} == {mine}")
    return " && ".join(tests)


def _match_search(span: ResolvedProbe, body: Body, max_depth: int) -> list[str]:
    """The end's level: the most recent of the MATCH_SEARCH most recent open begins it
    matches, or `open` (none: an end without its begin). Past `max_depth` no begin is
    kept to compare with, so the end closes the top level, as without `match`."""
    name = c_ident(span.spec.name)
    key, open_, at = _nested_key(span, False), f"pr_open_{name}", at_local(span.spec.name)
    lines = []
    for i in range(len(span.match)):
        lines += _match_value(span, i, False, body)
    entry = f"pr_o_{name}"
    loop = [f"if (pr_i >= {open_})",
            "    break;",
            f"{key}.level = {open_} - 1 - pr_i;",
            f"struct {span_struct(span)} *{entry} = {span_struct(span)}.lookup(&{key});",
            f"if ({entry} && {_matches(span, entry)}) {{",
            f"    {at} = {key}.level;",
            "    break;",
            "}"]
    # The verifier would walk all that follows once for each turn the search can leave
    # at, each with its own bounds on the level (ruby-flow's end thunk: 127k instructions
    # processed, 0.15-0.2 s of a first run's load): read back from the scratch, a map
    # value, the level is one unknown number to it, and the rest is walked once.
    member = f"at_{name}"  # the level, as the local `at` holds it
    body.member(f"__u64 {member};")
    return lines + [
        f"__u64 {at} = {open_};",
        f"if ({open_} > {max_depth})",
        f"    {at} = {open_} - 1;  /* past span_depth: nothing kept to compare with */",
        "else",
        f"    for (int pr_i = 0; pr_i < {MATCH_SEARCH}; pr_i++) {{",
        *("        " + line for line in loop),
        "    }",
        f"{key}.level = 0;  /* the key of the open-begin count again */",
        f"sc->{member} = {at};",
        f"{at} = *(volatile __u64 *)&sc->{member};  /* the verifier: one walk of what follows */"]


def nested_prologue(span: ResolvedProbe, begin: bool, body: Body,
                    max_depth: int) -> list[str]:
    """At the top of a body that begins (or ends) nested span `span`: its key and
    `depth`, the level the begin opens (or the end closes), from the open-begin count
    (and, for an end of a span with `match:`, the begins it matches: an end that matches
    none is at the level a begin would open)."""
    expr = span.key_begin if begin else span.key_end
    key, name = _nested_key(span, begin), span.spec.name
    depth, open_ = depth_local(name), f"pr_open_{c_ident(name)}"
    lines = [f"struct {LEVEL_KEY_STRUCT} {key} = {{}};"]
    if expr is None:
        lines.append(f"{key}.k = pr_id;")  # the thread: pid_tgid names it in its process
    else:
        low = lower(expr, body)
        lines += [*low.prelude, f"{key}.k = (__u64)({low.c});"]
        if span.spec.span_scope == "process":
            lines.append(f"{key}.tgid = {body.builtin('pid')};")
    lines += [f"__u64 {open_} = 0;",
              f"__u64 *pr_dp_{c_ident(name)} = {depth_map(span)}.lookup(&{key});",
              f"if (pr_dp_{c_ident(name)})",
              f"    {open_} = *pr_dp_{c_ident(name)};"]
    if begin:
        lines.append(f"__u32 {depth} = {open_};")
    elif span.match:
        lines += _match_search(span, body, max_depth)
        lines.append(f"__u32 {depth} = {at_local(name)};")
    else:
        lines.append(f"__u32 {depth} = {open_} ? {open_} - 1 : 0;")
    return lines


def _capture_lines(index: int, cap: CaptureRef, body: Body) -> list[str]:
    m = f"bv->{_member(index)}"
    if stack_copied(cap.expr, body.stack):
        low = Lowered((), "0")  # a copy has no id: hashed below
    else:
        low = lower(cap.expr, body)
    lines = list(low.prelude)
    if isinstance(cap.expr.type, StrType):
        lines.append(f"bpf_probe_read_kernel({m}, {cap.expr.type.size}, {low.c});")
        source = body.string_source(cap.expr.ref) if isinstance(cap.expr, TRef) else None
        lines.append(f"{m}_st = {source.status if source else 'PR_STR_OK'};")
        lines.append(f"{m}_ptr = {source.ptr if source else '0'};")
    elif isinstance(cap.expr.type, StackType):
        inner = cap.expr.ref if isinstance(cap.expr, TRef) else None
        pid = f"{low.c}_pid" if isinstance(inner, CaptureRef) else "pr_id >> 32"
        lines.append(f"{m}_pid = {pid};")
        if stack_copied(cap.expr, body.stack):
            # the copy goes to the reader now (pr_ucopies), its hash stays with the span
            tag = f"{span_struct_of(cap)}_c{index}"
            copy = ucopy_hash_lines(body, tag, f"pr_{tag}", f"pr_h_{tag}")
            return lines + copy + [f"{m} = (__s64)pr_h_{tag};"]
        lines.append(f"{m} = {low.c};")
    else:
        lines.append(f"{m} = (__s64)({low.c});")
    return lines


def _open_store(span: ResolvedProbe, body: Body, opens: OpenBlocks,
                begin_stack: StackSpec) -> list[str]:
    """The store of a begin of a span with `open:` outputs: a begin that replaces an
    open one takes that one off them first; a full map refuses the begin (counted in
    each open output's drops); the begin is then added to each, and remembers which."""
    name = span_struct(span)
    outer, outer_modes = body.captures, body.copied_captures
    body.copied_captures = {**outer_modes,
                            **copied_captures(span, begin_stack, outer_modes)}
    body.captures = {**outer, **capture_names(span, "pr_old")}
    off = opens(body, True)
    body.captures = {**outer, **capture_names(span, "bv")}
    on = opens(body, False)
    body.captures, body.copied_captures = outer, outer_modes
    lines = ["bv->og = 0;",
             f"int pr_ins = {name}.insert(&pr_key, bv);",
             "if (pr_ins == -EEXIST) {",
             "    pr_count(PR_SPAN_REPLACED);",
             f"    struct {name} *pr_old = {name}.lookup(&pr_key);",
             "    if (pr_old) {"]
    for i, (_lost, block) in enumerate(off):
        lines += [f"        if (pr_old->og & {1 << i})",
                  *("        " + line for line in do_block(block).split("\n"))]
    lines += ["    }",
              f"    pr_ins = {name}.update(&pr_key, bv);",
              "}",
              "if (pr_ins) {  /* the map is full: not kept, so not counted as open */",
              "    pr_count(PR_LOST_MAPFULL);",
              "    __u32 pr_lk = 0;"]
    for i, (lost, _block) in enumerate(on):
        lines += [f"    __u64 *pr_lost{i} = {lost}.lookup(&pr_lk);",
                  f"    if (pr_lost{i})",
                  f"        *pr_lost{i} += 1;"]
    lines += ["    break;",
              "}",
              "__u64 pr_og = 0;"]
    for i, (_lost, block) in enumerate(on):
        lines.append(do_block([*block, f"pr_og |= {1 << i};"]))
    return lines + [f"struct {name} *pr_stored = {name}.lookup(&pr_key);",
                    "if (pr_stored)",
                    "    pr_stored->og = pr_og;"]


def begin_block(span: ResolvedProbe, body: Body, max_depth: int,
                opens: OpenBlocks | None = None,
                begin_stack: StackSpec | None = None) -> list[str]:
    """In the begin probe: store the time and the captures under the key. A plain span
    counts a begin that replaces an open one (nested calls in a span not declared
    nested); a nested span pushes a level, counting levels past `max_depth`. A span with
    `open:` outputs adds the begin to them (`opens`, see _open_store)."""
    name = span_struct(span)
    body.member(f"struct {name} {name};")
    if span.spec.nested:
        key, depth = _nested_key(span, True), depth_local(span.spec.name)
        lines = [f"__u64 pr_nd = (__u64){depth} + 1;",
                 f"{depth_map(span)}.update(&{key}, &pr_nd);",
                 f"if ({depth} >= {max_depth}) {{ pr_count(PR_SPAN_OVERFLOW); break; }}",
                 f"{key}.level = {depth};"]
        store = [f"{name}.update(&{key}, bv);"]
    elif opens is not None:
        lines = _key(span, span.key_begin, body)
        store = _open_store(span, body, opens, begin_stack or body.stack)
    else:
        lines = _key(span, span.key_begin, body)
        store = [f"if ({name}.insert(&pr_key, bv)) {{",
                 "    pr_count(PR_SPAN_REPLACED);",
                 f"    {name}.update(&pr_key, bv);",
                 "}"]
    lines.append(f"struct {name} *bv = &sc->{name};")
    lines.append(f"bv->ts = {body.builtin('ts')};")
    for i, cap in enumerate(span.captures):
        lines.extend(_capture_lines(i, cap, body))
    for i in range(len(span.match)):
        lines += _match_value(span, i, True, body)
        lines.append(f"bv->m{i} = pr_m{i}_{c_ident(span.spec.name)};")
    return lines + store


def end_block(span: ResolvedProbe, body: Body, max_depth: int,
              outputs: Callable[[Body], list[str]], begin_stack: StackSpec,
              opens: OpenBlocks | None = None) -> list[str]:
    """In the end probe: find the begin, then the filter and `outputs(body)` with the
    span's latency and captures in scope, then forget the begin. A nested span pops the
    most recent open begin of the key; with `match:`, the one the prologue found, and
    the begins above it (counted), or nothing (counted) when it found none."""
    name = span_struct(span)
    if span.match:
        key, at = _nested_key(span, False), at_local(span.spec.name)
        open_ = f"pr_open_{c_ident(span.spec.name)}"
        lines = [f"if ({at} == {open_}) {{  /* an end without its begin: pops nothing */",
                 "    pr_count(PR_SPAN_UNMATCHED);",
                 "    break;",
                 "}",
                 f"if ({open_} - 1 - {at})  /* begins whose end never came */",
                 f"    pr_count_n(PR_SPAN_DROPPED, {open_} - 1 - {at});",
                 f"if ({at} == 0)",
                 f"    {depth_map(span)}.delete(&{key});",
                 "else",
                 f"    {depth_map(span)}.update(&{key}, &{at});",
                 f"if ({at} >= {max_depth}) break;  /* counted at its begin */",
                 f"{key}.level = {at};"]
        ref = f"&{key}"
    elif span.spec.nested:
        key, depth = _nested_key(span, False), depth_local(span.spec.name)
        open_ = f"pr_open_{c_ident(span.spec.name)}"
        lines = [f"if (!{open_}) break;  /* no open begin: it began before tracing */",
                 f"if ({depth} == 0)",
                 f"    {depth_map(span)}.delete(&{key});",
                 "else {",
                 f"    __u64 pr_nd = {depth};",
                 f"    {depth_map(span)}.update(&{key}, &pr_nd);",
                 "}",
                 f"if ({depth} >= {max_depth}) break;  /* counted at its begin */",
                 f"{key}.level = {depth};"]
        ref = f"&{key}"
    else:
        lines = _key(span, span.key_end, body)
        ref = "&pr_key"
    bg = begin_local(span)
    lines.append(f"struct {name} *{bg} = {name}.lookup({ref});")
    lines.append(f"if (!{bg}) break;")
    lines.append(f"__u64 {latency_local(span.spec.name)} = {body.builtin('ts')} - {bg}->ts;")
    # a span on a span ends inside that span's end block: both spans' values in scope
    outer, outer_modes = body.captures, body.copied_captures
    body.captures = {**outer, **capture_names(span, bg)}
    body.copied_captures = {**outer_modes,
                            **copied_captures(span, begin_stack, outer_modes)}
    for i, (_lost, block) in enumerate(opens(body, True) if opens is not None else []):
        lines += [f"if ({bg}->og & {1 << i})", do_block(block)]
    inner = condition(span.where, body)
    inner.extend(outputs(body))
    body.captures, body.copied_captures = outer, outer_modes
    lines.append(do_block(inner))
    lines.append(f"{name}.delete({ref});")
    return lines


def do_block(lines: list[str]) -> str:
    """`lines` in a do { } while (0), so that `break` leaves just this block."""
    text = "\n".join("    " + line for chunk in lines for line in chunk.split("\n"))
    return "do {\n" + text + "\n} while (0);"
