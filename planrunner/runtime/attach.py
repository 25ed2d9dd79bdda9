"""Attach strategies: how one loaded BPF program goes onto one site, and off again.

- `UprobeLinks`: uprobes as uprobe_multi BPF links (runtime/uprobe_links.py says why
  they are preferred: closing them is fast and takes the semaphore down with the probe),
  in bulk: every site of a file and kind on one link of the program's dispatcher, which
  tail-calls the site's thunk from the prog array slot its attach cookie names (a stop
  closes a few links, not one per site: each close waits for its own grace periods).
- `PerfUprobes`: uprobes as perf events through libbcc's C `bpf_attach_uprobe` with its
  full prototype, including `ref_ctr_offset`: bcc 0.26's Python binding declares only
  six arguments, so every attach through it passes a garbage seventh (bcc#5236).
- `Tracepoints`: tracepoints as perf events (runtime/kernel/perf.py, raw syscalls: what
  libbcc's `bpf_attach_tracepoint` does).
- `RawTracepoints`: the run's own exit and exec programs as raw tracepoints
  (BPF_RAW_TRACEPOINT_OPEN): closing one does not wait for a grace period.
- `PerfEvents`: profile and interval probes as software cpu-clock perf events
  (libbcc's `bpf_attach_perf_event`), one per online CPU or one on CPU 0.

Which uprobe strategy a session uses is chosen once, from KernelFeatures
(`uprobe_strategy`), before the first site: a strategy never switches mid-way. Each
says how its programs must be loaded (`prog_type`, `attach_type`); the backend loads
them (runtime/bcc_backend.py) and hands over the fd. With the kernel's reference
counter, USDT semaphores are raised in every process that maps the binary, now or
later, and dropped by the kernel when the probe goes, even if planrunner is killed.

Uses libbcc.so.0 through ctypes (perf-event uprobes and sampling events) and
runtime/kernel/ (links, tracepoints); never imports the bcc Python module.
"""

from __future__ import annotations

import ctypes as ct
import errno
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import cache
from typing import Protocol

from planrunner.errors import BackendError, ResolveError
from planrunner.probe_kinds import (
    PERF_SITE,
    RAW_TRACEPOINT_SITE,
    TRACEPOINT_SITE,
    UPROBE_SITE,
    site_kind,
)
from planrunner.render.model import RUN_OWN_SITES, AttachSite, TargetFile
from planrunner.runtime.features import KernelFeatures
from planrunner.runtime.kernel.bpf import (
    BPF_PROG_TYPE_KPROBE,
    BPF_PROG_TYPE_PERF_EVENT,
    BPF_PROG_TYPE_RAW_TRACEPOINT,
    BPF_PROG_TYPE_TRACEPOINT,
    BPF_TRACE_UPROBE_MULTI,
    raw_tracepoint_open,
    uprobe_multi_link,
)
from planrunner.runtime.kernel.perf import attach_tracepoint, close_event
from planrunner.runtime.uprobe_links import close_all

BPF_PROBE_ENTRY, BPF_PROBE_RETURN = 0, 1
DEFAULT_TRACEFS = "/sys/kernel/tracing"


class AttachStrategy(Protocol):
    prog_type: int  # the program type to load (BPF_PROG_TYPE_*)
    attach_type: int | None  # the expected attach type to load with (None: default)

    def attach(self, prog_fd: int, site: AttachSite, pid: int | None,
               ref_ctr: bool) -> None: ...

    def detach_all(self) -> None: ...


