"""render_program: ResolvedPlan -> RenderedProgram (the C source and what the runtime
needs to attach and decode). Deterministic: same plan and binaries, same bytes.

The view-model is built here (C statements per probe, from render/bodies.py,
render/aggregates.py and render/spans.py); templates/program.bpf.c.j2 only places it.
What the program includes (prologue builtins, expression helpers, string readers) is
decided from what the emitters reported they need (`Body`), never by reading C back.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from planrunner.elf.btf import TASK_COMM, KernelMember
from planrunner.expr.ast import Name
from planrunner.expr.typed import ArgRef, Builtin, TRef, names_symbols
from planrunner.expr.types import StackType
from planrunner.param_values import pack_values
from planrunner.plan.model import FieldSpec, StackSpec
from planrunner.probe_kinds import kind, site_kind
from planrunner.render import aggregates, params, pyframes
from planrunner.render.bodies import (
    PROLOGUE,
    Body,
    condition,
    layout_for,
    print_block,
    slot_member,
    string_reads,
)
from planrunner.render.contracts import c_block
from planrunner.render.environment import render_template
from planrunner.render.model import (
    DISPATCHED_SWITCH,
    SLEEPABLE_SWITCH,
    AggregateOutput,
    AggTable,
    AttachSet,
    AttachSite,
    FileIdentity,
    PrintOutput,
    RenderedProgram,
    RuntimeConstant,
    SpanShape,
    StackMaps,
    TargetFile,
    own_shared_macros,
)
from planrunner.render.names import c_ident, thunk_name
from planrunner.render.needs import STRING_READERS, Helper
from planrunner.render.operand_c import runtime_constants
from planrunner.render.pyframes import PYTHON_BINS_MAP, PYTHON_CODES_MAP, PYTHON_LINES_MAP
from planrunner.render.spans import (
    KEY_STRUCT,
    LEVEL_KEY_STRUCT,
    OpenBlocks,
    begin_block,
    do_block,
    end_block,
    nested_prologue,
    span_view,
)
from planrunner.render.stacks import (
    KSTACK_MAP,
    SEEN_MAP,
    UCOPY_MAP,
    UKNOWN_MAP,
    ULIGHT_MAP,
    USTACK_MAP,
    UTMPL_MAP,
    copied,
    map_decls,
    pid_notice_lines,
)
from planrunner.render.stacks import arg_members as stack_members
from planrunner.render.stacks import thunk_lines as stack_thunk_lines
from planrunner.render.thunks import THUNK_READS, THUNK_SHAPES
from planrunner.resolve.model import ResolvedOutput, ResolvedPlan, ResolvedProbe, ResolvedSite
from planrunner.resolve.scope import FUNC_SIZE
from planrunner.resolve.usage import arg_indexes, output_exprs

# A CPU forces a consumer wakeup once it has submitted this share of the ring buffer
# since its last one (a watermark in bytes); the consumer also drains every POLL_MS, so
# a quiet trickle waits at most that long. One wakeup costs the traced thread ~10 us
# (irq_work, then waking the reader): every 64 records it was 160 ns per event at 10k/s,
# 1.9x the uprobe floor instead of 1.5x. 1/16 of the ring per CPU is the most; with more
# than 8 CPUs the share is 1/(2 * CPUs) (the CPU count is set at run time,
# ConfigSlot.NR_CPUS: templates/record_helpers.h), so all CPUs together never hold back
# more than half the ring before someone wakes the reader.
WAKEUP_SHARE = 16

# The ring buffer's default size (settings.ringbuf_pages unset): room for RING_RECORDS of
# the largest print record, so that a burst that size is kept even when the consumer gets
# no CPU meanwhile (issue 17: a 10,000-call burst of a short python3.11 run, 12,250
# returns with the interpreter's start-up, lost 1,246-6,865 of its 352-byte records in
# the old 1 MiB ring, which held 2,900). bpftrace's default holds fewer (64 pages per
# CPU) and loses none only because it wakes its reader per event, which slows the
# target. Between 1 MiB (the old default: small records change nothing) and 32 MiB
# (locked kernel memory, mapped by the reader): a record over 2 KiB gets fewer slots.
# The wakeup watermark is a share of the ring, so a larger ring also wakes the reader
# less often; the reader still drains every POLL_MS.
RING_RECORDS = 16384
RING_MIN_BYTES = 1 << 20
RING_MAX_BYTES = 32 << 20
RINGBUF_RECORD_HEADER = 8  # what the kernel puts before each record (BPF_RINGBUF_HDR_SZ)

# The uprobe sites' prog array and the function every uprobe_multi link runs, which
# tail-calls the thunk its attach cookie names (runtime/attach.py UprobeLinks): one
# link then serves every site of a binary, and closing it detaches them all at once.
UPROBE_SITES_MAP = "pr_uprobe_sites"
UPROBE_DISPATCHER = "pr_uprobe_dispatch"


def default_ring_pages(record_size: int, page_size: int | None = None) -> int:
    """Pages (a power of two) of a ring buffer holding RING_RECORDS records of
    `record_size` bytes, within RING_MIN_BYTES..RING_MAX_BYTES."""
    page = page_size or os.sysconf("SC_PAGE_SIZE")
    want = RING_RECORDS * (record_size + RINGBUF_RECORD_HEADER)
    size = min(max(1 << max(want - 1, 1).bit_length(), RING_MIN_BYTES), RING_MAX_BYTES)
    return max(size // page, 1)


@dataclass
class ProbeView:
    """What the template needs for one probe (spans have no thunks of their own)."""

    name: str
    c_name: str
    arg_members: list[str]
    scratch_name: str
    scratch_members: list[str]
    body: list[str]
    builtins: list[Builtin]
    thunks: list[dict[str, object]] = field(default_factory=list)
    kind: str = "uprobe"
    sleepable: bool = False  # reads user strings: sleepable where the kernel allows
    lazy_scratch: bool = False  # the body looks its scratch up itself (Body.lazy_scratch)
    ring_check: int = 0  # the thunk asks the ring for this many bytes first (0: does not)


@dataclass
class _Outputs:
    """What the outputs of every probe add to the program besides their statements."""

    prints: list[PrintOutput] = field(default_factory=list)
    aggregates: list[AggregateOutput] = field(default_factory=list)
    maps: list[str] = field(default_factory=list)
    ucopy_bytes: int = 0  # pr_ucopies' stack bytes (0: no such map)
    announces: bool = False  # a body sends "new process" notices (usym outputs)
    # the outputs whose record or map is declared: a span with several ends runs its
    # outputs in each end's body, declared once
    declared: set[int] = field(default_factory=set)

    def first(self, index: int) -> bool:
        """Whether output `index` is met for the first time (then it is declared)."""
        new = index not in self.declared
        self.declared.add(index)
        return new


def _output_blocks(resolved: ResolvedPlan, probe: str, body: Body,
                   acc: _Outputs) -> list[str]:
    blocks: list[str] = []
    for out in resolved.outputs:
        if out.spec.probe != probe or out.spec.open:
            continue  # an open output runs where its span begins and ends (_open_blocks)
        spec = out.spec
        first = acc.first(spec.index)
        if spec.kind == "print":
            fields = [(f.key, f.expr) for f in out.fields]
            layout = layout_for(spec.index, fields, body.stack)
            if first:
                acc.prints.append(PrintOutput(spec.name, probe, layout, spec.format,
                                              _span_shape(resolved, probe, spec.fields),
                                              spec.otlp_kind, spec.otlp_attributes))
            inner = print_block(layout, fields, out.where, body)
        else:
            agg, inner, decls = aggregates.aggregate_block(
                out, body, resolved.plan.settings.map_size)
            if first:
                acc.aggregates.append(agg)
                acc.maps.extend(decls)
        blocks.append(do_block(inner))
    return blocks


def _span_shape(resolved: ResolvedPlan, probe: str,
                fields: tuple[FieldSpec, ...]) -> SpanShape | None:
    """The span facts of a print of `probe` (None: not a span), for --otlp."""
    span = next((p.spec for p in resolved.spans if p.spec.name == probe), None)
    if span is None:
        return None

    def key_of(*names: str) -> str:
        return next((f.key for f in fields
                     if isinstance(f.expr, Name) and f.expr.ident in names), "")

    key = ""
    if isinstance(span.key, Name):
        last = span.key.ident.rsplit(".", 1)[-1]
        key = key_of(last, f"begin.{last}", f"end.{last}")
    return SpanShape(key_of("latency"), key_of("depth"), span.nested, key)


def _open_outputs(resolved: ResolvedPlan, span: str) -> list[ResolvedOutput]:
    return [o for o in resolved.outputs if o.spec.probe == span and o.spec.open]


def _open_blocks(resolved: ResolvedPlan, span: str, acc: _Outputs) -> OpenBlocks | None:
    """The `open:` outputs of `span` as its begin and end blocks emit them (None: it has
    none); each output's map is declared once, by the block that adds."""
    opens = _open_outputs(resolved, span)
    if not opens:
        return None

    def blocks(body: Body, closing: bool) -> list[tuple[str, list[str]]]:
        out = []
        for o in opens:
            agg, inner, decls = aggregates.aggregate_block(
                o, body, resolved.plan.settings.map_size, closing)
            if not closing:
                acc.aggregates.append(agg)
                acc.maps.extend(decls)
            out.append((agg.lost_map, inner))
        return out
    return blocks


