"""The bcc backend (runtime/backend.py's Backend): the only module that imports bcc.

Compiles the rendered C with bcc, loads each site's function for its attach strategy
(runtime/attach.py, chosen once from KernelFeatures), reads the ring buffer (mmapped
by runtime/ringbuf.py where the kernel allows, else bcc's callback), maps and counters.
bcc objects are `Any` here and nowhere else.

A program compiled before is loaded from the compiled-program cache
(runtime/compile_cache.py) without clang and without importing bcc: `_CachedBPF` stands
where bcc's BPF object would. `_capture` is the bcc side of storing one.

Maps are read (aggregations, counters, stacks: at every interval and at the stop) by
their fds with raw bpf() calls (runtime/map_batch.py), each fd looked up once by name
after the load (`_maps`): no bcc table is made or asked once tracing has begun, and a
cached program's run never imports bcc.

Imports render/model.py, errors.py and runtime/ modules; nothing of plan/ or resolve/.
"""

from __future__ import annotations

import ctypes as ct
import json
import os
import struct
import threading
from collections.abc import Sequence
from dataclasses import replace
from functools import cache
from typing import TYPE_CHECKING, Any, Protocol

from planrunner.errors import BackendError, BackendUnavailable
from planrunner.probe_kinds import UPROBE_SITE, site_kind
from planrunner.render.model import (
    BORN_EXEC,
    SCOPE_GIVEN,
    AttachSet,
    AttachSite,
    ConfigSlot,
    Counter,
    RenderedProgram,
)
from planrunner.runtime import compile_cache as cc
from planrunner.runtime import map_batch
from planrunner.runtime.attach import (
    STRATEGIES,
    AttachStrategy,
    Tracepoints,
    UprobeLinks,
    where,
)
from planrunner.runtime.attach_sets import UprobeSets, no_multi_links
from planrunner.runtime.backend import MapItems
from planrunner.runtime.features import KernelFeatures, detect
from planrunner.runtime.headers import find_headers
from planrunner.runtime.kernel.bpf import (
    BPF_F_SLEEPABLE,
    BPF_PROG_TYPE_KPROBE,
    BPF_PROG_TYPE_PERF_EVENT,
    BPF_PROG_TYPE_TRACEPOINT,
    ProgLoadError,
    map_update_elem,
    prog_load,
)
from planrunner.runtime.map_batch import MapRef
from planrunner.runtime.map_types import UnknownType
from planrunner.runtime.registry_pin import pin_cflags, tracers_pin
from planrunner.runtime.ringbuf import RingReader, ordered_host
from planrunner.runtime.scope import cgroup_key

if TYPE_CHECKING:
    from planrunner.runtime.tracers import TracerRegistry

# Records per read_ring at most: bounds memory and keeps the session's stop checks
# frequent when the kernel produces faster than we print (the rest waits in the ring).
MAX_BATCH = 65536
# a strategy's `prog_kind` as the program type it is loaded with (bcc's BPF.KPROBE,
# TRACEPOINT and PERF_EVENT, spelled here so a cached load needs no bcc)
_PROG_TYPES = {"kprobe": BPF_PROG_TYPE_KPROBE, "tracepoint": BPF_PROG_TYPE_TRACEPOINT,
               "perf_event": BPF_PROG_TYPE_PERF_EVENT}
BASE_CFLAGS = ("-Wno-macro-redefined", "-Wno-unused-function")
# bcc compiles with -g (its BTF is made from the debug info) and puts our cflags after
# its own, so this one wins. LLVM's debug-info pass costs the square of the functions
# (one per probe site): 1000 sites took 189 s of CPU with it, 36 s without
# (BENCHMARKS.md "Probe sites"). Only task-storage maps need the program's BTF (the
# kernel creates them only with it), and those exist only under the sleepable switch.
NO_DEBUG_INFO = "-g0"


def compile_flags(program: RenderedProgram, pin: str, sleepable: bool) -> list[str]:
    """The cflags `program` is compiled with: `sleepable` when the kernel has sleepable
    uprobes (then its sleepable sites fault pages in, with task-storage scratch maps)."""
    cflags = list(BASE_CFLAGS) + pin_cflags(pin, program.tracers_pin)
    if program.runtime_constants:  # values of the running kernel (elf/btf.py)
        from planrunner.elf.btf import BtfError, runtime_cflags
        try:
            cflags += runtime_cflags(program.runtime_constants)
        except BtfError as exc:
            raise BackendError(str(exc)) from None
    if program.has_sleepable and sleepable:  # string reads fault pages in
        cflags.append(f"-D{program.sleepable_switch}")
    else:
        cflags.append(NO_DEBUG_INFO)
    return cflags


