"""The bcc backend (runtime/backend.py's Backend): the only module that imports bcc.

One load path. bcc only compiles: the rendered C becomes a program image
(runtime/compile_cache.py's CompiledProgram: map definitions, each function's
instructions and where they name a map), in the compile worker (runtime/compile_worker.py)
or, where there is none, in this process (`compile_program`). Every image, fresh or from
the compiled-program cache, is loaded by planrunner's own bpf() calls
(compile_cache.LoadedProgram), so a cold run and a warm one load, attach and read the
same way, and a warm run never imports bcc. `_capture` is the bcc side of making an
image.

Each site's function is loaded for its attach strategy (runtime/attach.py, chosen once
from KernelFeatures). Print records are read from the mmapped ring buffer
(runtime/ringbuf.py) where the CPU orders memory strongly enough, else through libbpf's
consumer (runtime/ring_libbpf.py). Maps (aggregations, counters, stacks: at every
interval and at the stop) are read by their fds with raw bpf() calls
(runtime/map_batch.py), each fd known from the load. bcc objects are `Any` here and
nowhere else.

Imports render/model.py, errors.py and runtime/ modules; nothing of plan/ or resolve/.
"""

from __future__ import annotations

import ctypes as ct
import functools
import os
import struct
from collections.abc import Callable, Sequence
from functools import cache
from typing import TYPE_CHECKING, Any, Protocol

from planrunner.errors import BackendError, BackendUnavailable
from planrunner.probe_kinds import UPROBE_SITE, site_kind
from planrunner.render.contracts import PR_CGROUP, PR_COMM, U32, U64
from planrunner.render.model import (
    BORN_EXEC,
    OWN_BTF_MEMBERS,
    SCOPE_GIVEN,
    AttachSet,
    AttachSite,
    ConfigSlot,
    Counter,
    RenderedProgram,
    RuntimeConstant,
)
from planrunner.runtime import compile_cache as cc
from planrunner.runtime import map_batch
from planrunner.runtime.attach import (
    STRATEGIES,
    AttachStrategy,
    RawTracepoints,
    Tracepoints,
    UprobeLinks,
    where,
)
from planrunner.runtime.attach_sets import UprobeSets, no_multi_links
from planrunner.runtime.backend import MapItems
from planrunner.runtime.features import KernelFeatures, detect
from planrunner.runtime.headers import find_headers
from planrunner.runtime.kernel.bpf import (
    BPF_F_NO_PREALLOC,
    BPF_F_SLEEPABLE,
    BPF_MAP_TYPE_HASH,
    BPF_MAP_TYPE_TASK_STORAGE,
    map_update_elem,
)
from planrunner.runtime.map_batch import MapRef
from planrunner.runtime.map_types import UnknownType
from planrunner.runtime.registry_pin import pin_cflags, tracers_pin
from planrunner.runtime.ring_libbpf import LibbpfRing, wants_libbpf
from planrunner.runtime.ringbuf import RingReader, ordered_host
from planrunner.runtime.scope import cgroup_key
from planrunner.runtime.side_by_side import side_by_side

if TYPE_CHECKING:
    from planrunner.runtime.tracers import TracerRegistry

# Records per read_ring at most: bounds memory and keeps the session's stop checks
# frequent when the kernel produces faster than we print (the rest waits in the ring).
MAX_BATCH = 65536
# bcc optimizes the module twice: clang's -O2 pipeline while it generates the IR (bcc
# passes -O2), then its own -O3 (BPFModule::run_pass_manager, with the always-inliner)
# before BPF code generation. The first is skipped (`-disable-llvm-passes`: the IR is
# generated as for -O2, no optnone), the second optimizes alone: ~40% of a plan's clang
# CPU less (BENCHMARKS.md, issue 28 item 3, session eleven), fewer BPF instructions.
SINGLE_OPTIMIZATION = ("-Xclang", "-disable-llvm-passes")
BASE_CFLAGS = ("-Wno-macro-redefined", "-Wno-unused-function", *SINGLE_OPTIMIZATION)
# bcc compiles with -g (its BTF is made from the debug info) and puts our cflags after
# its own, so this one wins. LLVM's debug-info pass costs the square of the functions
# (one per probe site): 1000 sites took 189 s of CPU with it, 36 s without
# (BENCHMARKS.md "Probe sites"). Nothing needs the program's BTF: planrunner's loader
# loads no function info, and the one map the kernel creates only with BTF, the task
# storage of sleepable probes, is declared to bcc as a hash and created by the loader
# (runtime_helpers.h PR_TASK_STORAGE, `_capture`).
NO_DEBUG_INFO = "-g0"