def _event_stack(resolved: ResolvedPlan, event: str | None) -> StackSpec:
    """How the probe whose firing is event `event` (a span's: its end's) takes stacks."""
    spans = {p.spec.name: p for p in resolved.spans}
    seen: set[str] = set()
    while event in spans and event not in seen:
        seen.add(event)
        event = spans[event].spec.end
    probe = next((p for p in resolved.probes if p.spec.name == event), None)
    return probe.stack if probe is not None else StackSpec()


def _span_blocks(resolved: ResolvedPlan, event: str, body: Body,
                 acc: _Outputs) -> list[str]:
    """The spans that begin or end at `event` (a probe, or a span: a span on a span
    begins or ends inside that span's end block, where its values are in scope)."""
    blocks: list[str] = []
    for span in resolved.spans:
        depth = resolved.plan.settings.span_depth
        name = span.spec.name
        begin_stack = _event_stack(resolved, span.spec.begin)
        if span.spec.begin == event:
            opens = _open_blocks(resolved, name, acc)
            blocks.append(do_block(begin_block(span, body, depth, opens, begin_stack)))
        if event in span.spec.end_names:
            def outputs(b: Body, name: str = name) -> list[str]:
                return (_output_blocks(resolved, name, b, acc)
                        + _span_blocks(resolved, name, b, acc))

            closes = _open_blocks(resolved, name, _Outputs())
            blocks.append(do_block(end_block(span, body, depth, outputs, begin_stack,
                                             closes)))
    return blocks