def import_bcc() -> Any:
    try:
        import bcc  # noqa: PLC0415 - the one place bcc is imported
    except ImportError as exc:
        raise BackendUnavailable(
            f"bcc's Python module is not importable ({exc})",
            hints=("install Debian's python3-bpfcc and run from a venv made with "
                   "--system-site-packages (`make setup` does both)",)) from None
    return bcc


class CompileFailed(BackendError):
    """bcc could not compile the C (clang has printed why); `detail` is bcc's message."""

    def __init__(self, detail: str) -> None:
        super().__init__(
            f"bcc could not compile the plan's BPF program: {detail}",
            hints=("this is a planrunner bug: `planrunner render` shows the C; please "
                   "report it with the plan",))
        self.detail = detail


def compile_bcc(c_source: str, cflags: Sequence[str]) -> Any:
    """bcc's BPF object of `c_source`: maps created, functions compiled, none loaded."""
    bcc = import_bcc()
    try:
        return bcc.BPF(text=c_source.encode(), cflags=list(cflags))
    except Exception as exc:  # bcc raises bare Exception with clang's output on stderr
        raise CompileFailed(str(exc)) from None


def compile_program(c_source: str, cflags: Sequence[str],
                    pins: dict[str, str]) -> cc.CompiledProgram:
    """`c_source` compiled by bcc, in the cache's form (runtime/compile_worker.py's
    job). Raises CompileFailed, or cc.Uncacheable when that form cannot hold it."""
    bpf = compile_bcc(c_source, cflags)
    try:
        return _capture(bpf, pins)
    finally:
        bpf.cleanup()


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
    import inspect  # noqa: PLC0415 - with bcc only: a cached run imports neither

    try:
        return "attach_type" in inspect.signature(bcc.BPF.load_func).parameters
    except (TypeError, ValueError):
        return False


class _ModuleLib:
    """libbcc's module introspection, declared on a handle of our own (bcc's ctypes
    declarations are left as they are)."""

    def __init__(self) -> None:
        lib = ct.CDLL("libbcc.so.0", use_errno=True)
        size_t, vp = ct.c_ulonglong, ct.c_void_p
        decls: dict[str, tuple[Any, list[Any]]] = {
            "bpf_num_tables": (size_t, [vp]),
            "bpf_table_name": (ct.c_char_p, [vp, size_t]),
            "bpf_table_fd_id": (ct.c_int, [vp, size_t]),
            "bpf_table_key_desc_id": (ct.c_char_p, [vp, size_t]),
            "bpf_table_leaf_desc_id": (ct.c_char_p, [vp, size_t]),
            "bpf_num_functions": (size_t, [vp]),
            "bpf_function_name": (ct.c_char_p, [vp, size_t]),
            "bpf_function_start": (vp, [vp, ct.c_char_p]),
            "bpf_function_size": (size_t, [vp, ct.c_char_p]),
            "bpf_module_license": (ct.c_char_p, [vp]),
            "bpf_module_kern_version": (ct.c_uint, [vp]),
        }
        for name, (restype, argtypes) in decls.items():
            fn = getattr(lib, name)
            fn.restype, fn.argtypes = restype, argtypes
            setattr(self, name, fn)


@cache
def _module_lib() -> _ModuleLib:
    return _ModuleLib()


