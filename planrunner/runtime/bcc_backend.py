"""The bcc backend (runtime/backend.py's Backend): the only module that imports bcc.

Compiles the rendered C with bcc, loads each site's function for its attach strategy
(runtime/attach.py, chosen once from KernelFeatures), reads the ring buffer (mmapped
by runtime/ringbuf.py where the kernel allows, else bcc's callback), maps and counters.
bcc objects are `Any` here and nowhere else.

A program compiled before is loaded from the compiled-program cache
(runtime/compile_cache.py) without clang and without importing bcc: `_CachedBPF` stands
where bcc's BPF object would, and builds bcc's table objects over the cached maps only
when an aggregation is read, after attaching. `_capture` is the bcc side of storing one.

Imports render/model.py, errors.py and runtime/ modules; nothing of plan/ or resolve/.
"""

from __future__ import annotations

import ctypes as ct
import inspect
import json
import os
import struct
from dataclasses import replace
from functools import cache
from typing import Any

from planrunner.errors import BackendError, BackendUnavailable
from planrunner.render.model import AttachSite, ConfigSlot, Counter, RenderedProgram
from planrunner.runtime import compile_cache as cc
from planrunner.runtime.attach import AttachStrategy, Tracepoints, uprobe_strategy
from planrunner.runtime.backend import MapItems
from planrunner.runtime.features import KernelFeatures, detect
from planrunner.runtime.ringbuf import RingReader

# Records per read_ring at most: bounds memory and keeps the session's stop checks
# frequent when the kernel produces faster than we print (the rest waits in the ring).
MAX_BATCH = 65536
BASE_CFLAGS = ("-Wno-macro-redefined", "-Wno-unused-function")


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