def _print_only_strings(resolved: ResolvedPlan, probe: ResolvedProbe) -> frozenset[int]:
    """The string arguments whose only reader is the last string of one variable print
    record (render/bodies.py `direct_read_lines`): no filter, key, span or other field
    reads them, so the body reads each straight into the record (one copy, not two), and
    only for the events that print."""
    if kind(probe.spec.kind).fields or any(
            probe.spec.name in (span.spec.begin, *span.spec.end_names)
            for span in resolved.spans):
        return frozenset()
    outs = [o for o in resolved.outputs if o.spec.probe == probe.spec.name]
    direct = set()
    for slot in probe.slots:
        if slot.kind != "string" or slot.index in arg_indexes([probe.where]):
            continue
        users = [o for o in outs if slot.index in arg_indexes(output_exprs([o]))]
        if len(users) != 1 or users[0].spec.kind != "print":
            continue
        out = users[0]
        fields = [(f.key, f.expr) for f in out.fields]
        readers = [i for i, (_k, e) in enumerate(fields) if slot.index in arg_indexes([e])]
        if len(readers) != 1 or slot.index in arg_indexes([out.where]):
            continue
        expr = fields[readers[0]][1]
        last = layout_for(out.spec.index, fields, probe.stack).last_string
        if (isinstance(expr, TRef) and expr.ref == ArgRef(slot.index) and last is not None
                and last.member == f"f{readers[0]}"
                and layout_for(out.spec.index, fields, probe.stack).variable):
            direct.add(slot.index)
    return frozenset(direct)


