"""Which processes a run records: --pid (several), --comm, --cgroup, -c with
--follow-children, and never any planrunner's own.

The filter code is always in the program (templates/runtime_helpers.h `pr_skip`); this
module turns it on by filling the config slots and scope maps before attaching, and
chooses the attach-time pid: one --pid alone (or a -c command) keeps the kernel's uprobe
pid filter and costs nothing per event; anything else attaches system-wide and filters
in BPF.

Pids are the ones planrunner sees (its pid namespace). BPF sees init-namespace tgids,
so when planrunner runs in another pid namespace the program compares
`bpf_get_ns_current_pid_tgid` with the namespace's (dev, inode) instead.

Imports render/model.py, runtime/backend.py, runtime/registry_pin.py (where the registry
of runs is pinned) and elf/procmaps.py (start times) only.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, replace

from planrunner.elf.procmaps import start_time
from planrunner.render.contracts import COMM_LEN
from planrunner.render.model import (
    EXECVE_SITES,
    EXIT_SITE,
    FORK_SITE,
    OWN_BTF_PROBES,
    OWN_BTF_VARIANTS,
    OWN_RAW_VARIANTS,
    PLANRUNNER_SITES,
    SCOPE_NS_KEY,
    AttachSite,
    ConfigSlot,
    RenderedProgram,
    ScopeFlag,
    plan_events,
)
from planrunner.runtime.backend import Backend
from planrunner.runtime.registry_pin import tracers_pin

PROC_PID_INIT_INO = 0xEFFFFFFC  # include/linux/proc_ns.h: the init pid namespace


@dataclass(frozen=True, slots=True)
class Scope:
    """What a run traces: --pid, --comm, --cgroup, --follow-children."""

    pids: tuple[int, ...] = ()  # in planrunner's pid namespace
    comms: tuple[str, ...] = ()
    cgroups: tuple[str, ...] = ()  # absolute cgroup v2 directories
    follow_children: bool = False
    command: int | None = None  # the -c command's pid: a copy of planrunner until its exec

    def with_command(self, pid: int) -> Scope:
        """The scope with the -c command's pid as its (only) --pid."""
        return replace(self, pids=(pid,), command=pid)

    @property
    def attach_pid(self) -> int | None:
        """The pid uprobes are attached for (the kernel filters: free per event), when the
        scope is exactly one process; None: attach system-wide, filter in BPF."""
        if len(self.pids) == 1 and not self.follow_children:
            return self.pids[0]
        return None

    def flags(self) -> ScopeFlag:
        flags = ScopeFlag(0)
        if self.pids:
            flags |= ScopeFlag.PIDS
        if self.comms:
            flags |= ScopeFlag.COMM
        if self.cgroups:
            flags |= ScopeFlag.CGROUP
        return flags

    def describe(self) -> str:
        """What the start-up line says is traced: 'process 12', 'processes 1, 2 and
        their children, named nginx, in cgroup /sys/fs/cgroup/x'."""
        parts = []
        if self.pids:
            many = len(self.pids) > 1
            parts.append(f"process{'es' if many else ''} "
                         + ", ".join(str(p) for p in self.pids)
                         + ((" and their descendants" if many else " and its descendants")
                         if self.follow_children else ""))
        if self.comms:
            parts.append("named " + " or ".join(self.comms))
        if self.cgroups:
            parts.append(f"in cgroup{'s' if len(self.cgroups) > 1 else ''} "
                         + " or ".join(self.cgroups))
        if not parts:
            return "all processes"
        if not self.pids:
            parts[0] = "processes " + parts[0]
        return ", ".join(parts)


@dataclass(frozen=True, slots=True)
class PidNamespace:
    """A pid namespace, as BPF's bpf_get_ns_current_pid_tgid names it."""

    dev: int  # the kernel's dev_t of nsfs (MKDEV: major << 20 | minor), as BPF compares
    ino: int


