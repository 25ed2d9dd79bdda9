"""The bcc backend (runtime/backend.py's Backend): the only module that imports bcc.

Compiles the rendered C with bcc, loads each site's function for its attach strategy
(runtime/attach.py, chosen once from KernelFeatures), reads the ring buffer (mmapped
by runtime/ringbuf.py where the kernel allows, else bcc's callback), maps and counters.
bcc objects are `Any` here and nowhere else.

Imports render/model.py, errors.py and runtime/ modules; nothing of plan/ or resolve/.
"""

from __future__ import annotations

import ctypes as ct
import inspect
import os
import threading
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from planrunner.errors import BackendError, BackendUnavailable
from planrunner.render.model import (
    SCOPE_GIVEN,
    AttachSite,
    ConfigSlot,
    Counter,
    RenderedProgram,
)
from planrunner.runtime.attach import AttachStrategy, PerfEvents, Tracepoints, uprobe_strategy
from planrunner.runtime.backend import MapItems
from planrunner.runtime.features import KernelFeatures, detect
from planrunner.runtime.headers import find_headers
from planrunner.runtime.progload import BPF_F_SLEEPABLE, load_program
from planrunner.runtime.ringbuf import RingReader, ordered_host
from planrunner.runtime.scope import cgroup_key, ensure_bpffs

if TYPE_CHECKING:
    from planrunner.runtime.tracers import TracerRegistry

# Records per read_ring at most: bounds memory and keeps the session's stop checks
# frequent when the kernel produces faster than we print (the rest waits in the ring).
MAX_BATCH = 65536


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
    headers = find_headers()  # where bcc will look, as `planrunner doctor` says
    if headers.found is None:
        raise BackendUnavailable(
            f"kernel headers for {os.uname().release} are missing: {headers.detail}",
            hints=("bcc compiles C at run time; `make setup` links Debian's headers there",
                   "`planrunner doctor` checks everything run needs"))


def read_table(table: Any, delete: bool) -> MapItems:
    """Every (key, value) of a bcc table, in one batch syscall where the kernel allows
    (deleting what it returns when `delete`), else key by key."""
    try:
        batch = table.items_lookup_and_delete_batch if delete else table.items_lookup_batch
        return [(_copy(k), _copy(v)) for k, v in batch()]
    except Exception:  # noqa: BLE001 - bcc raises bare Exception; old kernels lack batches
        items = [(_copy(k), _copy(v)) for k, v in table.items()]
        if delete:
            table.clear()
        return items


def _copy(obj: Any) -> Any:
    """Batch results are views into one reused buffer: copy each before the next call."""
    try:
        return type(obj).from_buffer_copy(obj)
    except (TypeError, AttributeError):  # a plain int already is a copy
        return obj


def _cpu_sum(value: Any) -> int:
    """A per-CPU value (a ctypes array) summed over the CPUs; a scalar as it is."""
    try:
        return sum(int(v) for v in value)
    except TypeError:
        return int(value)


def _loads_for_links(bcc: Any) -> bool:
    """This bcc can load a program for uprobe_multi links (`load_func(attach_type=)`);
    an older one cannot, and its uprobes go through perf events like a kernel without
    links."""
    try:
        return "attach_type" in inspect.signature(bcc.BPF.load_func).parameters
    except (TypeError, ValueError):
        return False