def _scratch_only_when_long(resolved: ResolvedPlan, probe: ResolvedProbe,
                            trial: Body) -> bool:
    """Whether the probe's scratch holds nothing but its print-only strings' buffers
    (`_print_only_strings`): then only a string too long for the smallest record needs
    it, and the body looks it up there (a task-storage lookup in a sleepable probe).
    Found by emitting the body once into `trial`, thrown away with what it emitted: the
    answer is read off the scratch members it declared, each typed with its owner."""
    if not trial.direct:
        return False
    string_reads(probe, trial)
    _ = _nested_prologues(resolved, probe, trial)
    _ = condition(probe.where, trial)
    _ = _output_blocks(resolved, probe.spec.name, trial, _Outputs())
    return trial.scratch_only_for_direct_strings()


def ring_check_size(resolved: ResolvedPlan, probe: ResolvedProbe) -> int:
    """The smallest record of the probe's one print when that record is all an event
    does (no `where` on the probe or the print, no span begins or ends at it, no other
    output, no new-process notice): its thunk then asks the ring for room before reading
    any operand or the clock (templates/record_helpers.h pr_ring_full), and an event
    that finds it full is counted lost and nothing else. 0: any other probe (a `where`
    must see its values first, and an event it drops is not lost)."""
    outs = [o for o in resolved.outputs if o.spec.probe == probe.spec.name]
    if (probe.where is not None or len(outs) != 1 or outs[0].spec.kind != "print"
            or outs[0].where is not None or outs[0].spec.open
            or any(probe.spec.name in (span.spec.begin, *span.spec.end_names)
                   for span in resolved.spans)
            or ("user" in probe.stacks and copied(probe.stack))):
        return 0
    fields = [(f.key, f.expr) for f in outs[0].fields]
    if any(names_symbols(e) for _k, e in fields):
        return 0  # a `usym` field sends a notice first (bodies.symbol_notice)
    return layout_for(outs[0].spec.index, fields, probe.stack).sizes[0]


def _nested_prologues(resolved: ResolvedPlan, probe: ResolvedProbe, body: Body) -> list[str]:
    """The keys and depths of the nested spans the probe begins or ends: first in its
    body, since its `where` may use them."""
    lines: list[str] = []
    max_depth = resolved.plan.settings.span_depth
    for span in resolved.spans:
        if span.spec.nested:
            if span.spec.begin == probe.spec.name:
                lines += nested_prologue(span, True, body, max_depth)
            if span.spec.end == probe.spec.name:
                lines += nested_prologue(span, False, body, max_depth)
    return lines


def one_program(probe: ResolvedProbe) -> bool:
    return probe.one_program


def _func_reads(site: ResolvedSite, func_index: dict[str, int], probe: ResolvedProbe
                ) -> list[str]:
    """The thunk's `func`: the attach cookie of a set's one program, else a constant."""
    if one_program(probe):
        return ["pr_a.func = bpf_get_attach_cookie(ctx);"]
    return [f"pr_a.func = {func_index[site.func]};"]