def _capture(bpf: Any, pins: dict[str, str]) -> cc.CompiledProgram:
    """What the cache keeps of a module bcc just compiled (maps created, fds patched
    into the instructions, nothing loaded yet). `pins`: map name -> where the C pins it
    (RenderedProgram.tracers_pin); such a map is stored as that pin, to be opened
    again, never created. Raises cc.Uncacheable."""
    lib: Any = _module_lib()
    mod = bpf.module
    maps, index_of_fd = [], {}
    for i in range(lib.bpf_num_tables(mod)):
        fd = lib.bpf_table_fd_id(mod, i)
        name = (lib.bpf_table_name(mod, i) or b"").decode()
        if fd < 0 or not name:
            raise cc.Uncacheable(f"table {i} has no map")
        # the definition as the kernel has it, whatever bcc's bookkeeping says
        mtype, ksize, vsize, entries, flags = cc.map_info(fd)
        # a cached run could not read it back, or create it
        if mtype not in _TABLE_CLASSES and mtype not in cc.BTF_MAP_TYPES:
            raise cc.Uncacheable(f"map {name} has type {mtype}")
        maps.append(cc.MapDef(name, mtype, ksize, vsize, entries, flags,
                              (lib.bpf_table_key_desc_id(mod, i) or b"").decode(),
                              (lib.bpf_table_leaf_desc_id(mod, i) or b"").decode(),
                              pins.get(name, "")))
        if name in pins and not cc.same_map(fd, pins[name]):
            raise cc.Uncacheable(f"map {name} is not the one pinned at {pins[name]}")
        index_of_fd[fd] = i
    funcs = []
    for i in range(lib.bpf_num_functions(mod)):
        name = lib.bpf_function_name(mod, i)
        start, size = lib.bpf_function_start(mod, name), lib.bpf_function_size(mod, name)
        if not start or not size:
            raise cc.Uncacheable(f"function {name.decode()} has no instructions")
        insns, relocs = cc.find_relocs(ct.string_at(start, size), index_of_fd)
        funcs.append(cc.FuncDef(name.decode(), insns, relocs))
    return cc.CompiledProgram((lib.bpf_module_license(mod) or b"GPL").decode(),
                              int(lib.bpf_module_kern_version(mod)), tuple(maps), tuple(funcs))


# bcc.table class for each map type (bcc's own Table() asks the module, which a cached
# program has not got)
_TABLE_CLASSES = {1: "HashTable", 2: "Array", 3: "ProgArray", 4: "PerfEventArray",
                  5: "PerCpuHash", 6: "PerCpuArray", 7: "StackTrace", 8: "CgroupArray",
                  9: "LruHash", 10: "LruPerCpuHash", 11: "LpmTrie", 27: "RingBuf"}
_NAMED_TABLES = {"PerfEventArray", "RingBuf"}


class _Func:
    def __init__(self, fd: int) -> None:
        self.fd = fd


class _CachedBPF:
    """Where bcc's BPF object stands, for a program loaded from the cache: the maps
    and functions of runtime/compile_cache.LoadedProgram, and bcc's table objects over
    them on demand (a run reads its maps by fd, runtime/map_batch.py: only tests ask
    for these, to compare the two reads)."""

    module = None  # bcc's table classes ask libbcc about it: NULL answers -1, overwritten

    def __init__(self, loaded: cc.LoadedProgram) -> None:
        self.loaded = loaded
        self.tables: dict[str, Any] = {}

    def load_func(self, name: str, prog_type: int, attach_type: int = -1,
                  prog_flags: int = 0) -> _Func:
        return _Func(self.loaded.load_func(name, prog_type,
                                           None if attach_type == -1 else attach_type,
                                           prog_flags))

    def __getitem__(self, name: str) -> Any:
        table = self.tables.get(name)
        if table is None:
            table = self.tables[name] = self._table(name)
        return table

    def _table(self, name: str) -> Any:
        bcc = import_bcc()  # only now
        m = self.loaded.map_def(name)
        cls_name = _TABLE_CLASSES.get(m.map_type)
        if cls_name is None:
            raise BackendError(f"map {name}: type {m.map_type} is not readable from a "
                               "cached program", hints=("run with --no-cache",))
        decode = bcc.BPF._decode_table_type
        key = decode(json.loads(m.key_desc)) if m.key_desc else ct.c_int
        leaf = decode(json.loads(m.leaf_desc)) if m.leaf_desc else ct.c_int
        cls = getattr(bcc.table, cls_name)
        args = (self, self.loaded.program.map_index(name), self.loaded.map_fd(name),
                key, leaf)
        table = cls(*args, name.encode()) if cls_name in _NAMED_TABLES else cls(*args)
        table.ttype, table.flags, table.max_entries = m.map_type, m.flags, m.max_entries
        return table

    def cleanup(self) -> None:
        self.tables.clear()
        self.loaded.close()


class Compiler(Protocol):
    """A compile out of this process: runtime/compile_worker.py's CompileWorker, which
    compiles with this module's functions (so this module names it by what it does,
    not by importing it)."""

    @property
    def pid(self) -> int | None: ...

    why: str  # why the last compile gave nothing back (for the cache log)

    def compile(self, c_source: str, cflags: list[str],
                pins: dict[str, str]) -> cc.CompiledProgram | None: ...

    def close(self) -> None: ...


