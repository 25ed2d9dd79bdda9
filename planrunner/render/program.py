"""render_program: ResolvedPlan -> RenderedProgram (the C source and what the runtime
needs to attach and decode). Deterministic: same plan and binaries, same bytes.

The view-model is built here (C statements per probe, from render/bodies.py and
render/aggregates.py); templates/program.bpf.c.j2 only places it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache

from planrunner.expr.typed import TExpr
from planrunner.render import aggregates
from planrunner.render.bodies import (
    PROLOGUE,
    Scratch,
    StringSource,
    condition,
    layout_for,
    print_block,
    slot_member,
    string_reads,
    thunk_reads,
    tracepoint_reads,
)
from planrunner.render.environment import render_template, template_text
from planrunner.render.model import (
    AggregateOutput,
    AttachSite,
    PrintOutput,
    RenderedProgram,
    TargetFile,
)
from planrunner.resolve import model as R
from planrunner.resolve.model import ResolvedOutput, ResolvedPlan, ResolvedProbe, SpanCapture

# A CPU forces a consumer wakeup once it has submitted this share of the ring buffer
# since its last one (a watermark in bytes); the consumer also drains every POLL_MS, so
# a quiet trickle waits at most that long. One wakeup costs the traced thread ~10 us
# (irq_work, then waking the reader): every 64 records it was 160 ns per event at 10k/s,
# 1.9x the uprobe floor instead of 1.5x. 1/16 of the ring per CPU leaves room for 12
# CPUs' worth before the ring is three quarters full.
WAKEUP_SHARE = 16


@dataclass
class ProbeView:
    """What the template needs for one probe (spans have no thunks of their own)."""

    name: str
    c_name: str
    arg_members: list[str]
    scratch: Scratch
    body: list[str]
    builtins: list[str]
    thunks: list[dict[str, object]] = field(default_factory=list)
    kind: str = "uprobe"


@dataclass
class SpanView:
    c_name: str
    members: list[str]
    map_size: int


def _outputs_for(resolved: ResolvedPlan, probe: str) -> list[ResolvedOutput]:
    return [o for o in resolved.outputs if o.spec.probe == probe]


def _output_blocks(resolved: ResolvedPlan, probe: str, scratch: Scratch,
                   sources: dict[str, StringSource], prints: list[PrintOutput],
                   aggs: list[AggregateOutput], maps: list[str]) -> list[str]:
    blocks: list[str] = []
    for out in _outputs_for(resolved, probe):
        spec = out.spec
        if spec.kind == "print":
            fields = [(f.key, f.expr) for f in out.fields]
            layout = layout_for(spec.index, fields)
            prints.append(PrintOutput(spec.name, probe, layout, spec.format))
            inner = print_block(layout, fields, out.where, scratch, sources)
        else:
            agg, inner, decls = aggregates.aggregate_block(
                out, scratch, resolved.plan.settings.map_size)
            aggs.append(agg)
            maps.extend(decls)
        blocks.append(_do_block(inner))
    return blocks


def _do_block(lines: list[str]) -> str:
    body = "\n".join("    " + line for chunk in lines for line in chunk.split("\n"))
    return "do {\n" + body + "\n} while (0);"


def _capture_lines(cap: SpanCapture, scratch: Scratch) -> list[str]:
    from planrunner.expr.lower_c import lower

    low = lower(cap.expr, scratch)
    lines = list(low.prelude)
    if cap.string_size:
        lines.append(f"bpf_probe_read_kernel(bv->{cap.member}, {cap.string_size}, {low.c});")
        if cap.status:
            lines.append(f"bv->{cap.member}_st = {cap.status};")
            lines.append(f"bv->{cap.member}_ptr = {cap.ptr};")
        else:
            lines.append(f"bv->{cap.member}_st = PR_STR_OK;")
            lines.append(f"bv->{cap.member}_ptr = 0;")
    else:
        lines.append(f"bv->{cap.member} = (__s64)({low.c});")
    return lines


def _key(expr: TExpr | None, scratch: Scratch) -> list[str]:
    from planrunner.expr.lower_c import lower

    if expr is None:
        return ["__u64 pr_key = pr_id;"]  # tid default: pid_tgid is unique per thread
    low = lower(expr, scratch)
    return [*low.prelude, f"__u64 pr_key = (__u64)({low.c});"]


def _span_blocks(resolved: ResolvedPlan, probe: ResolvedProbe, scratch: Scratch,
                 sources: dict[str, StringSource], spans: list[SpanView],
                 prints: list[PrintOutput], aggs: list[AggregateOutput],
                 maps: list[str]) -> list[str]:
    blocks: list[str] = []
    for span in resolved.probes:
        if span.spec.kind != "span":
            continue
        c_name = f"pr_span_{_cname(span.spec.name)}"
        caps = span.captures
        if span.spec.begin == probe.spec.name:
            scratch.members.append(f"struct {c_name} {c_name};")
            lines = _key(span.key_begin, scratch)
            lines.append(f"struct {c_name} *bv = &sc->{c_name};")
            lines.append("bv->ts = pr_ts;")
            for cap in caps:
                lines.extend(_capture_lines(cap, scratch))
            lines.append(f"{c_name}.update(&pr_key, bv);")
            blocks.append(_do_block(lines))
        if span.spec.end == probe.spec.name:
            lines = _key(span.key_end, scratch)
            lines.append(f"struct {c_name} *bg = {c_name}.lookup(&pr_key);")
            lines.append("if (!bg) break;")
            lines.append("__u64 pr_latency = pr_ts - bg->ts;")
            for cap in caps:
                if cap.string_size:
                    sources[f"bg->{cap.member}"] = StringSource(
                        f"bg->{cap.member}_ptr", f"bg->{cap.member}_st")
            inner = condition(span.where, scratch)
            inner.extend(_output_blocks(resolved, span.spec.name, scratch, sources,
                                        prints, aggs, maps))
            lines.append(_do_block(inner))
            lines.append(f"{c_name}.delete(&pr_key);")
            blocks.append(_do_block(lines))
    return blocks


def _span_views(resolved: ResolvedPlan) -> list[SpanView]:
    views = []
    for span in resolved.probes:
        if span.spec.kind == "span":
            members = ["__u64 ts;"]
            for cap in span.captures:
                if cap.string_size:
                    members += [f"__u64 {cap.member}_ptr;", f"__s64 {cap.member}_st;",
                                f"char {cap.member}[{cap.string_size}];"]
                else:
                    members.append(f"__s64 {cap.member};")
            views.append(SpanView(f"pr_span_{_cname(span.spec.name)}", members,
                                  resolved.plan.settings.map_size))
    return views


def _cname(name: str) -> str:
    """Plan names are identifiers ([A-Za-z_][A-Za-z0-9_-]*); map `-` for C."""
    return "".join(c if c.isalnum() or c == "_" else "_" for c in name)


def _probe_view(resolved: ResolvedPlan, probe: ResolvedProbe, prints: list[PrintOutput],
                aggs: list[AggregateOutput], maps: list[str]) -> ProbeView:
    c_name = _cname(probe.spec.name)
    scratch = Scratch(f"pr_scratch_{c_name}")
    sources: dict[str, StringSource] = {}
    kernel = probe.spec.kind == "tracepoint"
    body = string_reads(probe, scratch, kernel, sources)
    body += condition(probe.where, scratch)
    body += _output_blocks(resolved, probe.spec.name, scratch, sources, prints, aggs, maps)
    body += _span_blocks(resolved, probe, scratch, sources, [], prints, aggs, maps)
    text = "\n".join(body)
    builtins = [b for b, line in PROLOGUE.items()
                if b in ("pid", "tid") or f"pr_{b}" in text]
    view = ProbeView(probe.spec.name, c_name, [slot_member(s) for s in probe.slots],
                     scratch, body, builtins, kind=probe.spec.kind)
    for site in probe.sites:
        if site.kind == "tracepoint":
            reads = tracepoint_reads(probe)
        else:
            machine = site.binary.machine if site.binary else "EM_X86_64"
            reads = thunk_reads(site, probe, machine)
        view.thunks.append({"fn": site.fn_name, "reads": reads, "kind": site.kind})
    return view


@lru_cache(maxsize=1)
def _expr_helper_names() -> re.Pattern[str]:
    """The functions templates/expr_helpers.h defines, as one word-bounded pattern."""
    names = re.findall(r"^static __always_inline [^(]*?\b(pr_\w+)\(",
                       template_text("expr_helpers.h"), re.M)
    return re.compile(r"\b(?:" + "|".join(names) + r")\(")


# String readers of templates/runtime_helpers.h, compiled only when called.
STRING_READERS = {"pr_read_str": "PR_USE_READ_STR", "pr_read_kstr": "PR_USE_READ_KSTR",
                  "pr_read_lstr": "PR_USE_READ_LSTR"}


def _statements(views: list[ProbeView], maps: list[str]) -> str:
    return "\n".join([*maps, *(line for v in views for line in v.body),
                      *(r for v in views for t in v.thunks for r in t["reads"])])  # type: ignore[union-attr]


def _uses_expr_helpers(text: str) -> bool:
    """Whether any generated statement calls an expression helper: clang spends ~25 ms
    (7% of the compile) on that header, so programs that do not need it go without."""
    return _expr_helper_names().search(text) is not None


def _helper_macros(text: str) -> list[str]:
    """PR_USE_ macros for the string readers the statements call (unused ones cost
    clang ~15 ms each)."""
    return [macro for fn, macro in STRING_READERS.items() if f"{fn}(" in text]


def render_program(resolved: ResolvedPlan) -> RenderedProgram:
    prints: list[PrintOutput] = []
    aggs: list[AggregateOutput] = []
    maps: list[str] = []
    views = [_probe_view(resolved, p, prints, aggs, maps)
             for p in resolved.probes if p.spec.kind != "span"]
    prints.sort(key=lambda p: p.layout.output_id)
    settings = resolved.plan.settings
    statements = _statements(views, maps)
    c_source = render_template(
        "program.bpf.c.j2",
        plan_name=resolved.plan.name,
        probes=views,
        spans=_span_views(resolved),
        layouts=[p.layout for p in prints],
        maps=maps,
        prologue=PROLOGUE,
        ringbuf_pages=settings.ringbuf_pages,
        wakeup_share=WAKEUP_SHARE,
        expr_helpers=_uses_expr_helpers(statements),
        helper_macros=_helper_macros(statements),
    )
    sites = tuple(_attach_site(s) for p in resolved.probes for s in p.sites)
    return RenderedProgram(c_source, sites, tuple(prints), tuple(aggs),
                           resolved.plan.name, resolved.pid)


def _attach_site(site: R.AttachSite) -> AttachSite:
    """What the runtime needs of a resolved site: where to attach which function."""
    binary = site.binary
    target = TargetFile(binary.path, binary.display, binary.build_id) if binary else None
    return AttachSite(site.kind, site.fn_name, site.probe, site.index, target,
                      site.file_offset, site.ref_ctr_offset, site.semaphore,
                      site.category, site.event)