def own_pid_namespace(path: str = "/proc/self/ns/pid") -> PidNamespace | None:
    """planrunner's pid namespace, or None when it is the init one (BPF's own tgids are
    then the ones planrunner sees)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    if st.st_ino == PROC_PID_INIT_INO:
        return None
    return PidNamespace((os.major(st.st_dev) << 20) | os.minor(st.st_dev), st.st_ino)


def apply_scope(backend: Backend, program: RenderedProgram, scope: Scope,
                namespace: PidNamespace | None = None) -> list[AttachSite]:
    """Fill the config slots and scope maps of a loaded program; the extra sites to
    attach (runtime_helpers.h's exit program and those that keep planrunner processes
    out before they register, and the fork one for --follow-children)."""
    me = os.getpid()
    backend.set_config(ConfigSlot.SELF, me)  # our own events are dropped
    if scope.command is not None:  # and the -c command's, until its exec has succeeded
        backend.set_config(ConfigSlot.COMMAND, scope.command)
    if namespace is not None:
        backend.set_config(ConfigSlot.NS_DEV, namespace.dev)
        backend.set_config(ConfigSlot.NS_INO, namespace.ino)
    flags = scope.flags()
    if flags:
        key = SCOPE_NS_KEY if namespace is not None else 0
        backend.fill_scope([p | key for p in scope.pids],
                           [c.encode()[:COMM_LEN - 1] for c in scope.comms],
                           list(scope.cgroups))
        if scope.cgroups:
            backend.set_config(ConfigSlot.CGROUPS, len(scope.cgroups))
        # One pid alone is filtered at attach for uprobes; tracepoints always need BPF.
        uprobe_flags = flags & ~ScopeFlag.PIDS if scope.attach_pid else flags
        if uprobe_flags:
            backend.set_config(ConfigSlot.SCOPE_UPROBE, int(uprobe_flags))
        backend.set_config(ConfigSlot.SCOPE_TRACEPOINT, int(flags))
    if namespace is None:  # (the map holds init-namespace tgids: ours are those then)
        backend.skip_processes(starting_planrunners(me))
    return own_sites(program, scope.follow_children,
                     any(backend.has_function(name) for name in OWN_BTF_PROBES))


def own_sites(program: RenderedProgram, follow_children: bool,
              btf: bool) -> list[AttachSite]:
    """The run's own programs to attach, each as a raw tracepoint unless the plan has
    a tracepoint on the same event (then its perf event: render/model.py). `btf`: the
    loaded program has the variants compiled with the kernel's struct offsets
    (OWN_BTF_VARIANTS: fork raw too, no execve programs); else only exit and exec can
    be raw (OWN_RAW_VARIANTS)."""
    extra = [EXIT_SITE, *PLANRUNNER_SITES, *((FORK_SITE,) if follow_children else ())]
    events = plan_events(program.sites)  # the rule the C's variants follow too
    chosen = []
    for site in extra:
        shared = (site.category, site.event) in events
        if btf and site in EXECVE_SITES:
            continue  # the exec program reads argv itself
        if btf and site in OWN_BTF_VARIANTS:
            perf, raw = OWN_BTF_VARIANTS[site]
            chosen.append(perf if shared else raw)
        else:
            chosen.append(site if shared else OWN_RAW_VARIANTS.get(site, site))
    return chosen


def starting_planrunners(me: int, proc: str = "/proc") -> list[int]:
    """The planrunner processes running now, but `me`: the program skips them from
    the start, as it skips one it sees exec planrunner later (runtime_helpers.h
    `pr_on_exec`: one that started a moment before this run attached has not
    registered yet). Found by the same signs: the comm `planrunner`, or a `python…`
    whose first arguments say `-m planrunner` or `-Xplanrunner`."""
    found = []
    for name in os.listdir(proc):
        if not name.isdigit() or int(name) == me:
            continue
        try:
            with open(f"{proc}/{name}/comm", "rb") as fh:
                comm = fh.read().rstrip(b"\n")
            argv: list[bytes] = []
            if comm.startswith(b"python"):
                with open(f"{proc}/{name}/cmdline", "rb") as fh:
                    argv = fh.read(4096).split(b"\0")
        except OSError:  # gone, or a kernel thread
            continue
        if is_planrunner(comm, argv):
            found.append(int(name))
    return found


def is_planrunner(comm: bytes, argv: Sequence[bytes]) -> bool:
    """What `pr_on_exec` and `pr_note_exec` test in the kernel (runtime_helpers.h)."""
    if comm == b"planrunner":
        return True
    if not comm.startswith(b"python"):
        return False
    after_m = False
    for word in argv[1:5]:
        if (after_m and _names_planrunner(word)) or \
                (word[:2] in (b"-m", b"-X") and _names_planrunner(word[2:])):
            return True
        after_m = word == b"-m"
    return False


def _names_planrunner(word: bytes) -> bool:
    return word == b"planrunner" or word.startswith(b"planrunner.")


def register_run(backend: Backend, pin: str | None = None, tgid: int | None = None) -> bool:
    """Add this process (or `tgid`, a process of this run: the compile worker) to the
    machine's tracer registry (runtime/tracers.py), before anything is compiled: every
    run already attached ignores it from now on. Not as a user (`load` says what is
    missing) nor in another pid namespace, where our init-namespace tgid is unknown:
    there we still exclude ourselves (SELF) and every registered run. False when
    MAX_TRACERS runs are registered already."""
    if os.geteuid() != 0 or own_pid_namespace() is not None:
        return True
    tgid = os.getpid() if tgid is None else tgid
    return backend.register_tracer(pin or tracers_pin(), tgid, start_time(tgid) or 0)


def tracer_alive(tgid: int, start: int) -> bool:
    """A registered tracer is still that process (not dead, not a reused pid)."""
    now = start_time(tgid)
    return now is not None and (start == 0 or now == start)


__all__ = ["PidNamespace", "Scope", "apply_scope",
           "own_pid_namespace", "register_run", "tracer_alive"]


def cgroup_key(path: str, mounts: str = "/proc/self/mounts") -> tuple[int, int]:
    """(cgroup id, depth below the root of its cgroup v2 hierarchy) of the cgroup v2
    directory `path`: what the program compares with bpf_get_current_ancestor_cgroup_id.
    A cgroup's id is the inode number of its directory (kernfs)."""
    real = os.path.realpath(path)
    with open(mounts, encoding="utf-8", errors="replace") as fh:
        roots = [parts[1] for parts in (line.split() for line in fh)
                 if len(parts) >= 3 and parts[2] == "cgroup2"]
    inside = [r for r in roots if real == r or real.startswith(r.rstrip("/") + "/")]
    if not inside:
        raise OSError(0, f"{path} is not in a cgroup v2 hierarchy")
    root = max(inside, key=len)
    rel = os.path.relpath(real, root)
    level = 0 if rel == "." else len(rel.split(os.sep))
    return os.stat(real).st_ino, level