class BccBackend:
    """A compiled, loaded program. Construction is cheap (nothing is checked or
    compiled before `load`); use as a context manager: `close` on exit."""

    def __init__(self, features: KernelFeatures | None = None,
                 cache: cc.ProgramCache | None = None,
                 worker: Compiler | None = None) -> None:
        self._features = self._given_features = features
        self._cache = cache  # None: compile every time (--no-cache, tests)
        self._worker = worker  # compiles a program the cache has not got, where it can
        self._closed = False
        self.from_cache = False
        self.bpf: Any = None
        self.program: RenderedProgram | None = None
        self._bcc: Any = None
        self._strategies: dict[str, AttachStrategy] = {}  # by SiteKind.strategy
        self._sets: UprobeSets | None = None
        self._reader: RingReader | None = None
        self._on_record: Any = None  # keeps bcc's ctypes callback alive
        self._sleepable: dict[str, int] = {}  # fn name -> fd we loaded (bcc did not)
        self.pending: list[bytes] = []
        self._registry: TracerRegistry | None = None  # this run's entry in it
        self._maps: dict[str, MapRef] = {}  # every map of the loaded program, by name

    @property
    def features(self) -> KernelFeatures:
        if self._features is None:
            found = detect()
            # a cached program is loaded by our own syscall, whatever bcc can do
            if found.uprobe_multi and not isinstance(self.bpf, _CachedBPF) and \
                    not _loads_for_links(import_bcc()):
                found = replace(found, uprobe_multi=False)
            self._features = found
        return self._features

    def _kernel(self) -> KernelFeatures:
        """What the kernel can do, without asking bcc (which `features` imports)."""
        return self._given_features or detect()

    def load(self, program: RenderedProgram) -> None:
        self._load(program)
        if program.func_names and self.bpf is not None:
            self._fill_func_names(program)
        if program.data_params and self.bpf is not None:  # before any probe can fire
            self.update_map(program.params_map, struct.pack("I", 0), program.param_values)

    def _fill_func_names(self, program: RenderedProgram) -> None:
        """`func`'s name table (RenderedProgram.func_names), each NUL-terminated."""
        size = program.func_size
        values = [name.encode()[:size - 1].ljust(size, b"\0") for name in program.func_names]
        if isinstance(self.bpf, _CachedBPF):
            for i, value in enumerate(values):
                self.bpf.loaded.update(program.func_map, struct.pack("i", i), value)
            return
        table = self.bpf[program.func_map]
        for i, value in enumerate(values):
            leaf = table.Leaf()
            ct.memmove(ct.addressof(leaf), value, size)
            table[ct.c_int(i)] = leaf

    def _load(self, program: RenderedProgram) -> None:
        check_machine()
        pin = tracers_pin(default=program.tracers_pin)  # bcc pins pr_tracers there
        self.program = program
        cflags = compile_flags(program, pin, self._kernel().sleepable)
        pins = {program.tracers_map: pin}
        # bcc's ring callback needs bcc: loaded by our own calls only where the ring is
        # mmapped
        raw = self._kernel().ringbuf_mmap and ordered_host()
        key = self._load_cached(program, cflags) if raw else None
        worker = self._worker
        if self.bpf is not None:
            if worker is not None:  # started in case the cache had not got the program
                self._close_worker()
            return
        if raw and worker is not None:
            worker_pid = worker.pid
            compiled = worker.compile(program.c_source, cflags, pins)  # it has ended
            self._forget(worker_pid)
            if self._closed:  # the session stopped waiting for this load
                raise BackendError("the backend was closed while compiling")
            # refused: compiled again below, where bcc prints the verifier's log
            if compiled is not None and self._load_compiled(program, compiled) is None:
                if self._cache is not None:
                    self._cache.note("compiled by the compile worker")
                    if key is not None:
                        self._cache.put(key, compiled)
                return
            if self._cache is not None:  # compiled again here, as without the worker
                self._cache.note(worker.why or "the compile worker's program was refused")
        elif worker is not None:
            self._close_worker()
        self._bcc = import_bcc()
        self.bpf = compile_bcc(program.c_source, cflags)
        if self._cache is not None and key is not None:
            try:
                self._cache.put(key, _capture(self.bpf, pins))
            except cc.Uncacheable as exc:
                self._cache.note(f"not stored: {exc}")

    def _load_cached(self, program: RenderedProgram, cflags: list[str]) -> str | None:
        """Load `program` from the cache when it holds it (self.bpf set); the key to
        store it under otherwise (None: no cache)."""
        cache_ = self._cache
        if cache_ is None:
            return None
        sleepable = [site.fn_name for site in program.sites
                     if site.sleepable and self._kernel().sleepable] + [
            s.fn_name for s in program.sets if s.sleepable and self._kernel().sleepable]
        key = cc.cache_key(program.c_source, cflags, sleepable=sleepable)
        compiled = cache_.get(key)
        if compiled is None:
            return key
        refused = self._load_compiled(program, compiled)
        if refused is None:
            self.from_cache = True
        else:
            cache_.discard(key, f"was refused ({refused})")
        return key

    def _load_compiled(self, program: RenderedProgram,
                       compiled: cc.CompiledProgram) -> Exception | None:
        """Load a program compiled before (cached, or by the compile worker) with our own
        bpf() calls (self.bpf set); what the kernel said when it refused (nothing kept)."""
        loaded: cc.LoadedProgram | None = None
        try:
            loaded = cc.LoadedProgram(compiled)
            self.bpf = _CachedBPF(loaded)
            # every function now, so that a refusal still falls back to the compile
            for site in program.sites:
                self._load_func(site, self._strategy(site))
            for probes in program.sets:
                self._load_func(probes, self._set_strategy(probes))
            if program.uprobe_dispatcher and isinstance(self._uprobes, UprobeLinks):
                self._load_func(self._dispatcher_site(), self._uprobes)
        except (cc.CacheLoadError, KeyError) as exc:
            if loaded is not None:
                loaded.close()
            self.bpf = None
            self._strategies = {}
            self._sets = None
            self._features = self._given_features  # asked again, bcc's abilities included
            return exc
        return None

    def _loaded(self) -> RenderedProgram:
        if self.program is None or self.bpf is None:
            raise BackendError("the BPF program is not loaded")
        return self.program

    def set_config(self, slot: ConfigSlot, value: int) -> None:
        name = self._loaded().config_map
        if isinstance(self.bpf, _CachedBPF):  # without importing bcc
            self.bpf.loaded.update(name, struct.pack("i", int(slot)), struct.pack("I", value))
            return
        config = self.bpf[name]
        config[ct.c_int(int(slot))] = ct.c_uint32(value)

    def fill_scope(self, pids: Sequence[int], comms: Sequence[bytes],
                   cgroups: Sequence[str]) -> None:
        program = self._loaded()
        if isinstance(self.bpf, _CachedBPF):
            self._fill_scope_raw(program, self.bpf.loaded, pids, comms, cgroups)
            return
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

    def update_map(self, map_name: str, key: bytes, value: bytes) -> None:
        self._loaded()
        try:
            if isinstance(self.bpf, _CachedBPF):
                self.bpf.loaded.update(map_name, key, value)
                return
            table = self.bpf[map_name]
            table[table.Key.from_buffer_copy(key)] = table.Leaf.from_buffer_copy(value)
        except (KeyError, ValueError, OSError) as exc:
            raise BackendError(f"cannot write map {map_name}: {exc}") from None

    def skip_processes(self, tgids: Sequence[int]) -> None:
        program = self._loaded()
        if not tgids:
            return
        count = struct.pack("Q", len(tgids))
        if isinstance(self.bpf, _CachedBPF):
            for tgid in tgids:
                self.bpf.loaded.update(program.born_map, struct.pack("I", tgid),
                                       struct.pack("I", BORN_EXEC))
            self.bpf.loaded.update(program.born_count_map, struct.pack("I", 0), count)
            return
        table = self.bpf[program.born_map]
        for tgid in tgids:
            table[ct.c_uint32(tgid)] = ct.c_uint32(BORN_EXEC)
        self.bpf[program.born_count_map][ct.c_int(0)] = ct.c_uint64(len(tgids))

    @staticmethod
    def _fill_scope_raw(program: RenderedProgram, loaded: cc.LoadedProgram,
                        pids: Sequence[int], comms: Sequence[bytes],
                        cgroups: Sequence[str]) -> None:
        """fill_scope for a cached program, without bcc's tables: the same bytes,
        packed as runtime_helpers.h lays them out (__u32 pids, struct pr_comm,
        struct pr_cgroup { __u64 id; __u64 level; })."""
        for pid in pids:
            loaded.update(program.scope_pids_map, struct.pack("I", pid),
                          struct.pack("I", SCOPE_GIVEN))
        for comm in comms:
            loaded.update(program.scope_comms_map, struct.pack("16s", comm[:15]),
                          struct.pack("I", 1))
        for i, path in enumerate(cgroups):
            try:
                cgroup_id, level = cgroup_key(path)
            except OSError as exc:
                raise BackendError(f"cannot use cgroup {path}: {exc.strerror}") from None
            loaded.update(program.scope_cgroups_map, struct.pack("i", i),
                          struct.pack("QQ", cgroup_id, level))

    def register_tracer(self, pin: str, tgid: int, start: int) -> bool:
        from planrunner.runtime.tracers import TracerRegistry

        check_machine()
        if self._registry is None:
            self._registry = TracerRegistry(pin)
        return self._registry.register(tgid, start)

    # --- attach / detach ------------------------------------------------------------

    def attach(self, site: AttachSite, pid: int | None, ref_ctr: bool) -> None:
        self._loaded()
        strategy = self._strategy(site)
        prog_fd = self._load_func(site, strategy)
        if isinstance(strategy, UprobeLinks) and self._dispatched(site):
            self._fill_slot(site, prog_fd)
            strategy.add(site, pid, ref_ctr)  # linked with its file's others, below
        else:
            strategy.attach(prog_fd, site, pid, ref_ctr)

    def finish_attach(self) -> None:
        """The links of the uprobe sites `attach` batched: one per file and kind."""
        self._map_refs()  # looked up now, before tracing: never during the stop
        uprobes = self._uprobes
        if isinstance(uprobes, UprobeLinks) and uprobes.batched:
            uprobes.attach_batched(self._load_func(self._dispatcher_site(), uprobes))

    def _dispatched(self, site: AttachSite) -> bool:
        """`site` is attached through the dispatcher: a uprobe whose thunk is not loaded
        sleepable (a sleepable program cannot be in a prog array's caller's place: the
        verifier refuses a prog array to a sleepable dispatcher)."""
        return bool(self._loaded().uprobe_dispatcher) and site.slot >= 0 and \
            not (site.sleepable and self.features.sleepable)

    def _dispatcher_site(self) -> AttachSite:
        """The dispatcher as a site to load (never attached as one: a link holds it)."""
        return AttachSite("uprobe", self._loaded().uprobe_dispatcher, "(planrunner)", 0)

    def _fill_slot(self, site: AttachSite, prog_fd: int) -> None:
        """Put `site`'s thunk in its slot of the dispatcher's prog array."""
        name = self._loaded().uprobe_sites_map
        map_fd = (self.bpf.loaded.map_fd(name) if isinstance(self.bpf, _CachedBPF)
                  else self.bpf[name].map_fd)
        try:
            map_update_elem(int(map_fd), struct.pack("I", site.slot), struct.pack("I", prog_fd))
        except OSError as exc:
            raise BackendError(f"could not attach probe '{site.probe}' at {where(site)}: "
                               f"the kernel refused its program in slot {site.slot} of "
                               f"{name}: {exc.strerror}") from None

    def attach_set(self, probes: AttachSet, pid: int | None) -> list[tuple[str, str]]:
        self._loaded()
        strategy = self._set_strategy(probes)
        return strategy.attach(self._load_func(probes, strategy), probes, pid)

    def _set_strategy(self, probes: AttachSet) -> UprobeSets:
        if not self.features.uprobe_multi:
            raise no_multi_links(probes)
        if self._sets is None:
            self._sets = UprobeSets()
        return self._sets

    def _strategy(self, site: AttachSite) -> AttachStrategy:
        """The strategy of `site`'s kind, made on first use (attach.py STRATEGIES)."""
        name = site_kind(site.kind).strategy
        if name not in self._strategies:
            self._strategies[name] = STRATEGIES[name](self.features)
        return self._strategies[name]

    @property
    def _uprobes(self) -> AttachStrategy | None:
        """The uprobe sites' strategy, once made (links, where the dispatcher is)."""
        return self._strategies.get(UPROBE_SITE.strategy)

    def _load_func(self, site: AttachSite | AttachSet,
                   strategy: AttachStrategy | UprobeSets) -> int:
        prog_type = _PROG_TYPES[strategy.prog_kind]
        if site.sleepable and self.features.sleepable:
            if isinstance(self.bpf, _CachedBPF):  # the same flags as the compiled path
                return int(self.bpf.load_func(site.fn_name, prog_type,
                                              strategy.attach_type or 0,
                                              BPF_F_SLEEPABLE).fd)
            return self._load_sleepable(site, prog_type, strategy.attach_type or 0)
        try:
            if strategy.attach_type is None:
                return int(self.bpf.load_func(site.fn_name, prog_type).fd)
            return int(self.bpf.load_func(site.fn_name, prog_type,
                                          attach_type=strategy.attach_type).fd)
        except Exception as exc:  # bcc raises a bare Exception, its log already printed
            if isinstance(exc, BackendError):
                raise
            reason = str(exc).rsplit(": ", 1)[-1]  # "Failed to load BPF program b'f': why"
            raise BackendError(f"could not load probe '{site.probe}': {reason}",
                               hints=("the kernel verifier's log is printed above",)) from None

    def _load_sleepable(self, site: AttachSite | AttachSet, prog_type: int,
                        attach_type: int) -> int:
        """Load `site`'s function BPF_F_SLEEPABLE from the instructions bcc compiled
        (runtime/kernel/bpf.py says why not through bcc's load_func)."""
        fd = self._sleepable.get(site.fn_name)
        if fd is not None:
            return fd
        lib, module, name = self._bcc.lib, self.bpf.module, site.fn_name.encode()
        start = lib.bpf_function_start(module, name)
        if not start:
            raise BackendError(f"bcc compiled no function {site.fn_name}")
        try:
            fd = prog_load(start, lib.bpf_function_size(module, name),
                           lib.bpf_module_license(module), prog_type,
                           BPF_F_SLEEPABLE, attach_type, site.fn_name)
        except ProgLoadError as exc:
            said = (f"the verifier said: {exc.log.strip()}",) if exc.log else ()
            raise BackendError(
                f"could not load probe '{site.probe}' sleepable: {exc.strerror}",
                hints=(*said, "PLANRUNNER_SLEEPABLE=0 loads no program sleepable (strings "
                       "the kernel cannot read are then re-read from user space)")) from None
        self._sleepable[site.fn_name] = fd
        return fd

    def detach(self) -> None:
        """Every strategy's probes at once: each close waits for a grace period, and
        side by side they overlap (a run's exit program is a tracepoint beside the plan's
        uprobes: one after the other, a stop took 0.1 s more)."""
        self._detach_each(probes_only=False)

    def detach_probes(self) -> None:
        """The plan's probes, all at once; the run's own tracepoints stay (`detach`)."""
        self._detach_each(probes_only=True)

    def _detach_each(self, probes_only: bool) -> None:
        strategies: list[AttachStrategy | UprobeSets] = [
            *self._strategies.values(), *((self._sets,) if self._sets else ())]
        failed: list[BaseException] = []

        def detach_one(strategy: AttachStrategy | UprobeSets) -> None:
            try:
                if probes_only and isinstance(strategy, Tracepoints):
                    strategy.detach_probes()
                else:
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

    def _close_worker(self) -> None:
        if self._worker is not None:
            pid = self._worker.pid
            self._worker.close()  # killed, if it still runs
            self._forget(pid)

    def _forget(self, tgid: int | None) -> None:
        """Out of the tracer registry: a process of this run that has ended."""
        if tgid is not None and self._registry is not None:
            try:
                self._registry.unregister(tgid)
            except (OSError, BackendError):  # then the next run to register frees it
                pass

    def close(self) -> None:
        self._closed = True
        self._close_worker()  # a load (maybe abandoned) may still wait on it
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
        name = self._loaded().events_map
        if isinstance(self.bpf, _CachedBPF):  # loaded only where _load_cached allows it
            self._reader = RingReader(self.bpf.loaded.map_fd(name),
                                      self.bpf.loaded.map_def(name).max_entries)
            return
        table = self.bpf[name]
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

    def discard_ring(self) -> int:
        if self._reader is not None:
            return self._reader.discard()
        self.bpf.ring_buffer_consume()  # bcc's callback copies them: cheap beside printing
        count = len(self.pending)
        self.pending[:] = []
        return count

    # --- maps (runtime/map_batch.py: by fd, raw bpf() calls) ------------------------

    def _map_refs(self) -> dict[str, MapRef]:
        """Every map of the loaded program by name, looked up once (finish_attach)."""
        if not self._maps:
            self._loaded()
            self._maps = (_cached_map_refs(self.bpf.loaded) if isinstance(self.bpf, _CachedBPF)
                          else _bcc_map_refs(self.bpf))
        return self._maps

    def _ref(self, name: str) -> MapRef:
        ref = self._map_refs().get(name)
        if ref is None:
            raise BackendError(f"the loaded program has no map {name}")
        return ref

    def _entries(self, name: str, delete: bool) -> tuple[MapRef, map_batch.Entries]:
        ref = self._ref(name)
        try:
            return ref, map_batch.read_entries(ref, delete)
        except OSError as exc:
            raise BackendError(f"cannot read map {name}: {exc.strerror}") from None

    def counter(self, which: Counter) -> int:
        ref = self._ref(self._loaded().counters_map)
        try:
            value = map_batch.lookup(ref, struct.pack("i", int(which)))
        except OSError as exc:
            raise BackendError(f"cannot read map {ref.name}: {exc.strerror}") from None
        return map_batch.u64_total(value or b"")

    def read_map(self, name: str, delete: bool) -> MapItems:
        ref, entries = self._entries(name, delete)
        try:
            return map_batch.typed(ref, entries)
        except UnknownType:  # a type our decoder does not know (none of planrunner's)
            raise BackendError(f"map {name}: its key or value type is not readable: "
                               f"{ref.key_desc} / {ref.leaf_desc}") from None

    def map_total(self, name: str) -> int:
        ref, entries = self._entries(name, False)
        if ref.value_size == 8:  # u64 counters: every slot of every entry
            return map_batch.u64_total(entries.values)
        return sum(_cpu_sum(value) for _key, value in map_batch.typed(ref, entries))

    # --- stacks (runtime/backend.py StackSource) -------------------------------------

    def stack_ips(self, map_name: str, stack_id: int) -> list[int] | None:
        value = self._lookup(map_name, struct.pack("I", stack_id & 0xFFFFFFFF))
        if value is None:
            return None
        return [ip for (ip,) in struct.iter_unpack("Q", value[:len(value) // 8 * 8])]

    def drain_copies(self, map_name: str) -> list[tuple[int, bytes]]:
        """Each entry is deleted with its read (BPF stores a hash only while it is
        absent, so a copy deleted here is stored again by its next event)."""
        ref, entries = self._entries(map_name, delete=True)
        ks, vs = ref.key_size, ref.value_size
        return [(int.from_bytes(entries.keys[i * ks:(i + 1) * ks], "little"),
                 entries.values[i * vs:(i + 1) * vs]) for i in range(entries.count)]

    def map_value(self, map_name: str, key: bytes) -> bytes | None:
        return self._lookup(map_name, key)

    def _lookup(self, map_name: str, key: bytes) -> bytes | None:
        ref = self._ref(map_name)
        try:
            return map_batch.lookup(ref, key)
        except OSError as exc:
            raise BackendError(f"cannot read map {map_name}: {exc.strerror}") from None

    def forget_pids(self, map_name: str, pids: list[int]) -> None:
        ref = self._ref(map_name)
        for pid in pids:
            map_batch.delete(ref, pid.to_bytes(ref.key_size, "little"))


def _cached_map_refs(loaded: cc.LoadedProgram) -> dict[str, MapRef]:
    """The maps of a program loaded from the cache, by name."""
    return {m.name: MapRef(m.name, fd, m.map_type, m.key_size, m.value_size,
                           m.max_entries, m.key_desc, m.leaf_desc)
            for m, fd in zip(loaded.program.maps, loaded.map_fds, strict=True)}


def _bcc_map_refs(bpf: Any) -> dict[str, MapRef]:
    """The maps bcc created for its module, by name: one walk of its tables (a name
    lookup through bcc walks them all, each time), the definitions as the kernel has
    them."""
    lib: Any = _module_lib()
    mod = bpf.module
    refs = {}
    for i in range(lib.bpf_num_tables(mod)):
        fd = lib.bpf_table_fd_id(mod, i)
        name = (lib.bpf_table_name(mod, i) or b"").decode()
        if fd < 0 or not name:
            continue
        try:
            mtype, ksize, vsize, entries, _flags = cc.map_info(fd)
        except cc.Uncacheable:  # the kernel will not say: the map cannot be read either
            continue
        refs[name] = MapRef(name, fd, mtype, ksize, vsize, entries,
                            (lib.bpf_table_key_desc_id(mod, i) or b"").decode(),
                            (lib.bpf_table_leaf_desc_id(mod, i) or b"").decode())
    return refs
