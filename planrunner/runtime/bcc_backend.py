"""The bcc backend: the only module that imports bcc.

Compiles the rendered C, attaches every site, drains the ring buffer and reads
counters and maps. Uprobes are attached as uprobe_multi BPF links where the kernel has
them (runtime/uprobe_links.py says why; PLANRUNNER_UPROBE_ATTACH=perf forces the
other way), else through libbcc's C `bpf_attach_uprobe` with
its full prototype, including `ref_ctr_offset`: bcc 0.26's Python binding declares
only six arguments, so every attach through it passes a garbage seventh (bcc#5236).
With the kernel's reference counter, USDT semaphores are raised in every process that
maps the binary, now or later, and dropped by the kernel when the probe goes, even
if planrunner is killed.
"""

from __future__ import annotations

import ctypes as ct
import os
from collections.abc import Callable
from typing import Any

from planrunner.errors import BackendError, BackendUnavailable
from planrunner.render.model import AttachSite, RenderedProgram
from planrunner.runtime.uprobe_links import (
    BPF_TRACE_UPROBE_MULTI,
    UNSUPPORTED,
    close_all,
    create_link,
)

BPF_PROBE_ENTRY, BPF_PROBE_RETURN = 0, 1
PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CPU_CLOCK = 1, 0


def _import_bcc() -> Any:
    try:
        import bcc  # noqa: PLC0415 - the one place bcc is imported
    except ImportError as exc:
        raise BackendUnavailable(
            f"bcc's Python module is not importable ({exc})",
            hints=("install Debian's python3-bpfcc and run from a venv made with "
                   "--system-site-packages (`make setup` does both)",)) from None
    return bcc


def check_machine() -> None:
    """Fail early, with what to do, when this machine cannot run a plan."""
    if os.geteuid() != 0:
        raise BackendUnavailable("tracing needs root (CAP_BPF and CAP_PERFMON)",
                                 hints=("run with sudo",))
    release = os.uname().release
    if not os.path.exists(f"/lib/modules/{release}/build"):
        raise BackendUnavailable(
            f"kernel headers for {release} are missing (/lib/modules/{release}/build)",
            hints=("bcc compiles C at run time; `make setup` links Debian's headers there",
                   "`planrunner doctor` checks everything run needs"))


def site_key(site: AttachSite) -> tuple[object, ...]:
    """What makes two sites one attach: the same probe at the same byte of the same file."""
    if site.binary is None:
        return (site.probe, site.kind, site.category, site.event)
    try:
        st = os.stat(site.binary.path)
        where: tuple[object, ...] = (st.st_dev, st.st_ino)
    except OSError:
        where = (site.binary.path,)
    return (site.probe, site.kind, *where, site.file_offset)


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