class _Libbcc:
    """libbcc functions with the prototypes planrunner needs (separate from bcc's own
    ctypes declarations, which it must not mutate)."""

    def __init__(self) -> None:
        lib = ct.CDLL("libbcc.so.0", use_errno=True)
        self.attach_uprobe = lib.bpf_attach_uprobe
        self.attach_uprobe.restype = ct.c_int
        self.attach_uprobe.argtypes = [ct.c_int, ct.c_int, ct.c_char_p, ct.c_char_p,
                                       ct.c_uint64, ct.c_int, ct.c_uint32]
        self.detach_uprobe = lib.bpf_detach_uprobe
        self.detach_uprobe.restype = ct.c_int
        self.detach_uprobe.argtypes = [ct.c_char_p]
        self.attach_tracepoint = lib.bpf_attach_tracepoint
        self.attach_tracepoint.restype = ct.c_int
        self.attach_tracepoint.argtypes = [ct.c_int, ct.c_char_p, ct.c_char_p]
        self.attach_perf_event = lib.bpf_attach_perf_event
        self.attach_perf_event.restype = ct.c_int
        self.attach_perf_event.argtypes = [ct.c_int, ct.c_uint32, ct.c_uint32, ct.c_uint64,
                                           ct.c_uint64, ct.c_int, ct.c_int, ct.c_int]
        self.close_perf_event_fd = lib.bpf_close_perf_event_fd
        self.close_perf_event_fd.restype = ct.c_int
        self.close_perf_event_fd.argtypes = [ct.c_int]


@cache
def _libbcc() -> _Libbcc:
    return _Libbcc()


@cache
def _tracefs() -> str | None:
    from planrunner.tracefs import find_root  # noqa: PLC0415 - rarely: not at the default

    return find_root()


def tracepoint_id(category: str, event: str) -> int:
    """The event's id in tracefs (its perf event's config); OSError when there is none.
    Read where tracefs is mounted nearly everywhere first: planrunner/tracefs.py (and
    its /proc/mounts) is imported only when it is not there."""
    try:
        return _read_id(DEFAULT_TRACEFS, category, event)
    except OSError:
        pass
    root = _tracefs()
    if root is None:
        raise OSError(errno.ENOENT, "tracefs is not mounted")
    return _read_id(root, category, event)


def _read_id(root: str, category: str, event: str) -> int:
    with open(os.path.join(root, "events", category, event, "id"), encoding="ascii") as fh:
        return int(fh.read())


def where(site: AttachSite) -> str:
    if site_kind(site.kind).timer:
        return (f"cpu-clock every {site.sample_period_ns} ns" if site.sample_period_ns
                else f"cpu-clock {site.sample_hz} Hz")
    if site.binary is None:
        return f"tracepoint {site.category}:{site.event}"
    return f"{site.binary.display} offset 0x{site.file_offset:x}"


def attach_error(site: AttachSite, err: int) -> BackendError:
    hints = []
    if site.ref_ctr_offset:
        hints.append("the probe has a semaphore: the kernel refuses a reference counter "
                     "that disagrees with another tracer's for the same site")
    return BackendError(f"could not attach probe '{site.probe}' at {where(site)}: "
                        f"{os.strerror(err) if err else 'error'}", hints=tuple(hints))


@dataclass(frozen=True, slots=True)
class LinkGroup:
    """Uprobe sites that one uprobe_multi link attaches: the same file, all uprobes or
    all uretprobes (the link's return flag is one for all its offsets)."""

    path: str
    retprobe: bool
    sites: tuple[AttachSite, ...]

    def ref_ctr_offsets(self, ref_ctr: bool) -> list[int]:
        return [s.ref_ctr_offset if ref_ctr else 0 for s in self.sites]


def link_groups(sites: Iterable[AttachSite]) -> list[LinkGroup]:
    """`sites` (uprobes and uretprobes) as the fewest uprobe_multi links: one per file
    path and kind, in the order each group's first site comes."""
    groups: dict[tuple[str, bool], list[AttachSite]] = {}
    for site in sites:
        assert site.binary is not None
        groups.setdefault((site.binary.path, site_kind(site.kind).returns), []).append(site)
    return [LinkGroup(path, ret, tuple(group)) for (path, ret), group in groups.items()]


