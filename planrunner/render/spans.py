"""Span bookkeeping in C: the begin probe stores the begin time and the span's captured
values in an LRU map under the span's key; the end probe looks them up, computes the
latency, runs the span's filter and outputs, and deletes the entry.

Captured values are members `c0, c1...` of `struct pr_span_<name>` in the order the
resolver lists them (first use); a string capture also keeps its source pointer and
read status for the record.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from planrunner.expr.typed import CaptureRef, TExpr, TRef
from planrunner.expr.types import StrType
from planrunner.render.bodies import Body, condition
from planrunner.render.expr_c import lower
from planrunner.render.names import c_ident
from planrunner.resolve.model import ResolvedProbe

# The map key of a span keyed by an expression within one process (scope: process):
# the same id in two processes is two spans. The thread default needs none of it:
# pid_tgid already names one thread of one process.
KEY_STRUCT = "pr_span_key"


@dataclass(frozen=True, slots=True)
class SpanView:
    c_name: str
    members: tuple[str, ...]
    map_size: int
    key_type: str


def per_process_key(span: ResolvedProbe) -> bool:
    return span.key_begin is not None and span.spec.span_scope == "process"


def span_struct(span: ResolvedProbe) -> str:
    return f"pr_span_{c_ident(span.spec.name)}"


def _member(index: int) -> str:
    return f"c{index}"


def span_view(span: ResolvedProbe, map_size: int) -> SpanView:
    members = ["__u64 ts;"]
    for i, cap in enumerate(span.captures):
        m = _member(i)
        if isinstance(cap.expr.type, StrType):
            members += [f"__u64 {m}_ptr;", f"__s64 {m}_st;",
                        f"char {m}[{cap.expr.type.size}];"]
        else:
            members.append(f"__s64 {m};")
    key_type = f"struct {KEY_STRUCT}" if per_process_key(span) else "__u64"
    return SpanView(span_struct(span), tuple(members), map_size, key_type)


def _key(span: ResolvedProbe, expr: TExpr | None, body: Body) -> list[str]:
    if expr is None:
        return ["__u64 pr_key = pr_id;"]  # tid default: pid_tgid is unique per thread
    low = lower(expr, body)
    if not per_process_key(span):
        return [*low.prelude, f"__u64 pr_key = (__u64)({low.c});"]
    return [*low.prelude, f"struct {KEY_STRUCT} pr_key = {{}};",
            f"pr_key.k = (__u64)({low.c});", f"pr_key.tgid = {body.builtin('pid')};"]


def _capture_lines(index: int, cap: CaptureRef, body: Body) -> list[str]:
    m = f"bv->{_member(index)}"
    low = lower(cap.expr, body)
    lines = list(low.prelude)
    if isinstance(cap.expr.type, StrType):
        lines.append(f"bpf_probe_read_kernel({m}, {cap.expr.type.size}, {low.c});")
        source = body.string_source(cap.expr.ref) if isinstance(cap.expr, TRef) else None
        lines.append(f"{m}_st = {source.status if source else 'PR_STR_OK'};")
        lines.append(f"{m}_ptr = {source.ptr if source else '0'};")
    else:
        lines.append(f"{m} = (__s64)({low.c});")
    return lines


def begin_block(span: ResolvedProbe, body: Body) -> list[str]:
    """In the begin probe: store the time and the captures under the key."""
    name = span_struct(span)
    body.members.append(f"struct {name} {name};")
    lines = _key(span, span.key_begin, body)
    lines.append(f"struct {name} *bv = &sc->{name};")
    lines.append(f"bv->ts = {body.builtin('ts')};")
    for i, cap in enumerate(span.captures):
        lines.extend(_capture_lines(i, cap, body))
    lines.append(f"{name}.update(&pr_key, bv);")
    return lines


def end_block(span: ResolvedProbe, body: Body,
              outputs: Callable[[Body], list[str]]) -> list[str]:
    """In the end probe: find the begin, then the filter and `outputs(body)` with the
    span's latency and captures in scope, then forget the begin."""
    name = span_struct(span)
    lines = _key(span, span.key_end, body)
    lines.append(f"struct {name} *bg = {name}.lookup(&pr_key);")
    lines.append("if (!bg) break;")
    lines.append(f"__u64 pr_latency = {body.builtin('ts')} - bg->ts;")
    body.captures = {cap: f"bg->{_member(i)}" for i, cap in enumerate(span.captures)}
    inner = condition(span.where, body)
    inner.extend(outputs(body))
    body.captures = {}
    lines.append(do_block(inner))
    lines.append(f"{name}.delete(&pr_key);")
    return lines


def do_block(lines: list[str]) -> str:
    """`lines` in a do { } while (0), so that `break` leaves just this block."""
    text = "\n".join("    " + line for chunk in lines for line in chunk.split("\n"))
    return "do {\n" + text + "\n} while (0);"