class BccProgram:
    """A compiled, loaded plan program. Use as a context manager: detach on exit."""

    def __init__(self, program: RenderedProgram) -> None:
        check_machine()
        bcc = _import_bcc()
        self._bcc = bcc
        self.program = program
        self._lib = _Libbcc()
        self._attached: list[tuple[int, bytes | None]] = []  # (perf fd, tracefs ev_name)
        self.attached_sites: list[AttachSite] = []
        self._links: list[int] = []  # uprobe_multi link fds
        self._use_links = os.environ.get("PLANRUNNER_UPROBE_ATTACH") != "perf"
        self.pending: list[bytes] = []
        try:
            self.bpf = bcc.BPF(text=program.c_source.encode(),
                               cflags=["-Wno-macro-redefined", "-Wno-unused-function"])
        except Exception as exc:  # bcc raises bare Exception with clang's output on stderr
            raise BackendError(
                f"bcc could not compile the plan's BPF program: {exc}",
                hints=("this is a planrunner bug: `planrunner render` shows the C; please "
                       "report it with the plan",)) from None

    # --- attach / detach ------------------------------------------------------------

    def attach_all(self, pid: int | None,
                   on_attach: Callable[[AttachSite], None] | None = None,
                   ref_ctr: bool = True) -> int:
        """Attach every site once; the number of perf events attached.

        Uprobes go on the file (its inode), never per process: one binary mapped by many
        processes or containers is one attach. Sites are deduplicated by (probe, kind,
        st_dev, st_ino, offset), so two paths to one file do not double events.
        `ref_ctr=False` (poke mode, runtime/semaphores.py) attaches without the kernel's
        reference counter."""
        config = self.bpf["pr_config"]
        config[ct.c_int(1)] = ct.c_uint32(os.getpid())  # PR_CFG_SELF
        if pid and self._has_tracepoints():
            config[ct.c_int(0)] = ct.c_uint32(pid)  # PR_CFG_PID
        seen: set[tuple[object, ...]] = set()
        for n, site in enumerate(self.program.sites):
            key = site_key(site)
            if key in seen:
                continue
            seen.add(key)
            self._attach(site, pid, n, ref_ctr)
            self.attached_sites.append(site)
            if on_attach:
                on_attach(site)
        return len(self._attached) + len(self._links)

    def _has_tracepoints(self) -> bool:
        return self.program.has_tracepoints

    def _attach_perf(self, site: AttachSite) -> None:
        """A software cpu-clock event per CPU (profile: `sample_hz` on each online CPU),
        or one on CPU 0 every `sample_period_ns` (interval). The process filter is in the
        C (pr_config), as for tracepoints."""
        fd = self.bpf.load_func(site.fn_name, self._bcc.BPF.PERF_EVENT).fd
        from bcc.utils import get_online_cpus  # noqa: PLC0415 - bcc's, like the import above

        cpus = [0] if site.sample_period_ns else get_online_cpus()
        for cpu in cpus:
            pfd = self._lib.attach_perf_event(fd, PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CPU_CLOCK,
                                              site.sample_period_ns, site.sample_hz, -1, cpu,
                                              -1)
            what = (f"every {site.sample_period_ns} ns" if site.sample_period_ns
                    else f"{site.sample_hz} Hz")
            self._check(pfd, site, f"cpu-clock {what} on CPU {cpu}")
            self._attached.append((pfd, None))

    def _attach(self, site: AttachSite, pid: int | None, n: int, ref_ctr: bool) -> None:
        bpf_cls = self._bcc.BPF
        if site.kind == "perf":
            self._attach_perf(site)
            return
        if site.kind == "tracepoint":
            fd = self.bpf.load_func(site.fn_name, bpf_cls.TRACEPOINT).fd
            pfd = self._lib.attach_tracepoint(fd, site.category.encode(), site.event.encode())
            self._check(pfd, site, f"tracepoint {site.category}:{site.event}")
            self._attached.append((pfd, None))
            return
        assert site.binary is not None
        if self._use_links and self._attach_link(site, pid, ref_ctr):
            return
        fd = self.bpf.load_func(site.fn_name, bpf_cls.KPROBE).fd
        kind = BPF_PROBE_RETURN if site.kind == "uretprobe" else BPF_PROBE_ENTRY
        ev_name = f"pr_{os.getpid()}_{n}".encode()
        pfd = self._lib.attach_uprobe(fd, kind, ev_name, site.binary.path.encode(),
                                      site.file_offset, pid if pid else -1,
                                      site.ref_ctr_offset if ref_ctr else 0)
        self._check(pfd, site, f"{site.binary.display} offset 0x{site.file_offset:x}")
        self._attached.append((pfd, ev_name))

    def _attach_link(self, site: AttachSite, pid: int | None, ref_ctr: bool) -> bool:
        """Attach as a uprobe_multi link (runtime/uprobe_links.py); False when this
        kernel has none, and from then on every site goes through perf events."""
        assert site.binary is not None
        try:
            fd = self.bpf.load_func(site.fn_name, self._bcc.BPF.KPROBE,
                                    attach_type=BPF_TRACE_UPROBE_MULTI).fd
        except Exception:  # bcc raises bare Exception: the kernel refused the attach type
            self._use_links = False
            return False
        link, err = create_link(fd, site.binary.path, site.file_offset,
                                site.ref_ctr_offset if ref_ctr else 0,
                                site.kind == "uretprobe", pid)
        if link < 0 and err in UNSUPPORTED and not self._links:
            # the program was loaded for links: load it again for perf events
            self._use_links = False
            self.bpf.funcs.pop(site.fn_name.encode(), None)
            return False
        if link < 0:
            ct.set_errno(err)
        self._check(link, site, f"{site.binary.display} offset 0x{site.file_offset:x}")
        self._links.append(link)
        return True

    def _check(self, pfd: int, site: AttachSite, where: str) -> None:
        if pfd >= 0:
            return
        err = ct.get_errno()
        self.detach_all()
        hints = []
        if site.ref_ctr_offset:
            hints.append("the probe has a semaphore: the kernel refuses a reference counter "
                         "that disagrees with another tracer's for the same site")
        raise BackendError(f"could not attach probe '{site.probe}' at {where}: "
                           f"{os.strerror(err) if err else 'error'}", hints=tuple(hints))

    def detach_all(self) -> None:
        self.attached_sites.clear()
        links, self._links = self._links, []
        close_all(links)
        while self._attached:
            pfd, ev_name = self._attached.pop()
            self._lib.close_perf_event_fd(pfd)
            if ev_name is not None:
                self._lib.detach_uprobe(ev_name)  # only the tracefs fallback left one

    def close(self) -> None:
        self.detach_all()
        reader = getattr(self, "_reader", None)
        if reader is not None:
            reader.close()
            self._reader = None
        bpf = getattr(self, "bpf", None)
        if bpf is not None:
            bpf.cleanup()
            self.bpf = None

    def __enter__(self) -> BccProgram:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- events ---------------------------------------------------------------------

    def open_events(self, max_batch: int = 65536) -> None:
        """Start reading print records: mmap the ring buffer (runtime/ringbuf.py), or,
        if the kernel refuses the mapping, fall back to bcc's per-record callback."""
        from planrunner.runtime.ringbuf import RingReader

        self._max_batch = max_batch
        table = self.bpf[self.program.events_map]
        try:
            self._reader: RingReader | None = RingReader(table.map_fd, table.max_entries)
            return
        except (OSError, ValueError):
            self._reader = None
        pending = self.pending
        string_at = ct.string_at

        def on_record(_ctx: Any, data: Any, size: int) -> int:
            pending.append(string_at(data, size))
            return 0

        self._on_record = on_record  # keep the ctypes callback alive
        table.open_ring_buffer(on_record)

    def poll(self, timeout_ms: int) -> list[bytes]:
        """Records waiting in the ring buffer (at most max_batch); when there are none,
        wait up to timeout_ms for a wakeup first (records are submitted without a wakeup
        most of the time, so a timeout still drains)."""
        reader = self._reader
        if reader is not None:
            batch = reader.read(self._max_batch)
            if not batch and timeout_ms > 0:
                reader.wait(timeout_ms)
                batch = reader.read(self._max_batch)
            return batch
        self.bpf.ring_buffer_poll(timeout_ms)
        self.bpf.ring_buffer_consume()
        batch, self.pending[:] = list(self.pending), []
        return batch

    def counter(self, index: int) -> int:
        table = self.bpf["pr_counters"]
        return int(sum(int(v) for v in table[ct.c_int(index)]))

    def table(self, name: str) -> Any:
        return self.bpf[name]

    # --- stacks (runtime/stacks.py StackSource) --------------------------------------

    def stack_ips(self, map_name: str, stack_id: int) -> list[int] | None:
        table = self.bpf[map_name]
        try:
            value = table[table.Key(stack_id)]
        except KeyError:
            return None
        return [int(ip) for ip in value.ip]

    def stack_build_ids(self, map_name: str,
                        stack_id: int) -> list[tuple[int, str, int]] | None:
        """(status, build-id hex, file offset or ip) per frame, innermost first."""
        table = self.bpf[map_name]
        try:
            value = table[table.Key(stack_id)]
        except KeyError:
            return None
        out = []
        for f in value.f:
            if f.status == 0:  # BPF_STACK_BUILD_ID_EMPTY: the end
                break
            out.append((int(f.status), bytes(f.build_id).hex(), int(f.offset)))
        return out

    def forget_pids(self, pids: list[int], map_name: str = "pr_seen") -> None:
        """Drop pids from the announced processes (render/stacks.py pid_notice_lines)."""
        table = self.bpf[map_name]
        for pid in pids:
            try:
                del table[table.Key(pid)]
            except KeyError:
                pass

    def drain_copies(self, map_name: str) -> list[tuple[int, bytes]]:
        """Every (hash, struct pr_ustack bytes) waiting in the copies map, deleting each
        after reading it (BPF stores a hash only when it is absent)."""
        table = self.bpf[map_name]
        out = []
        for key in list(table.keys()):
            try:
                value = table[key]
            except KeyError:
                continue
            out.append((int(key.value), ct.string_at(ct.addressof(value), ct.sizeof(value))))
            try:
                del table[key]
            except KeyError:
                pass
        return out