class UprobeLinks:
    """Uprobes as uprobe_multi links. A site whose thunk is in the dispatcher's prog
    array (`add`) waits for `attach_batched`, which puts every such site of a file on
    one link of the dispatcher (its slot the attach cookie): closing a few links ends
    a run of thousands of sites at once. Any other site (a sleepable thunk: it cannot
    be tail-called) gets a link of its own at `attach`."""

    prog_type: int = BPF_PROG_TYPE_KPROBE
    attach_type: int | None = BPF_TRACE_UPROBE_MULTI

    def __init__(self) -> None:
        self._links: list[int] = []
        self._batched: dict[tuple[int | None, bool], list[AttachSite]] = {}

    def attach(self, prog_fd: int, site: AttachSite, pid: int | None,
               ref_ctr: bool) -> None:
        assert site.binary is not None
        try:
            link = uprobe_multi_link(prog_fd, site.binary.path, (site.file_offset,),
                                     (site.ref_ctr_offset if ref_ctr else 0,), None,
                                     site_kind(site.kind).returns, pid)
        except OSError as exc:
            raise attach_error(site, exc.errno or 0) from None
        self._links.append(link)

    def add(self, site: AttachSite, pid: int | None, ref_ctr: bool) -> None:
        """Batch `site` (its thunk already in slot `site.slot`) for `attach_batched`."""
        self._batched.setdefault((pid, ref_ctr), []).append(site)

    @property
    def batched(self) -> bool:
        return bool(self._batched)

    def attach_batched(self, dispatcher_fd: int) -> None:
        """One link of `dispatcher_fd` per file and kind for the sites `add` batched.
        The kernel refuses a link whole and says not for which offset: then that
        group's sites are linked one by one, so the refusal names its site (raised,
        as any site's is) and the others are attached."""
        batched, self._batched = self._batched, {}
        for (pid, ref_ctr), sites in batched.items():
            for group in link_groups(sites):
                try:
                    self._links.append(uprobe_multi_link(
                        dispatcher_fd, group.path, [s.file_offset for s in group.sites],
                        group.ref_ctr_offsets(ref_ctr), [s.slot for s in group.sites],
                        group.retprobe, pid))
                    continue
                except OSError:
                    pass
                for site, ref in zip(group.sites, group.ref_ctr_offsets(ref_ctr),
                                     strict=True):
                    try:
                        link = uprobe_multi_link(dispatcher_fd, group.path,
                                                 (site.file_offset,), (ref,), (site.slot,),
                                                 group.retprobe, pid)
                    except OSError as exc:
                        raise attach_error(site, exc.errno or 0) from None
                    self._links.append(link)

    def detach_all(self) -> None:
        links, self._links = self._links, []
        self._batched = {}
        close_all(links)  # from several threads: their RCU grace periods overlap


class PerfUprobes:
    prog_type: int = BPF_PROG_TYPE_KPROBE
    attach_type: int | None = None

    def __init__(self) -> None:
        self._lib = _libbcc()
        self._attached: list[tuple[int, bytes]] = []  # (perf fd, tracefs event name)
        self._n = 0

    def attach(self, prog_fd: int, site: AttachSite, pid: int | None,
               ref_ctr: bool) -> None:
        assert site.binary is not None
        kind = BPF_PROBE_RETURN if site_kind(site.kind).returns else BPF_PROBE_ENTRY
        ev_name = f"pr_{os.getpid()}_{self._n}".encode()
        self._n += 1
        pfd = self._lib.attach_uprobe(prog_fd, kind, ev_name, site.binary.path.encode(),
                                      site.file_offset, pid if pid else -1,
                                      site.ref_ctr_offset if ref_ctr else 0)
        if pfd < 0:
            raise attach_error(site, ct.get_errno())
        self._attached.append((pfd, ev_name))

    def detach_all(self) -> None:
        while self._attached:
            pfd, ev_name = self._attached.pop()
            self._lib.close_perf_event_fd(pfd)
            self._lib.detach_uprobe(ev_name)  # only the tracefs fallback left one