def compile_flags(program: RenderedProgram, pin: str, sleepable: bool,
                  dispatched: bool = False) -> list[str]:
    """The cflags `program` is compiled with: `sleepable` when the kernel has sleepable
    uprobes (then its sleepable sites fault pages in, with task-storage scratch maps);
    `dispatched` when uprobe sites are attached through the dispatcher (uprobe_multi
    links: runtime/attach.py UprobeLinks), which then checks the scope for them."""
    cflags = list(BASE_CFLAGS) + pin_cflags(pin, program.tracers_pin)
    if program.uprobe_dispatcher and dispatched:
        cflags.append(f"-D{program.dispatched_switch}")
    if program.has_sleepable and sleepable:  # string reads fault pages in
        cflags.append(f"-D{program.sleepable_switch}")
    cflags.append(NO_DEBUG_INFO)
    return cflags


def own_btf_cflags() -> list[str]:
    """`-DMACRO=N` of the kernel offsets the run's own raw fork program and argv-reading
    exec program use (render/model.py OWN_BTF_MEMBERS): added to every compile, not to
    the cache key (which holds where they come from instead: `_cached`), so that a run
    whose program is cached parses no BTF for them. None where the kernel has no BTF of
    them: those programs are then not compiled and the perf-event variants attached."""
    from planrunner.elf.btf import BtfError, KernelMember, runtime_cflags
    try:
        return runtime_cflags((macro, KernelMember(struct_name, path))
                              for macro, struct_name, path in OWN_BTF_MEMBERS)
    except BtfError:
        return []


def needed_btf_cflags(constants: Sequence[RuntimeConstant]) -> list[str]:
    """`-DMACRO=N` for the kernel offsets the program's C cannot do without
    (RenderedProgram.runtime_constants: its `#error` guards), from the kernel's BTF
    where it compiles (`compile_program`), as the optional ones are: the BTF's parse
    (~20 ms) is then off the run's path, done by the worker while it waits for the C.
    BackendError where the BTF lacks one."""
    if not constants:
        return []
    from planrunner.elf.btf import BtfError, runtime_cflags
    try:
        return runtime_cflags(constants)
    except BtfError as exc:
        raise BackendError(str(exc)) from None


def btf_cflags(constants: Sequence[RuntimeConstant]) -> list[str]:
    """`-DMACRO=N` for the optional BTF constants (RenderedProgram.btf_constants) the
    kernel has (compiles only: `compile_program`)."""
    if not constants:
        return []
    from planrunner.elf.btf import optional_cflags
    return optional_cflags(constants)


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


def compile_program(c_source: str, cflags: Sequence[str], pins: dict[str, str],
                    btf: Sequence[RuntimeConstant] = (),
                    needed: Sequence[RuntimeConstant] = (),
                    task_storage: Sequence[str] = ()) -> cc.CompiledProgram:
    """`c_source` compiled by bcc, as a program image (in the compile worker, or here
    where there is none); bcc's module and its maps are dropped at once: the image is
    loaded as every program is. Raises CompileFailed, or cc.Uncacheable when an image
    cannot hold it, or BackendError when the kernel's BTF lacks a `needed` offset. The
    BTF constants are defined here, where it compiles: the program's own (`needed`,
    `needed_btf_cflags`), the run's own programs' offsets (`own_btf_cflags`) and the
    program's optional ones (`btf`, `btf_cflags`); their values are not in the cache
    key, the BTF file they come from is (`_cached`). `task_storage`: `_capture`'s."""
    bpf = compile_bcc(c_source, [*cflags, *needed_btf_cflags(needed), *own_btf_cflags(),
                                 *btf_cflags(btf)])
    try:
        return _capture(bpf, pins, task_storage)
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
    """A per-CPU value (a list of ints) summed over the CPUs; a scalar as it is."""
    try:
        return sum(int(v) for v in value)
    except TypeError:
        return int(value)


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