def _probe_view(resolved: ResolvedPlan, probe: ResolvedProbe, acc: _Outputs,
                helpers: set[Helper], func_index: dict[str, int]) -> ProbeView:
    c_name = c_ident(probe.spec.name)
    # a probe that captures stacks is not made sleepable: its scratch may hold a 16 KiB
    # stack copy (per-CPU; a sleepable body's scratch is task storage), and perf events
    # cannot sleep; its strings fall back to the user-space re-read
    def new_body(lazy: bool) -> Body:
        return Body(f"pr_scratch_{c_name}", {s.index: s for s in probe.slots},
                    faults=kind(probe.spec.kind).binary and not probe.stacks, stack=probe.stack,
                    ucopy_python=_python_capacity(resolved),
                    direct=_print_only_strings(resolved, probe), lazy_scratch=lazy)

    body = new_body(_scratch_only_when_long(resolved, probe, new_body(False)))
    lines = string_reads(probe, body)
    lines += _nested_prologues(resolved, probe, body)
    lines += condition(probe.where, body)
    if "user" in probe.stacks and copied(probe.stack):
        lines += pid_notice_lines()
    lines += _output_blocks(resolved, probe.spec.name, body, acc)
    lines += _span_blocks(resolved, probe.spec.name, body, acc)
    helpers |= body.helpers
    acc.ucopy_bytes = max(acc.ucopy_bytes, body.ucopy_bytes)
    acc.announces = acc.announces or body.announces
    members = [slot_member(s) for s in probe.slots] + stack_members(probe.stacks, probe.stack)
    reads_func = "func" in body.builtins
    if reads_func:
        members.append("__u64 func;")
    view = ProbeView(probe.spec.name, c_name, members,
                     body.scratch_name, list(body.members), lines,
                     [b for b in PROLOGUE if b in body.builtins], kind=probe.spec.kind,
                     sleepable=body.sleepable, lazy_scratch=body.lazy_scratch,
                     ring_check=ring_check_size(resolved, probe))
    for site in probe.sites[:1] if one_program(probe) else probe.sites:
        sk = site_kind(site.kind)
        reads = THUNK_READS[sk](site, probe)
        if reads_func:
            reads += _func_reads(site, func_index, probe)
        # a perf event's or a tracepoint's ctx holds no user registers
        reads += stack_thunk_lines(probe.stacks, probe.stack, not sk.in_binary)
        view.thunks.append({"fn": thunk_name(site.probe, site.kind, site.index),
                            "reads": reads, "shape": THUNK_SHAPES[sk],
                            # in the dispatcher's prog array (_with_slots): where the
                            # loader attaches it that way, the dispatcher checks the scope
                            "dispatched": sk.in_binary and not one_program(probe),
                            # a perf event fires in whatever runs: profile is scoped in
                            # the C as a tracepoint is; interval is never filtered, nor
                            # is a tracepoint with all_processes
                            "skip": None if site.sample_period_ns
                            or probe.spec.all_processes else "PR_CFG_SCOPE_TRACEPOINT"})
    return view


def _python_capacity(resolved: ResolvedPlan) -> int:
    """Python frames a copy of the copies map holds (render/pyframes.py)."""
    return pyframes.program_capacity(p.stack for p in resolved.probes
                                     if "user" in p.stacks and copied(p.stack))


# the comm of a record's header and of the `comm` builtin, read without a helper where
# the kernel has BTF (runtime_helpers.h pr_current_comm)
TASK_COMM_OFFSET = RuntimeConstant("PR_TASK_COMM_OFFSET", TASK_COMM)


def _python_constants() -> tuple[RuntimeConstant, ...]:
    """The run-time constants pr_py_frames reads the executable's identity through."""
    return tuple(RuntimeConstant(macro, KernelMember(struct, path))
                 for macro, struct, path in pyframes.KERNEL_MEMBERS)


def _stack_maps(resolved: ResolvedPlan, ucopy_bytes: int, announces: bool) -> StackMaps:
    """The stack maps the probes' captures need, each as deep as the deepest stack of
    its kind in an output; the announced-processes map when copies are unwound or
    `usym` addresses named over a process's maps (`announces`)."""
    limits = {"user": 0, "kernel": 0}
    for e in output_exprs(resolved.outputs):
        if isinstance(e.type, StackType):
            limits[e.type.kind] = max(limits[e.type.kind], e.type.limit)
    probes = [p for p in resolved.probes if not kind(p.spec.kind).pairs]
    kernel = any("kernel" in p.stacks for p in probes)
    user_ids = any("user" in p.stacks and not copied(p.stack) for p in probes)
    python = _python_capacity(resolved) if ucopy_bytes else 0
    return StackMaps(
        kernel=(KSTACK_MAP, limits["kernel"] or 32) if kernel else None,
        user=(USTACK_MAP, limits["user"] or 64) if user_ids else None,
        copies=(UCOPY_MAP, ucopy_bytes) if ucopy_bytes else None,
        seen=SEEN_MAP if announces or any("user" in p.stacks and copied(p.stack)
                                          for p in probes) else "",
        python=python,
        light=ULIGHT_MAP if ucopy_bytes else "",
        templates=UTMPL_MAP if ucopy_bytes else "",
        known=UKNOWN_MAP if ucopy_bytes else "",
        python_lines=PYTHON_LINES_MAP if python else "")