def _capture(bpf: Any) -> cc.CompiledProgram:
    """What the cache keeps of a module bcc just compiled (maps created, fds patched
    into the instructions, nothing loaded yet). Raises cc.Uncacheable."""
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
        if mtype not in _TABLE_CLASSES:  # a cached run could not read it back
            raise cc.Uncacheable(f"map {name} has type {mtype}")
        maps.append(cc.MapDef(name, mtype, ksize, vsize, entries, flags,
                              (lib.bpf_table_key_desc_id(mod, i) or b"").decode(),
                              (lib.bpf_table_leaf_desc_id(mod, i) or b"").decode()))
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
    and functions of runtime/compile_cache.LoadedProgram, bcc tables on demand."""

    module = None  # bcc's table classes ask libbcc about it: NULL answers -1, overwritten

    def __init__(self, loaded: cc.LoadedProgram) -> None:
        self.loaded = loaded
        self.tables: dict[str, Any] = {}

    def load_func(self, name: str, prog_type: int, attach_type: int = -1) -> _Func:
        return _Func(self.loaded.load_func(name, prog_type,
                                           None if attach_type == -1 else attach_type))

    def __getitem__(self, name: str) -> Any:
        table = self.tables.get(name)
        if table is None:
            table = self.tables[name] = self._table(name)
        return table

    def _table(self, name: str) -> Any:
        bcc = _import_bcc()  # only now: reading aggregations, after "Tracing"
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


class BccBackend:
    """A compiled, loaded program. Construction is cheap (nothing is checked or
    compiled before `load`); use as a context manager: `close` on exit."""

    def __init__(self, features: KernelFeatures | None = None,
                 cache: cc.ProgramCache | None = None) -> None:
        self._features = self._given_features = features
        self._cache = cache  # None: compile every time (--no-cache, tests)
        self.from_cache = False
        self.bpf: Any = None
        self.program: RenderedProgram | None = None
        self._bcc: Any = None
        self._uprobes: AttachStrategy | None = None
        self._tracepoints: Tracepoints | None = None
        self._reader: RingReader | None = None
        self._on_record: Any = None  # keeps bcc's ctypes callback alive
        self.pending: list[bytes] = []

    @property
    def features(self) -> KernelFeatures:
        if self._features is None:
            found = detect()
            # a cached program is loaded by our own syscall, whatever bcc can do
            if found.uprobe_multi and not self.from_cache and \
                    not _loads_for_links(_import_bcc()):
                found = replace(found, uprobe_multi=False)
            self._features = found
        return self._features

    def load(self, program: RenderedProgram) -> None:
        check_machine()
        self.program = program
        cflags = list(BASE_CFLAGS)
        if program.runtime_constants:  # values of the running kernel (elf/btf.py)
            from planrunner.elf.btf import BtfError, runtime_cflags
            try:
                cflags += runtime_cflags(program.runtime_constants)
            except BtfError as exc:
                raise BackendError(str(exc)) from None
        key = self._load_cached(program, cflags)
        if self.bpf is not None:
            return
        self._bcc = _import_bcc()
        try:
            self.bpf = self._bcc.BPF(text=program.c_source.encode(), cflags=cflags)
        except Exception as exc:  # bcc raises bare Exception with clang's output on stderr
            raise BackendError(
                f"bcc could not compile the plan's BPF program: {exc}",
                hints=("this is a planrunner bug: `planrunner render` shows the C; please "
                       "report it with the plan",)) from None
        if self._cache is not None and key is not None:
            try:
                self._cache.put(key, _capture(self.bpf))
            except cc.Uncacheable as exc:
                self._cache.note(f"not stored: {exc}")

    def _load_cached(self, program: RenderedProgram, cflags: list[str]) -> str | None:
        """Load `program` from the cache when it holds it (self.bpf set); the key to
        store it under otherwise (None: no cache)."""
        cache_ = self._cache
        if cache_ is None or not detect().ringbuf_mmap:  # bcc's ring callback needs bcc
            return None
        key = cc.cache_key(program.c_source, cflags)
        compiled = cache_.get(key)
        if compiled is None:
            return key
        loaded: cc.LoadedProgram | None = None
        try:
            loaded = cc.LoadedProgram(compiled)
            self.bpf, self.from_cache = _CachedBPF(loaded), True
            # every function now, so that a refusal still falls back to the compile
            for site in program.sites:
                self._load_func(site, self._strategy(site))
        except (cc.CacheLoadError, KeyError) as exc:
            if loaded is not None:
                loaded.close()
            self.bpf, self.from_cache = None, False
            self._uprobes = self._tracepoints = None
            self._features = self._given_features  # asked again, bcc's abilities included
            cache_.discard(key, f"was refused ({exc})")
        return key

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

    # --- attach / detach ------------------------------------------------------------

    def attach(self, site: AttachSite, pid: int | None, ref_ctr: bool) -> None:
        self._loaded()
        strategy = self._strategy(site)
        strategy.attach(self._load_func(site, strategy), site, pid, ref_ctr)

    def _strategy(self, site: AttachSite) -> AttachStrategy:
        if site.kind == "tracepoint":
            if self._tracepoints is None:
                self._tracepoints = Tracepoints()
            return self._tracepoints
        if self._uprobes is None:
            self._uprobes = uprobe_strategy(self.features)
        return self._uprobes

    def _load_func(self, site: AttachSite, strategy: AttachStrategy) -> int:
        # bcc's BPF.TRACEPOINT and BPF.KPROBE, spelled here so a cached load needs no bcc
        prog_type = cc.BPF_PROG_TYPE_TRACEPOINT if strategy.prog_kind == "tracepoint" \
            else cc.BPF_PROG_TYPE_KPROBE
        if strategy.attach_type is None:
            return int(self.bpf.load_func(site.fn_name, prog_type).fd)
        return int(self.bpf.load_func(site.fn_name, prog_type,
                                      attach_type=strategy.attach_type).fd)

    def detach(self) -> None:
        try:
            if self._uprobes is not None:
                self._uprobes.detach_all()
        finally:
            if self._tracepoints is not None:
                self._tracepoints.detach_all()

    def close(self) -> None:
        self.detach()
        if self._reader is not None:
            self._reader.close()
            self._reader = None
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
        kernel allows it, else through bcc's per-record callback."""
        name = self._loaded().events_map
        if isinstance(self.bpf, _CachedBPF):  # loaded only where the kernel mmaps rings
            self._reader = RingReader(self.bpf.loaded.map_fd(name),
                                      self.bpf.loaded.map_def(name).max_entries)
            return
        table = self.bpf[name]
        if self.features.ringbuf_mmap:
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
        name = self._loaded().counters_map
        if isinstance(self.bpf, _CachedBPF):  # at exit too: no bcc import for it
            return sum(self.bpf.loaded.lookup_u64s(name, struct.pack("i", int(which))) or ())
        table = self.bpf[name]
        return _cpu_sum(table[ct.c_int(int(which))])

    def read_map(self, name: str, delete: bool) -> MapItems:
        return read_table(self.bpf[name], delete)

    def map_total(self, name: str) -> int:
        if isinstance(self.bpf, _CachedBPF):
            m = self.bpf.loaded.map_def(name)
            if m.map_type in (2, 6) and m.key_size == 4 and m.value_size == 8:  # u64 arrays
                return sum(sum(self.bpf.loaded.lookup_u64s(name, struct.pack("I", i)) or ())
                           for i in range(m.max_entries))
        return sum(_cpu_sum(value) for _key, value in self.bpf[name].items())