def _capture(bpf: Any, pins: dict[str, str],
             task_storage: Sequence[str] = ()) -> cc.CompiledProgram:
    """What the cache keeps of a module bcc just compiled (maps created, fds patched
    into the instructions, nothing loaded yet). `pins`: map name -> where the C pins it
    (RenderedProgram.tracers_pin); such a map is stored as that pin, to be opened
    again, never created. `task_storage`: maps the C declares to bcc as hashes that are
    task storage (RenderedProgram.task_storage_maps, compiled with the sleepable
    switch), stored as task storage. Raises cc.Uncacheable."""
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
        # a type our loader cannot create or runtime/map_batch.py cannot read
        if mtype not in _LOADABLE_MAP_TYPES:
            raise cc.Uncacheable(f"map {name} has type {mtype}")
        if name in task_storage:
            mtype, entries = _as_task_storage(name, mtype, ksize, entries, flags)
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


def _as_task_storage(name: str, mtype: int, ksize: int, entries: int,
                     flags: int) -> tuple[int, int]:
    """(type, max_entries) of task storage for map `name`, which bcc created as the
    hash runtime_helpers.h PR_TASK_STORAGE declares (the value and flags stay)."""
    if (mtype, ksize, entries) != (BPF_MAP_TYPE_HASH, 4, 1) or not flags & BPF_F_NO_PREALLOC:
        raise cc.Uncacheable(f"map {name} is not the hash a sleepable scratch is declared as "
                             f"(type {mtype}, key {ksize} bytes, {entries} entries)")
    return BPF_MAP_TYPE_TASK_STORAGE, 0


# The map types an image may hold: hash, array, prog array, perf event array, per-CPU
# hash and array, stack trace, cgroup array, LRU hash and per-CPU hash, LPM trie, ring
# buffer, and the task-storage maps created with BTF (compile_cache.BTF_MAP_TYPES).
_LOADABLE_MAP_TYPES = frozenset({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 27}) | cc.BTF_MAP_TYPES


class Compiler(Protocol):
    """A compile out of this process: runtime/compile_worker.py's CompileWorker, which
    compiles with this module's functions (so this module names it by what it does,
    not by importing it)."""

    @property
    def pid(self) -> int | None: ...

    why: str  # why the last compile gave nothing back (for the cache log)

    def compile(self, c_source: str, cflags: list[str], pins: dict[str, str],
                btf: Sequence[tuple[str, tuple[str, str]]] = (),
                needed: Sequence[tuple[str, tuple[str, str]]] = (),
                task_storage: Sequence[str] = (),
                meanwhile: Callable[[], None] | None = None
                ) -> cc.CompiledProgram | None: ...

    def close(self) -> None: ...