def render_program(resolved: ResolvedPlan, plan_only: bool = False) -> RenderedProgram:
    """The program for `resolved`. `plan_only` (render --plan-only, for review) leaves the
    headers every plan shares out of `c_source`, each as a one-line comment: that text
    is not loadable."""
    acc = _Outputs()
    helpers: set[Helper] = set()
    # every site's `func` name, in plan order: a set's attach cookies index it
    func_index: dict[str, int] = {}
    for probe in resolved.probes:
        for site in probe.sites:
            func_index.setdefault(site.func, len(func_index))
    views = [_probe_view(resolved, p, acc, helpers, func_index)
             for p in resolved.probes if not kind(p.spec.kind).pairs]
    func_names = tuple(func_index) if any("func" in v.builtins for v in views) else ()
    prints = sorted(acc.prints, key=lambda p: p.layout.output_id)
    settings = resolved.plan.settings
    spans = [span_view(p, settings.map_size, len(_open_outputs(resolved, p.spec.name)))
             for p in resolved.spans]
    python = _python_capacity(resolved) > 0
    constants = tuple(sorted({c for p in resolved.probes for s in p.sites
                              for arg in s.args if arg is not None
                              for c in runtime_constants(arg)}
                             | (set(_python_constants()) if python else set())))
    stack_maps = _stack_maps(resolved, acc.ucopy_bytes, acc.announces)
    # per event: every record header (prints, new-process notices) and `comm` read it
    reads_comm = bool(prints) or bool(stack_maps.seen) or any(
        "comm" in v.builtins for v in views)
    sleepable = {v.name for v in views if v.sleepable}
    sites = _with_slots(_attach_site(s, s.probe in sleepable)
                        for p in resolved.probes if not one_program(p) for s in p.sites)
    sets = tuple(_attach_set(p, func_index, p.spec.name in sleepable)
                 for p in resolved.probes if one_program(p))
    uprobe_slots = sum(s.slot >= 0 for s in sites)
    data_params = tuple(name for name, _ in resolved.data_params)
    c_source = render_template(
        "program.bpf.c.j2",
        runtime_constants=[c.macro for c in constants],
        plan_name=resolved.plan.name,
        probes=views,
        spans=spans,
        span_key_struct=KEY_STRUCT if any(s.key_type == f"struct {KEY_STRUCT}"
                                          for s in spans) else None,
        level_key_struct=LEVEL_KEY_STRUCT if any(s.depth_map for s in spans) else None,
        layouts=[p.layout for p in prints],
        maps=acc.maps,
        stack_maps=map_decls(stack_maps),
        perf=any(site_kind(s.kind).timer for p in resolved.probes for s in p.sites),
        prologue=PROLOGUE,
        ringbuf_pages=settings.ringbuf_pages or default_ring_pages(
            max((p.layout.size for p in prints), default=0)),
        wakeup_share=WAKEUP_SHARE,
        expr_helpers=Helper.EXPR in helpers,
        python_helpers=python,
        helper_macros=[h.value for h in STRING_READERS if h in helpers],
        plan_only=plan_only,
        contracts=c_block(),
        own_shared=own_shared_macros(sites),  # own_sites decides by the same sites
        func_names=len(func_names),
        func_size=FUNC_SIZE,
        uprobe_slots=uprobe_slots,
        uprobe_sites_map=UPROBE_SITES_MAP,
        uprobe_dispatcher=UPROBE_DISPATCHER,
        dispatched_switch=DISPATCHED_SWITCH,
        sleepable_switch=SLEEPABLE_SWITCH,
        params=params.declarations(data_params),
    )
    # in plan order (they were made probe by probe), so their snapshots print in it too
    rank = {o.spec.name: i for i, o in enumerate(resolved.outputs)}
    aggs = sorted(acc.aggregates, key=lambda a: rank[a.name])
    tables = _tables(resolved, aggs)
    joined = {o: t.name for t in tables for _, outs in t.columns for o in outs}
    aggs = [replace(a, table=joined.get(a.name)) for a in aggs]
    return RenderedProgram(c_source, sites, tuple(prints), tuple(aggs),
                           resolved.plan.name, resolved.pid, settings.span_depth,
                           runtime_constants=constants, tables=tables,
                           btf_constants=(TASK_COMM_OFFSET,) if reads_comm else (),
                           python_bins_map=PYTHON_BINS_MAP if python else "",
                           python_codes_map=PYTHON_CODES_MAP if python else "",
                           stack_maps=stack_maps, gated=resolved.gated,
                           span_sides=tuple((p.spec.name, p.spec.begin, p.spec.end)
                                            for p in resolved.probes
                                            if p.spec.begin is not None
                                            and p.spec.end is not None),
                           sets=sets, func_names=func_names, func_size=FUNC_SIZE,
                           task_storage_maps=tuple(v.scratch_name for v in views
                                                   if v.sleepable and v.scratch_members),
                           uprobe_sites_map=UPROBE_SITES_MAP if uprobe_slots else "",
                           uprobe_dispatcher=UPROBE_DISPATCHER if uprobe_slots else "",
                           data_params=data_params,
                           param_values=pack_values(data_params, {
                               n: int(resolved.plan.param_values[n])  # type: ignore[call-overload]
                               for n in data_params}))