class _PerfEventFds:
    """A strategy whose attaches are perf-event fds (tracepoints, sampling events)."""

    def __init__(self) -> None:
        self._lib = _libbcc()
        self._attached: list[int] = []

    def detach_all(self) -> None:
        # Each close waits for an RCU grace period (~0.1 s): in parallel, they overlap.
        fds, self._attached = self._attached, []
        close_all(fds, close=self._lib.close_perf_event_fd)


class Tracepoints:
    """Tracepoints as perf events by raw syscalls (runtime/kernel/perf.py: every run
    attaches one, and libbcc's dlopen would cost a warm run more than all else)."""

    prog_type: int = BPF_PROG_TYPE_TRACEPOINT
    attach_type: int | None = None

    def __init__(self) -> None:
        self._attached: list[int] = []  # the plan's
        self._own: list[int] = []  # the run's own (render/model.py RUN_OWN_SITES)

    def attach(self, prog_fd: int, site: AttachSite, pid: int | None,
               ref_ctr: bool) -> None:
        # a tracepoint is system-wide: pids are filtered in the program
        # (ConfigSlot.SCOPE_TRACEPOINT)
        try:
            tp_id = tracepoint_id(site.category, site.event)
        except (OSError, ValueError) as exc:  # no such event (or an id that is no number)
            raise attach_error(site, getattr(exc, "errno", None) or errno.ENOENT) from None
        try:
            pfd = attach_tracepoint(prog_fd, tp_id)
        except OSError as exc:
            raise attach_error(site, exc.errno or 0) from None
        (self._own if site in RUN_OWN_SITES else self._attached).append(pfd)

    def detach_probes(self) -> None:
        """The plan's tracepoints only: the run's own stay until `detach_all`."""
        fds, self._attached = self._attached, []
        close_all(fds, close=close_event)

    def detach_all(self) -> None:
        # Each close waits for a grace period; the kernel unregisters tracepoints one at
        # a time (event_mutex), so threads overlap them only with the other kinds' closes.
        fds, self._attached, self._own = [*self._attached, *self._own], [], []
        close_all(fds, close=close_event)


class RawTracepoints:
    """The run's own programs on kernel events as raw tracepoints (their context: the
    event's TP_PROTO arguments). All are the run's own (render/model.py RUN_OWN_SITES):
    they stay until `detach_all`."""

    prog_type: int = BPF_PROG_TYPE_RAW_TRACEPOINT
    attach_type: int | None = None

    def __init__(self) -> None:
        self._own: list[int] = []

    def attach(self, prog_fd: int, site: AttachSite, pid: int | None,
               ref_ctr: bool) -> None:
        try:
            fd = raw_tracepoint_open(prog_fd, site.event)
        except OSError as exc:
            raise attach_error(site, exc.errno or 0) from None
        self._own.append(fd)

    def detach_probes(self) -> None:
        """None of the plan's: nothing to do."""

    def detach_all(self) -> None:
        fds, self._own = self._own, []
        close_all(fds)


PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CPU_CLOCK = 1, 0


def online_cpus() -> list[int]:
    """/sys/devices/system/cpu/online ("0-3,6") as a list."""
    with open("/sys/devices/system/cpu/online", encoding="ascii") as fh:
        text = fh.read().strip()
    cpus: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        cpus += range(int(lo), int(hi or lo) + 1)
    return cpus