class BccBackend:
    """A compiled, loaded program. Construction is cheap (nothing is checked or
    compiled before `load`); use as a context manager: `close` on exit."""

    def __init__(self, features: KernelFeatures | None = None,
                 cache: cc.ProgramCache | None = None,
                 worker: Compiler | None = None) -> None:
        self._features = features
        self._cache = cache  # None: compile every time (--no-cache, tests)
        self._worker = worker  # compiles a program the cache has not got, where it can
        self._closed = False
        self.from_cache = False
        self.loaded: cc.LoadedProgram | None = None
        self.program: RenderedProgram | None = None
        self._strategies: dict[str, AttachStrategy] = {}  # by SiteKind.strategy
        self._sets: UprobeSets | None = None
        self._reader: RingReader | LibbpfRing | None = None
        self._ring_fd = -1  # the events map's fd, once open_ring has run
        self._registry: TracerRegistry | None = None  # this run's entry in it
        self._maps: dict[str, MapRef] = {}  # every map of the loaded program, by name

    @property
    def features(self) -> KernelFeatures:
        if self._features is None:
            self._features = detect()
        return self._features

    def load(self, program: RenderedProgram,
             meanwhile: Callable[[], None] | None = None) -> None:
        self._load(program, meanwhile)
        if program.func_names:
            self._fill_func_names(program)
        if program.data_params:  # before any probe can fire
            self.update_map(program.params_map, struct.pack("I", 0), program.param_values)

    def _fill_func_names(self, program: RenderedProgram) -> None:
        """`func`'s name table (RenderedProgram.func_names), each NUL-terminated."""
        size = program.func_size
        for i, name in enumerate(program.func_names):
            self.update_map(program.func_map, struct.pack("i", i),
                            name.encode()[:size - 1].ljust(size, b"\0"))

    def _load(self, program: RenderedProgram,
              meanwhile: Callable[[], None] | None = None) -> None:
        """The program's image from the cache, else compiled (by the worker, else
        here), loaded by our own calls. An image from the cache that the kernel refuses
        is dropped and compiled again; a fresh one that it refuses is an error."""
        check_machine()
        pin = tracers_pin(default=program.tracers_pin)  # bcc pins pr_tracers there
        self.program = program
        # uprobe sites attached through the dispatcher, which then checks their scope
        dispatched = isinstance(self._strategy_named(UPROBE_SITE.strategy), UprobeLinks)
        cflags = compile_flags(program, pin, self.features.sleepable, dispatched)
        key, cached = self._cached(program, cflags)
        if cached is not None:
            refused = self._load_image(program, cached)
            if refused is None:
                self.from_cache = True
                self._close_worker()  # started in case the cache had not got it
                return
            if self._cache is not None and key is not None:
                self._cache.discard(key, f"was refused ({refused.diagnostics[0].message})")
        compiled = self._compile(program, cflags, {program.tracers_map: pin}, meanwhile)
        refused = self._load_image(program, compiled)
        if refused is not None:
            raise refused
        if self._cache is not None and key is not None:
            self._cache.put(key, compiled)

    def _cached(self, program: RenderedProgram,
                cflags: list[str]) -> tuple[str | None, cc.CompiledProgram | None]:
        """The cache's key for `program` (None: no cache) and its image there, if any."""
        if self._cache is None:
            return None, None
        sleepable = [site.fn_name for site in program.sites
                     if site.sleepable and self.features.sleepable] + [
            s.fn_name for s in program.sets if s.sleepable and self.features.sleepable]
        # what the BTF constants (needed_btf_cflags, own_btf_cflags, btf_cflags) are a
        # function of, with one stat: their values take a parse of the kernel's BTF
        # (~20-75 ms) a warm run skips; and which members the program's own are
        from planrunner.elf.btf import identity
        needed = [f"needed:{c.macro}={c.member.struct}.{c.member.path}"
                  for c in program.runtime_constants]
        key = cc.cache_key(program.c_source, [*cflags, f"btf:{identity()}", *needed],
                           sleepable=sleepable)
        return key, self._cache.get(key)

    def _compile(self, program: RenderedProgram, cflags: list[str],
                 pins: dict[str, str],
                 meanwhile: Callable[[], None] | None = None) -> cc.CompiledProgram:
        """`program`'s C as an image: by the compile worker where there is one, else (or
        when it could not give one back) by bcc in this process. The BTF constants are
        worked out where it compiles: the worker parses the kernel's BTF while it waits
        for the C, off the run's path to `Tracing`."""
        c_source = program.c_source
        # the sleepable scratch maps are task storage where the C was compiled so
        storage = program.task_storage_maps \
            if f"-D{program.sleepable_switch}" in cflags else ()
        worker = self._worker
        if worker is not None:
            worker_pid = worker.pid
            compiled = worker.compile(c_source, cflags, pins, btf=program.btf_constants,
                                      needed=program.runtime_constants,
                                      task_storage=storage,
                                      meanwhile=meanwhile)  # it has ended
            self._forget(worker_pid)
            if self._closed:  # the session stopped waiting for this load
                raise BackendError("the backend was closed while compiling")
            if compiled is not None:
                if self._cache is not None:
                    self._cache.note("compiled by the compile worker")
                return compiled
            if self._cache is not None:  # compiled again here, as without the worker
                self._cache.note(worker.why or "the compile worker gave no program back")
        try:
            return compile_program(c_source, cflags, pins, btf=program.btf_constants,
                                   needed=program.runtime_constants, task_storage=storage)
        except cc.Uncacheable as exc:
            raise BackendError(f"bcc compiled a program planrunner cannot load: {exc}",
                               hints=("this is a planrunner bug: `planrunner render` "
                                      "shows the C; please report it with the plan",)
                               ) from None

    def _load_image(self, program: RenderedProgram,
                    compiled: cc.CompiledProgram) -> BackendError | None:
        """Create the maps of `compiled` and load every function of `program` now
        (self.loaded set); the error, with the verifier's words, when the kernel refuses
        one (then nothing is kept)."""
        try:
            self.loaded = cc.LoadedProgram(compiled)
            jobs: list[tuple[AttachSite | AttachSet, AttachStrategy | UprobeSets]] = [
                (site, self._strategy(site)) for site in program.sites]
            jobs += [(probes, self._set_strategy(probes)) for probes in program.sets]
            if program.uprobe_dispatcher and isinstance(self._uprobes, UprobeLinks):
                jobs.append((self._dispatcher_site(), self._uprobes))
            self._load_funcs(jobs)
        except (BackendError, cc.CacheLoadError, KeyError) as exc:
            if self.loaded is not None:
                self.loaded.close()
            self.loaded = None
            self._strategies = {}
            self._sets = None
            if isinstance(exc, BackendError):
                return exc
            return BackendError(f"could not load the BPF program: {exc}")
        return None

    def _image(self) -> cc.LoadedProgram:
        """The loaded program image (maps and functions); BackendError before `load`."""
        if self.program is None or self.loaded is None:
            raise BackendError("the BPF program is not loaded")
        return self.loaded

    def _loaded(self) -> RenderedProgram:
        self._image()
        assert self.program is not None
        return self.program

    def has_function(self, name: str) -> bool:
        return self._image().has_func(name)

    def set_config(self, slot: ConfigSlot, value: int) -> None:
        self.update_map(self._loaded().config_map, U32.pack(slot), U32.pack(value))

    def fill_scope(self, pids: Sequence[int], comms: Sequence[bytes],
                   cgroups: Sequence[str]) -> None:
        """The scope maps, packed as render/contracts.py lays them out for the C (__u32
        pids, struct pr_comm, struct pr_cgroup)."""
        program = self._loaded()
        for pid in pids:
            self.update_map(program.scope_pids_map, U32.pack(pid), U32.pack(SCOPE_GIVEN))
        for comm in comms:  # NUL-terminated: the struct's bytes after the name are 0
            self.update_map(program.scope_comms_map, PR_COMM.pack(comm[:PR_COMM.size - 1]),
                            U32.pack(1))
        for i, path in enumerate(cgroups):
            try:
                cgroup_id, level = cgroup_key(path)
            except OSError as exc:
                raise BackendError(f"cannot use cgroup {path}: {exc.strerror}") from None
            self.update_map(program.scope_cgroups_map, U32.pack(i),
                            PR_CGROUP.pack(cgroup_id, level))

    def update_map(self, map_name: str, key: bytes, value: bytes) -> None:
        loaded = self._image()
        try:
            loaded.update(map_name, key, value)
        except (KeyError, ValueError, OSError) as exc:
            raise BackendError(f"cannot write map {map_name}: {exc}") from None

    def skip_processes(self, tgids: Sequence[int]) -> None:
        program = self._loaded()
        if not tgids:
            return
        for tgid in tgids:
            self.update_map(program.born_map, U32.pack(tgid), U32.pack(BORN_EXEC))
        self.update_map(program.born_count_map, U32.pack(0), U64.pack(len(tgids)))

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
        try:
            map_update_elem(self._image().map_fd(name), struct.pack("I", site.slot),
                            struct.pack("I", prog_fd))
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
        return self._strategy_named(site_kind(site.kind).strategy)

    def _strategy_named(self, name: str) -> AttachStrategy:
        if name not in self._strategies:
            self._strategies[name] = STRATEGIES[name](self.features)
        return self._strategies[name]

    @property
    def _uprobes(self) -> AttachStrategy | None:
        """The uprobe sites' strategy, once made (links, where the dispatcher is)."""
        return self._strategies.get(UPROBE_SITE.strategy)

    def _load_funcs(self, jobs: Sequence[tuple[AttachSite | AttachSet,
                                                AttachStrategy | UprobeSets]]) -> None:
        """Each job's function loaded, side by side on the CPUs this process may use:
        the verifier of one program runs on one CPU (it takes no lock for a privileged
        load), and a plan of several long thunks waited for each in turn. A refusal is
        raised once every load has ended, the first in `jobs`' order."""
        first: dict[str, tuple[AttachSite | AttachSet, AttachStrategy | UprobeSets]] = {}
        for site, strategy in jobs:  # a function shared by sites is loaded once
            first.setdefault(site.fn_name, (site, strategy))
        side_by_side([functools.partial(self._load_func, site, strategy)
                      for site, strategy in first.values()],
                     threads=len(os.sched_getaffinity(0)), name="planrunner-load")

    def _load_func(self, site: AttachSite | AttachSet,
                   strategy: AttachStrategy | UprobeSets) -> int:
        """`site`'s function loaded for `strategy` (once: later calls give its fd)."""
        sleepable = site.sleepable and self.features.sleepable
        try:
            return self._image().load_func(site.fn_name, strategy.prog_type,
                                             strategy.attach_type,
                                             BPF_F_SLEEPABLE if sleepable else 0)
        except cc.CacheLoadError as exc:
            hints = [f"the verifier said: {line}" for line in exc.log_tail]
            if sleepable:
                hints.append("PLANRUNNER_SLEEPABLE=0 loads no program sleepable (strings "
                             "the kernel cannot read are then re-read from user space)")
            how = " sleepable" if sleepable else ""
            raise BackendError(f"could not load probe '{site.probe}'{how}: {exc.reason}",
                               hints=tuple(hints)) from None

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

        def detach_one(strategy: AttachStrategy | UprobeSets) -> None:
            if probes_only and isinstance(strategy, Tracepoints | RawTracepoints):
                strategy.detach_probes()
            else:
                strategy.detach_all()

        side_by_side([functools.partial(detach_one, s) for s in strategies],
                     name="planrunner-detach")

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
        if self._registry is not None:
            self._registry.close()
            self._registry = None
        if self.loaded is not None:  # after detach: no link holds its programs any more
            self.loaded.close()
            self.loaded = None

    def __enter__(self) -> BccBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- events ---------------------------------------------------------------------

    def open_ring(self) -> None:
        """Read print records by mapping the ring buffer (runtime/ringbuf.py) where the
        kernel allows it and the CPU orders memory strongly enough (x86-64), else through
        libbpf's consumer (runtime/ring_libbpf.py, with its memory barriers)."""
        loaded = self._image()
        name = self._loaded().events_map
        fd = self._ring_fd = loaded.map_fd(name)
        if self.features.ringbuf_mmap and ordered_host() and not wants_libbpf():
            try:
                self._reader = RingReader(fd, loaded.map_def(name).max_entries)
                return
            except (OSError, ValueError):  # this map refused: libbpf's reader still works
                self._reader = None
        self._reader = LibbpfRing(fd)

    def _ring(self) -> RingReader | LibbpfRing:
        if self._reader is None:
            raise BackendError("the ring buffer is not open")
        return self._reader

    def read_ring(self, timeout_ms: int) -> list[bytes]:
        """Records waiting in the ring buffer (at most MAX_BATCH); when there are none,
        wait up to timeout_ms for a wakeup first (records are submitted without a wakeup
        most of the time, so a timeout still drains)."""
        reader = self._ring()
        batch = reader.read(MAX_BATCH)
        if not batch and timeout_ms > 0:
            reader.wait(timeout_ms)
            batch = reader.read(MAX_BATCH)
        return batch

    def discard_ring(self) -> int:
        return self._ring().discard()

    def ring_fd(self) -> int | None:
        return self._ring_fd if self._reader is not None else None

    # --- maps (runtime/map_batch.py: by fd, raw bpf() calls) ------------------------

    def _map_refs(self) -> dict[str, MapRef]:
        """Every map of the loaded program by name, made once (finish_attach)."""
        if not self._maps:
            loaded = self._image()
            self._maps = {m.name: MapRef(m.name, fd, m.map_type, m.key_size, m.value_size,
                                         m.max_entries, m.key_desc, m.leaf_desc)
                          for m, fd in zip(loaded.program.maps, loaded.map_fds, strict=True)}
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

    def delete_key(self, map_name: str, key: bytes) -> None:
        map_batch.delete(self._ref(map_name), key)

    def forget_pids(self, map_name: str, pids: list[int]) -> None:
        ref = self._ref(map_name)
        for pid in pids:
            map_batch.delete(ref, pid.to_bytes(ref.key_size, "little"))