def _tables(resolved: ResolvedPlan, aggs: list[AggregateOutput]) -> tuple[AggTable, ...]:
    """The plan's tables over the aggregations rendered (all of them, unless an
    optional target was left out)."""
    present = {a.name for a in aggs}
    return tuple(
        AggTable(t.name, tuple((c.name, tuple(o for o in c.outputs if o in present))
                               for c in t.columns),
                 t.key_fields, t.sort, t.rate, t.every_ns, t.top)
        for t in resolved.plan.tables)


def _target(site: ResolvedSite) -> TargetFile | None:
    binary = site.binary
    return TargetFile(binary.path, binary.display, binary.build_id,
                      FileIdentity(*binary.identity) if binary.identity else None) \
        if binary else None


def _attach_set(probe: ResolvedProbe, func_index: dict[str, int],
                sleepable: bool) -> AttachSet:
    """The one attach of a uprobe set (`one_program`): its thunk at every function."""
    first = probe.sites[0]
    target = _target(first)
    assert target is not None and site_kind(first.kind).in_binary
    return AttachSet(first.kind, thunk_name(first.probe, first.kind, 0), first.probe,
                     target, tuple(s.file_offset for s in probe.sites),
                     tuple(func_index[s.func] for s in probe.sites),
                     tuple(s.func for s in probe.sites), sleepable)


def _with_slots(sites: Iterable[AttachSite]) -> tuple[AttachSite, ...]:
    """`sites` with each uprobe and uretprobe numbered in order: its slot in the prog
    array the dispatcher tail-calls through (RenderedProgram.uprobe_sites_map)."""
    out: list[AttachSite] = []
    slots = 0
    for site in sites:
        if site_kind(site.kind).in_binary:
            site = replace(site, slot=slots)
            slots += 1
        out.append(site)
    return tuple(out)


def _attach_site(site: ResolvedSite, sleepable: bool) -> AttachSite:
    """What the runtime needs of a resolved site: where to attach which function."""
    binary = site.binary
    target = TargetFile(binary.path, binary.display, binary.build_id,
                        FileIdentity(*binary.identity) if binary.identity else None) \
        if binary else None
    return AttachSite(site.kind, thunk_name(site.probe, site.kind, site.index), site.probe,
                      site.index, target, site.file_offset, site.ref_ctr_offset,
                      site.semaphore, site.category, site.event,
                      sample_hz=site.sample_hz, sample_period_ns=site.sample_period_ns,
                      sleepable=sleepable)