class BccBackend:
    """A compiled, loaded program. Construction is cheap (nothing is checked or
    compiled before `load`); use as a context manager: `close` on exit."""

    def __init__(self, features: KernelFeatures | None = None) -> None:
        self._features = features
        self.bpf: Any = None
        self.program: RenderedProgram | None = None
        self._bcc: Any = None
        self._uprobes: AttachStrategy | None = None
        self._tracepoints: Tracepoints | None = None
        self._perf: PerfEvents | None = None
        self._reader: RingReader | None = None
        self._on_record: Any = None  # keeps bcc's ctypes callback alive
        self._sleepable: dict[str, int] = {}  # fn name -> fd we loaded (bcc did not)
        self.pending: list[bytes] = []
        self._registry: TracerRegistry | None = None  # this run's entry in it

    @property
    def features(self) -> KernelFeatures:
        if self._features is None:
            found = detect()
            if found.uprobe_multi and not _loads_for_links(_import_bcc()):
                found = replace(found, uprobe_multi=False)
            self._features = found
        return self._features

    def load(self, program: RenderedProgram) -> None:
        check_machine()
        ensure_bpffs(os.path.dirname(program.tracers_pin))  # bcc pins pr_tracers there
        self._bcc = _import_bcc()
        self.program = program
        cflags = ["-Wno-macro-redefined", "-Wno-unused-function"]
        if program.runtime_constants:  # values of the running kernel (elf/btf.py)
            from planrunner.elf.btf import BtfError, runtime_cflags
            try:
                cflags += runtime_cflags(program.runtime_constants)
            except BtfError as exc:
                raise BackendError(str(exc)) from None
        if program.has_sleepable and self.features.sleepable:  # string reads fault pages in
            cflags.append(f"-D{program.sleepable_switch}")
        try:
            self.bpf = self._bcc.BPF(text=program.c_source.encode(), cflags=cflags)
        except Exception as exc:  # bcc raises bare Exception with clang's output on stderr
            raise BackendError(
                f"bcc could not compile the plan's BPF program: {exc}",
                hints=("this is a planrunner bug: `planrunner render` shows the C; please "
                       "report it with the plan",)) from None

    def _loaded(self) -> RenderedProgram:
        if self.program is None or self.bpf is None:
            raise BackendError("the BPF program is not loaded")
        return self.program

    def set_config(self, slot: ConfigSlot, value: int) -> None:
        config = self.bpf[self._loaded().config_map]
        config[ct.c_int(int(slot))] = ct.c_uint32(value)

    def fill_scope(self, pids: Sequence[int], comms: Sequence[bytes],
                   cgroups: Sequence[str]) -> None:
        program = self._loaded()
        table = self.bpf[program.scope_pids_map]
        for pid in pids:
            table[ct.c_uint32(pid)] = ct.c_uint32(SCOPE_GIVEN)
        table = self.bpf[program.scope_comms_map]
        for comm in comms:
            key = table.Key()
            key.c = comm
            table[key] = ct.c_uint32(1)
        table = self.bpf[program.scope_cgroups_map]
        for i, path in enumerate(cgroups):
            try:
                cgroup_id, level = cgroup_key(path)
            except OSError as exc:
                raise BackendError(f"cannot use cgroup {path}: {exc.strerror}") from None
            value = table.Leaf()
            value.id, value.level = cgroup_id, level
            table[ct.c_int(i)] = value

    def register_tracer(self, pin: str, tgid: int, start: int) -> bool:
        from planrunner.runtime.tracers import TracerRegistry

        check_machine()
        if self._registry is None:
            self._registry = TracerRegistry(_import_bcc().libbcc.lib, pin)
        return self._registry.register(tgid, start)

    # --- attach / detach ------------------------------------------------------------

    def attach(self, site: AttachSite, pid: int | None, ref_ctr: bool) -> None:
        self._loaded()
        strategy: AttachStrategy
        if site.kind == "tracepoint":
            if self._tracepoints is None:
                self._tracepoints = Tracepoints()
            strategy = self._tracepoints
        elif site.kind == "perf":
            if self._perf is None:
                self._perf = PerfEvents()
            strategy = self._perf
        else:
            if self._uprobes is None:
                self._uprobes = uprobe_strategy(self.features)
            strategy = self._uprobes
        strategy.attach(self._load_func(site, strategy), site, pid, ref_ctr)

    def _load_func(self, site: AttachSite, strategy: AttachStrategy) -> int:
        bpf_cls = self._bcc.BPF
        prog_type = (bpf_cls.TRACEPOINT if strategy.prog_kind == "tracepoint" else
                     bpf_cls.PERF_EVENT if strategy.prog_kind == "perf_event" else
                     bpf_cls.KPROBE)
        if site.sleepable and self.features.sleepable:
            return self._load_sleepable(site, prog_type, strategy.attach_type or 0)
        if strategy.attach_type is None:
            return int(self.bpf.load_func(site.fn_name, prog_type).fd)
        return int(self.bpf.load_func(site.fn_name, prog_type,
                                      attach_type=strategy.attach_type).fd)

    def _load_sleepable(self, site: AttachSite, prog_type: int, attach_type: int) -> int:
        """Load `site`'s function BPF_F_SLEEPABLE from the instructions bcc compiled
        (runtime/progload.py says why not through bcc's load_func)."""
        fd = self._sleepable.get(site.fn_name)
        if fd is not None:
            return fd
        lib, module, name = self._bcc.lib, self.bpf.module, site.fn_name.encode()
        start = lib.bpf_function_start(module, name)
        if not start:
            raise BackendError(f"bcc compiled no function {site.fn_name}")
        fd, err, log = load_program(start, lib.bpf_function_size(module, name),
                                    lib.bpf_module_license(module), prog_type,
                                    BPF_F_SLEEPABLE, attach_type, site.fn_name)
        if fd < 0:
            said = (f"the verifier said: {log.strip()}",) if log else ()
            raise BackendError(
                f"could not load probe '{site.probe}' sleepable: {os.strerror(err)}",
                hints=(*said, "PLANRUNNER_SLEEPABLE=0 loads no program sleepable (strings "
                       "the kernel cannot read are then re-read from user space)"))
        self._sleepable[site.fn_name] = fd
        return fd

    def detach(self) -> None:
        """Every strategy's probes at once: each close waits for a grace period, and
        side by side they overlap (a run's exit program is a tracepoint beside the plan's
        uprobes: one after the other, a stop took 0.1 s more)."""
        strategies = [s for s in (self._uprobes, self._tracepoints, self._perf)
                      if s is not None]
        failed: list[BaseException] = []

        def detach_one(strategy: AttachStrategy) -> None:
            try:
                strategy.detach_all()
            except BaseException as exc:  # noqa: BLE001 - raised below, in this thread
                failed.append(exc)

        threads = [threading.Thread(target=detach_one, args=(s,), daemon=True)
                   for s in strategies]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if failed:
            raise failed[0]

    def close(self) -> None:
        self.detach()
        if self._reader is not None:
            self._reader.close()
            self._reader = None
        while self._sleepable:  # after detach: no link holds them any more
            os.close(self._sleepable.popitem()[1])
        if self._registry is not None:
            self._registry.close()
            self._registry = None
        if self.bpf is not None:
            self.bpf.cleanup()
            self.bpf = None

    def __enter__(self) -> BccBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- events ---------------------------------------------------------------------

    def open_ring(self) -> None:
        """Read print records by mapping the ring buffer (runtime/ringbuf.py) where the
        kernel allows it and the CPU orders memory strongly enough (x86-64), else through
        bcc's per-record callback (libbpf's consumer, with its memory barriers)."""
        table = self.bpf[self._loaded().events_map]
        if self.features.ringbuf_mmap and ordered_host():
            try:
                self._reader = RingReader(table.map_fd, table.max_entries)
                return
            except (OSError, ValueError):  # this map refused: the callback still works
                self._reader = None
        pending = self.pending
        string_at = ct.string_at

        def on_record(_ctx: Any, data: Any, size: int) -> int:
            pending.append(string_at(data, size))
            return 0

        self._on_record = on_record
        table.open_ring_buffer(on_record)

    def read_ring(self, timeout_ms: int) -> list[bytes]:
        """Records waiting in the ring buffer (at most MAX_BATCH); when there are none,
        wait up to timeout_ms for a wakeup first (records are submitted without a wakeup
        most of the time, so a timeout still drains)."""
        reader = self._reader
        if reader is not None:
            batch = reader.read(MAX_BATCH)
            if not batch and timeout_ms > 0:
                reader.wait(timeout_ms)
                batch = reader.read(MAX_BATCH)
            return batch
        self.bpf.ring_buffer_poll(timeout_ms)
        self.bpf.ring_buffer_consume()
        batch, self.pending[:] = list(self.pending), []
        return batch

    # --- maps -------------------------------------------------------------------------

    def counter(self, which: Counter) -> int:
        table = self.bpf[self._loaded().counters_map]
        return _cpu_sum(table[ct.c_int(int(which))])

    def read_map(self, name: str, delete: bool) -> MapItems:
        return read_table(self.bpf[name], delete)

    def map_total(self, name: str) -> int:
        return sum(_cpu_sum(value) for _key, value in self.bpf[name].items())

    # --- stacks (runtime/backend.py StackSource) -------------------------------------

    def stack_ips(self, map_name: str, stack_id: int) -> list[int] | None:
        table = self.bpf[map_name]
        try:
            value = table[table.Key(stack_id)]
        except KeyError:
            return None
        return [int(ip) for ip in value.ip]

    def drain_copies(self, map_name: str) -> list[tuple[int, bytes]]:
        """Each entry is deleted after its read (BPF stores a hash only while it is
        absent, so a copy deleted here is stored again by its next event)."""
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

    def forget_pids(self, map_name: str, pids: list[int]) -> None:
        table = self.bpf[map_name]
        for pid in pids:
            try:
                del table[table.Key(pid)]
            except KeyError:
                pass