class PerfEvents(_PerfEventFds):
    """profile: a cpu-clock event at `sample_hz` on every online CPU; interval: one on
    CPU 0 every `sample_period_ns` (cpu-clock counts nanoseconds)."""

    prog_type: int = BPF_PROG_TYPE_PERF_EVENT
    attach_type: int | None = None

    def attach(self, prog_fd: int, site: AttachSite, pid: int | None,
               ref_ctr: bool) -> None:
        # pid is filtered in the program (ConfigSlot.PID), as for tracepoints
        cpus = [0] if site.sample_period_ns else online_cpus()
        for cpu in cpus:
            pfd = self._lib.attach_perf_event(prog_fd, PERF_TYPE_SOFTWARE,
                                              PERF_COUNT_SW_CPU_CLOCK, site.sample_period_ns,
                                              site.sample_hz, -1, cpu, -1)
            if pfd < 0:
                raise attach_error(site, ct.get_errno())
            self._attached.append(pfd)


def site_key(site: AttachSite) -> tuple[object, ...]:
    """What makes two sites one attach: the same probe at the same byte of the same file."""
    if site.binary is None:
        return (site.probe, site.kind, site.category, site.event)
    try:
        st = os.stat(site.binary.path)
        place: tuple[object, ...] = (st.st_dev, st.st_ino)
    except OSError:
        place = (site.binary.path,)
    return (site.probe, site.kind, *place, site.file_offset)


def distinct_sites(sites: Iterable[AttachSite]) -> list[AttachSite]:
    """Each site once. Uprobes go on the file (its inode), never per process: one binary
    mapped by many processes or containers is one attach, and two paths to one file
    do not double events."""
    seen: set[tuple[object, ...]] = set()
    out = []
    for site in sites:
        key = site_key(site)
        if key not in seen:
            seen.add(key)
            out.append(site)
    return out


def check_unchanged(binaries: Iterable[TargetFile], gone_ok: bool = False) -> None:
    """Refuse when a path no longer names the file resolve read: the kernel attaches by
    path, at offsets computed from the old file (a package upgrade or a rebuild between
    resolve and attach). The session checks before attaching and again after, so a
    replacement during a long attach is caught too; after, with `gone_ok`, a path that
    is gone proves nothing (a --pid process that ended takes /proc/PID/root with it)."""
    for binary in {b.path: b for b in binaries}.values():
        why = _changed(binary, gone_ok)
        if why:
            raise ResolveError(
                f"{binary.display} changed after planrunner read it ({why}): its probe "
                "offsets are the old file's", hints=(
                    "a package upgrade or a rebuild replaced it; run planrunner again to "
                    "resolve the new file",))


def _changed(binary: TargetFile, gone_ok: bool) -> str | None:
    want = binary.identity
    if want is None:
        return None
    try:
        st = os.stat(binary.path)
    except OSError as exc:
        return None if gone_ok else f"it cannot be read now: {exc.strerror}"
    if (st.st_dev, st.st_ino) != (want.dev, want.ino):
        return f"the path names another file now: inode {want.ino} -> {st.st_ino}"
    if st.st_size != want.size:
        return f"rewritten in place: {want.size} -> {st.st_size} bytes"
    if st.st_mtime_ns != want.mtime_ns:
        return "rewritten in place: its modification time changed"
    return None


def uprobe_strategy(features: KernelFeatures) -> AttachStrategy:
    """Links where the kernel has them, else perf events: decided here, once."""
    return UprobeLinks() if features.uprobe_multi else PerfUprobes()


def _tracepoints(features: KernelFeatures) -> AttachStrategy:
    return Tracepoints()


def _perf_events(features: KernelFeatures) -> AttachStrategy:
    return PerfEvents()


def _raw_tracepoints(features: KernelFeatures) -> AttachStrategy:
    return RawTracepoints()


# The strategy of each name a SiteKind gives (probe_kinds.py `SiteKind.strategy`), made
# once per backend from the kernel's features: the sites of a kind share it.
STRATEGIES: dict[str, Callable[[KernelFeatures], AttachStrategy]] = {
    UPROBE_SITE.strategy: uprobe_strategy,  # uprobes and uretprobes: one link per file
    TRACEPOINT_SITE.strategy: _tracepoints,
    PERF_SITE.strategy: _perf_events,
    RAW_TRACEPOINT_SITE.strategy: _raw_tracepoints,
}
