"""RenderedProgram: everything the runtime needs, and nothing of the plan.

`c_source` is exactly what `planrunner render` prints and `run` loads. The runtime
imports this module and nothing of plan/ or resolve/: every C name it must know (maps,
functions, counter slots) is carried here as data, chosen by render/.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

from planrunner.probe_kinds import SiteKindName, site_kind

# The constants the C shares (render/contracts.py), named here too for the runtime
from planrunner.render.contracts import BORN_EXEC as BORN_EXEC
from planrunner.render.contracts import MAX_CGROUPS as MAX_CGROUPS
from planrunner.render.contracts import MAX_TRACERS as MAX_TRACERS
from planrunner.render.contracts import SCOPE_GIVEN as SCOPE_GIVEN
from planrunner.render.contracts import SCOPE_NS_KEY as SCOPE_NS_KEY
from planrunner.render.contracts import TRACERS_MAP as TRACERS_MAP
from planrunner.render.contracts import TRACERS_PIN as TRACERS_PIN
from planrunner.render.contracts import TRACERS_PIN_MACRO as TRACERS_PIN_MACRO
from planrunner.render.contracts import ConfigSlot as ConfigSlot
from planrunner.render.contracts import Counter as Counter
from planrunner.render.contracts import ScopeFlag as ScopeFlag
from planrunner.render.layout import KeyLayout, RecordLayout

if TYPE_CHECKING:  # a warm run reads the model without the BTF reader: only the loader
    from planrunner.elf.btf import KernelMember  # of a program that needs it imports it


@dataclass(frozen=True, slots=True)
class FileIdentity:
    """Which file resolve read at a path: attach refuses a path that names another one
    now (a package upgrade renames a new file over it; offsets would be the old file's)."""

    dev: int
    ino: int
    size: int
    mtime_ns: int


@dataclass(frozen=True, slots=True)
class TargetFile:
    """A binary a uprobe attaches to."""

    path: str  # absolute path attached to (through /proc/PID/root with --pid)
    display: str  # the path as users know it
    build_id: str | None
    identity: FileIdentity | None = None  # None: not checked at attach


@dataclass(frozen=True, slots=True)
class AttachSite:
    """One thunk and where the kernel attaches it: a uprobe or uretprobe at a file
    offset of `binary`, a tracepoint, or a software cpu-clock perf event (`sample_hz`
    on every CPU, or every `sample_period_ns` on CPU 0)."""

    kind: SiteKindName
    fn_name: str  # the C function to load
    probe: str  # plan probe name (for messages)
    index: int  # site number within the probe
    binary: TargetFile | None = None
    file_offset: int = 0
    ref_ctr_offset: int = 0  # semaphore file offset (kernel ref counter), 0 = none
    semaphore: int = 0  # semaphore vaddr (for the /proc/PID/mem fallback)
    category: str = ""  # tracepoint
    event: str = ""
    sample_hz: int = 0  # perf
    sample_period_ns: int = 0
    # Its program faults pages in (templates/runtime_helpers.h PR_FAULT) when compiled
    # with `RenderedProgram.sleepable_switch` defined: then it must be loaded sleepable.
    sleepable: bool = False
    # A uprobe or uretprobe: its index in `RenderedProgram.uprobe_sites_map`, where the
    # runtime puts its thunk for the dispatcher to tail-call (-1: any other kind).
    slot: int = -1


@dataclass(frozen=True, slots=True)
class AttachSet:
    """One program for every function of a uprobe set in `binary`: attached at all of
    `file_offsets` at once (one uprobe_multi link), `cookies[i]` the value
    bpf_get_attach_cookie() returns at offset i, the index of its function in
    `RenderedProgram.func_names`. Nothing differs per site but the cookie, so one
    compiled thunk serves thousands of functions."""

    kind: SiteKindName  # uprobe or uretprobe
    fn_name: str  # the C function to load
    probe: str  # plan probe name (for messages)
    binary: TargetFile
    file_offsets: tuple[int, ...]
    cookies: tuple[int, ...]
    functions: tuple[str, ...]  # the function at each offset (for messages)
    sleepable: bool = False  # as AttachSite.sleepable


@dataclass(frozen=True, slots=True)
class SpanShape:
    """What `run --otlp` needs of a print whose probe is a span: the record keys of its
    latency and depth fields ("" when the print leaves them out), whether it nests,
    and the record key of the span's key ("": the thread, or not a printed field)."""

    latency: str
    depth: str
    nested: bool
    key: str = ""


@dataclass(frozen=True, slots=True)
class PrintOutput:
    """A `print` output: records of `layout` arrive through the ring buffer. `span`:
    its probe is a span; `otlp_*`: the output's `otlp:` option (plan/model.py)."""

    name: str
    probe: str
    layout: RecordLayout
    format: str | None
    span: SpanShape | None = None
    otlp_kind: str = ""
    otlp_attributes: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class AggregateOutput:
    """An in-kernel aggregation read from map `map_name` (key struct -> value struct)."""

    name: str
    probe: str
    kind: str  # count sum min max avg hist lhist
    map_name: str
    key: KeyLayout  # the map's key: its fields in `by` order (render/layout.py)
    value_label: str
    unit: str | None
    every_ns: int | None
    top: int | None
    lhist: tuple[int, int, int] | None  # (min, max, step)
    map_size: int
    value_signed: bool = True  # value kept as __s64 (False: __u64, a uint64 value)
    lost_map: str = ""  # per-CPU array [0]: updates refused because the map was full
    table: str | None = None  # the table that joins it (it then prints only there)
    # an `open:` output: what is open now, never reset; keys whose value is back to 0
    # (every begin of theirs ended) are not rows
    gauge: bool = False


@dataclass(frozen=True, slots=True)
class AggTable:
    """`table:` of the plan: count/sum outputs joined by their shared keys, read at one
    moment each interval; a column adds the outputs it names (those rendered: an
    output of a left-out optional target is not)."""

    name: str
    columns: tuple[tuple[str, tuple[str, ...]], ...]  # (column, aggregate output names)
    key_fields: tuple[str, ...]
    sort: str
    rate: bool
    every_ns: int | None
    top: int | None


@dataclass(frozen=True, slots=True)
class StackMaps:
    """The stack maps a program declares (render/stacks.py), for the runtime: kernel and
    user (frame pointers) stack-id maps as (name, frames per stack), the user stack
    copies map as (name, bytes); None when the program has no such map."""

    kernel: tuple[str, int] | None = None
    user: tuple[str, int] | None = None
    copies: tuple[str, int] | None = None
    seen: str = ""  # the announced-processes map: "new process" records in the ring
    python: int = 0  # Python frames each copy in the copies map holds (render/pyframes.py)
    # beside the copies map: copies whose native stack is a template's, and the
    # templates the reader writes (render/stacks.py)
    light: str = ""
    templates: str = ""
    known: str = ""  # light copies' hashes the reader has named
    python_lines: str = ""  # Python instructions' lines, written by the reader


NEWPID_OUTPUT = 0xFFFFFFFF  # render/stacks.py pid_notice_lines
# Copies waiting in the copies map (render/stacks.py) between two reader turns: at
# most POLL_MS apart, or as long as a quarter of it takes to fill (runtime/loop_wait.py)
UCOPY_ENTRIES = 2048


class RuntimeConstant(NamedTuple):
    """A macro of the C whose value is the offset of `member` in the running kernel."""

    macro: str
    member: KernelMember


# The macros the loader defines for what it does with the program (compile_flags):
# RenderedProgram.sleepable_switch and .dispatched_switch say what each means.
SLEEPABLE_SWITCH = "PR_SLEEPABLE"
DISPATCHED_SWITCH = "PR_DISPATCHED"


@dataclass(frozen=True, slots=True)
class RenderedProgram:
    """The rendered C and what the runtime needs to load, attach and decode it."""

    c_source: str
    sites: tuple[AttachSite, ...]
    prints: tuple[PrintOutput, ...]
    aggregates: tuple[AggregateOutput, ...]
    plan_name: str
    pid: int | None = None
    span_depth: int = 64  # settings.span_depth, for the report of deeper nested calls
    # Maps the runtime reads or fills, by their C names.
    events_map: str = "pr_events"  # the ring buffer of print records
    # per-CPU __u64 array indexed by Counter, then two slots more, not counters: each
    # CPU's wakeup threshold and whether its last record was lost (render/contracts.py
    # WAKE_AT, RING_FULL)
    counters_map: str = "pr_counters"
    config_map: str = "pr_config"  # __u32 array indexed by ConfigSlot
    scope_pids_map: str = "pr_scope_pids"  # __u32 tgid -> __u32 SCOPE_GIVEN or child
    scope_comms_map: str = "pr_scope_comms"  # char[16] comm -> __u32
    scope_cgroups_map: str = "pr_scope_cgroups"  # cgroup array, MAX_CGROUPS entries
    # Every planrunner on the machine: one array element of MAX_TRACERS init-namespace
    # tgids and their start times, pinned so that all runs share it.
    tracers_map: str = TRACERS_MAP
    tracers_pin: str = TRACERS_PIN
    # planrunner processes this run saw start, before they register: __u32 tgid ->
    # __u32 how (1: exec'd as planrunner), and the __u64 count of its entries
    born_map: str = "pr_born"
    born_count_map: str = "pr_born_n"
    # CPython executables whose frames BPF reads (templates/python_helpers.h): struct
    # pr_pybin -> struct pr_pyversion; "" when no stack keeps Python frames
    python_bins_map: str = ""
    # code object -> its names (struct pr_pycode_key -> struct pr_pycode), read by
    # runtime/stacks.py; "" as above
    python_codes_map: str = ""
    # Macros the C uses whose values only the running kernel knows, each with the
    # kernel member whose offset it is (render/operand_c.py names them): the loader
    # defines each (`-DMACRO=N`, elf/btf.py runtime_cflags).
    runtime_constants: tuple[RuntimeConstant, ...] = ()
    # Macros the C only tests with #ifdef, for a path without a helper call where the
    # kernel has BTF (runtime_helpers.h pr_current_comm): the loader defines those the
    # kernel's BTF has (elf/btf.py optional_cflags), else the C calls the helper.
    btf_constants: tuple[RuntimeConstant, ...] = ()
    stack_maps: StackMaps = StackMaps()  # render/stacks.py
    tables: tuple[AggTable, ...] = ()
    # Defined by the loader (`-DPR_SLEEPABLE`) when the kernel has sleepable uprobes: the
    # programs of `sleepable` sites then fault pages in and are loaded BPF_F_SLEEPABLE.
    # Left undefined, the same source is today's non-sleepable program.
    sleepable_switch: str = SLEEPABLE_SWITCH
    # The sleepable probes' scratch maps: task storage under the sleepable switch,
    # declared to bcc as hashes of the same key and value (runtime_helpers.h
    # PR_TASK_STORAGE: bcc would need debug info to create task storage), which the
    # loader creates as task storage.
    task_storage_maps: tuple[str, ...] = ()
    # (probe, why it may not fire: resolve/preflight.py), said again at exit when the
    # probe recorded nothing (runtime/silence.py)
    gated: tuple[tuple[str, str], ...] = ()
    # (span, begin, end) of each span: a span has no sites of its own, so an empty
    # output of it is explained by its sides' binaries and gates (runtime/silence.py)
    span_sides: tuple[tuple[str, str, str], ...] = ()
    # uprobe sets: one program and one attach each (the functions are not in `sites`)
    sets: tuple[AttachSet, ...] = ()
    # `func`'s names, by the index a thunk or attach cookie gives (empty: no probe reads
    # `func`): written into `func_map` (index -> char[func_size]) after loading
    func_names: tuple[str, ...] = ()
    func_map: str = "pr_func_names"
    func_size: int = 64
    # Uprobe sites attached in bulk (runtime/attach.py UprobeLinks): a prog array with a
    # slot per uprobe/uretprobe site (AttachSite.slot) and the function that one
    # uprobe_multi link per binary runs, which tail-calls the slot its attach cookie
    # names. "" when the program has no uprobe site.
    uprobe_sites_map: str = ""
    uprobe_dispatcher: str = ""
    # Defined by the loader (`-DPR_DISPATCHED`) when it attaches uprobes that way: the
    # dispatcher then makes the scope check (pr_skip) of the thunks it tail-calls, in one
    # copy of its code, not one inlined in each (~220 instructions a thunk, which clang
    # and the verifier went through for every site: runtime-stat has 25).
    dispatched_switch: str = DISPATCHED_SWITCH
    # params read as data (render/params.py): their names, in the order of the map's
    # value, and that value for this run (replaced by a warm run with other values)
    data_params: tuple[str, ...] = ()
    param_values: bytes = b""
    params_map: str = "pr_params"

    @property
    def has_sleepable(self) -> bool:
        return any(s.sleepable for s in self.sites) or any(s.sleepable for s in self.sets)

    @property
    def has_tracepoints(self) -> bool:
        """Sites the kernel does not filter by process: the scope is applied in the C."""
        return any(not site_kind(s.kind).in_binary for s in self.sites)


# Programs of runtime_helpers.h that are not probes of the plan. At every process exit:
# a planrunner leaves the tracer registry, a followed child the scope (always attached).
EXIT_SITE = AttachSite("tracepoint", "pr_on_exit", "(planrunner)", 0, category="sched",
                       event="sched_process_exit")
# No planrunner process is traced before it registers (always attached): the child of
# a planrunner is one until it execs; an exec whose comm or argv says planrunner starts
# one (argv is read at the execve, the comm in the new program; with the kernel's
# offsets both in the new program, OWN_BTF_VARIANTS); the -c command is planrunner's
# copy until its exec.
PLANRUNNER_SITES = (
    AttachSite("tracepoint", "pr_on_fork", "(planrunner)", 0, category="task",
               event="task_newtask"),
    AttachSite("tracepoint", "pr_on_execve", "(planrunner)", 0, category="syscalls",
               event="sys_enter_execve"),
    AttachSite("tracepoint", "pr_on_execveat", "(planrunner)", 0, category="syscalls",
               event="sys_enter_execveat"),
    AttachSite("tracepoint", "pr_on_exec", "(planrunner)", 0, category="sched",
               event="sched_process_exec"),
)
EXEC_SITE = PLANRUNNER_SITES[-1]
# The exit and exec programs as raw tracepoints (probe_kinds.RAW_TRACEPOINT_SITE): a
# tracepoint perf event's close at the stop waits for a grace period, 40-70 ms each and
# one after another, a raw tracepoint's does not (0.1 ms). Used unless the plan has a
# tracepoint on the same event (runtime/scope.py own_sites: runtime_helpers.h says why).
OWN_RAW_VARIANTS = {
    EXIT_SITE: AttachSite("raw_tracepoint", "pr_on_exit_raw", "(planrunner)", 0,
                          category="sched", event="sched_process_exit"),
    EXEC_SITE: AttachSite("raw_tracepoint", "pr_on_exec_raw", "(planrunner)", 0,
                          category="sched", event="sched_process_exec"),
}
# --follow-children: forked children of the scope's processes join it.
FORK_SITE = AttachSite("tracepoint", "pr_scope_fork", "(follow-children)", 0,
                       category="task", event="task_newtask")
# With the kernel's struct offsets (its BTF; the macro, struct and member of each,
# defined by the loader: runtime/bcc_backend.py own_btf_cflags) the fork programs are
# raw tracepoints too (their raw arguments: the child's task, read at its tgid's offset)
# and the exec program reads the new program's argv itself (at mm->start_stack), so that
# no execve syscall program is attached: no perf-event tracepoint is left to close at the
# stop. Each: (its perf event, for a plan with a tracepoint on the same event; its raw
# tracepoint). The C has these functions only where the offsets were defined
# (OWN_BTF_PROBES: whether a loaded program has them).
OWN_BTF_MEMBERS = (("PR_TASK_TGID_OFFSET", "task_struct", "tgid"),
                   ("PR_TASK_MM_OFFSET", "task_struct", "mm"),
                   ("PR_MM_START_STACK_OFFSET", "mm_struct", "start_stack"))
EXECVE_SITES = PLANRUNNER_SITES[1:3]
OWN_BTF_VARIANTS = {
    PLANRUNNER_SITES[0]: (PLANRUNNER_SITES[0], AttachSite(
        "raw_tracepoint", "pr_on_fork_raw", "(planrunner)", 0, category="task",
        event="task_newtask")),
    EXEC_SITE: (AttachSite("tracepoint", "pr_on_exec_argv", "(planrunner)", 0,
                           category="sched", event="sched_process_exec"),
                AttachSite("raw_tracepoint", "pr_on_exec_argv_raw", "(planrunner)", 0,
                           category="sched", event="sched_process_exec")),
    FORK_SITE: (FORK_SITE, AttachSite("raw_tracepoint", "pr_scope_fork_raw",
                                      "(follow-children)", 0, category="task",
                                      event="task_newtask")),
}
# One of these is compiled exactly where the kernel's offsets were defined (the exec
# program's two variants: which one, by the plan; see OWN_SHARED_MACROS).
OWN_BTF_PROBES = ("pr_on_exec_argv_raw", "pr_on_exec_argv")
# The events of the run's own programs that a plan's tracepoint may share: then ours is
# the perf-event variant, and the C is told so (`#define`, render/program.py) so that it
# compiles only the variants the run attaches (runtime/scope.py own_sites chooses by the
# same rule): every unused variant compiled cost a first run ~0.18 s of clang.
OWN_SHARED_MACROS = {(site.category, site.event): macro for site, macro in (
    (EXIT_SITE, "PR_SHARED_EXIT"), (EXEC_SITE, "PR_SHARED_EXEC"), (FORK_SITE, "PR_SHARED_FORK"))}


def plan_events(sites: Iterable[AttachSite]) -> set[tuple[str, str]]:
    """(category, event) of each of the plan's sites: a tracepoint there shares the
    event with the run's own program on it."""
    return {(site.category, site.event) for site in sites}


def own_shared_macros(sites: Iterable[AttachSite]) -> list[str]:
    """The macros of the own programs' events the plan shares (see OWN_SHARED_MACROS)."""
    events = plan_events(sites)
    return [macro for event, macro in OWN_SHARED_MACROS.items() if event in events]
# The run's own programs above: they record no event, so a stop reads the ring's tail
# without waiting for them to go (each tracepoint's close waits for a grace period, and
# the kernel closes tracepoints one at a time: runtime/session.py).
RUN_OWN_SITES = frozenset({EXIT_SITE, *PLANRUNNER_SITES, FORK_SITE,
                           *OWN_RAW_VARIANTS.values(),
                           *(v for pair in OWN_BTF_VARIANTS.values() for v in pair)})
# The sites whose attach may fail with a warning (runtime/session.py)
WATCH_SITES = frozenset({*PLANRUNNER_SITES, OWN_RAW_VARIANTS[EXEC_SITE],
                         *OWN_BTF_VARIANTS[PLANRUNNER_SITES[0]],
                         *OWN_BTF_VARIANTS[EXEC_SITE]})
