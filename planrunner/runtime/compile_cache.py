"""A cache of compiled BPF programs, so that a second run of the same plan skips clang.

What is kept: for each function of the module bcc compiled, its instructions as bcc
left them after creating the maps, with the map fds zeroed out and, beside them, which
ld_imm64 slot refers to which map (`FuncDef.relocs`); for each map, its definition as
the kernel reports it (type, key/value size, max_entries, flags, name) and bcc's
key/leaf type descriptions (the JSON that bcc's table API turns into ctypes types).
A later run creates the maps with the bpf syscall, patches their new fds into those
slots and loads the functions with BPF_PROG_LOAD: no clang, no bcc, no libbcc.

Why this way (measured on Linux 6.18, bcc 0.26, Intel Xeon; bench/startup_cache.py,
BENCHMARKS.md "Issue 17 (round two)"): the backend's load of the bench plan falls from
0.664 s (clang inside bcc) to 0.003 s; capture and store on a cold run cost ~1-5 ms.
- bcc 0.26 cannot load a pre-built object: `BPF()` takes C text (or a `.b` file), the
  clang output stays inside libbcc's memory and libbcc exports no object loader, so
  caching clang's ELF would mean running clang ourselves on bcc's rewritten C.
- Loading through libbcc (`bcc_func_load`) would still need `import bcc`, i.e. dlopen
  of libbcc.so with libclang-cpp and libLLVM: 60-120 ms, more than bpftrace's whole
  launch -> attached (~40 ms). Raw syscalls cost a few ms in all, so every program is
  loaded this way (`LoadedProgram`), the one just compiled too: runtime/bcc_backend.py
  has one load path, and a warm run never imports bcc.
- Maps are created without BTF, but for task storage (the scratch of sleepable probes),
  which the kernel creates only with BTF of an int key: `storage_btf` is that, with a
  value of the map's size. bcc attaches BTF to other maps for pretty printing only; no
  map planrunner renders holds a field that needs BTF (spin locks, timers, kptrs), and
  the kernel refuses a program that uses one on a map without BTF, so such a program
  would fail its cached load and be recompiled (below), never run wrong.
- A pinned map (BPF_TABLE_PINNED: the registry of planrunner runs, runtime/tracers.py)
  is stored as its pin and opened there (BPF_OBJ_GET) by a cached load, as bcc does,
  checked to be the same kind of map; never created, so that every run shares it.
- Functions loaded BPF_F_SLEEPABLE (runtime/kernel/bpf.py) are loaded with that flag
  from the cache too, and the key names them.
- Only programs whose ld_imm64 are plain map fds (BPF_PSEUDO_MAP_FD) are stored; one
  with anything else (map values of global data, BTF ids), or with a map the cached
  path cannot create or read back (map-in-map, ...: runtime/bcc_backend.py), is not.

Safety:
- The key is a SHA-256 of the rendered C, the cflags (BTF constants of the running
  kernel are among them), the functions loaded sleepable, the kernel release and build,
  the kernel headers bcc used, bcc's version and install, the planrunner version and
  this file's format: a change of plan, params, kernel or bcc never loads a stale
  program, nor does a new target build (what of it the program reads, USDT operands and
  struct offsets, is in the C; attach offsets come from resolve, or from the run cache,
  planrunner/run_cache.py, which checks each target binary's identity first).
- Entries are files of the entry store both caches share (runtime/entry_store.py:
  where, 0700/0600, this user's only, written whole, pruned).
- Each file carries a magic, a format version and a SHA-256 of its body: a truncated,
  flipped or foreign entry is reported on stderr, removed and rebuilt by the compile.
- A cached program the kernel refuses (map or program load) is dropped the same way.
- `planrunner run --no-cache` neither reads nor writes it. The run cache
  (planrunner/run_cache.py) keeps its entries in the same store.
Set PLANRUNNER_CACHE_LOG=1 to see hits, misses and stores on stderr.

Pure stdlib and raw bpf() syscalls (runtime/kernel/bpf.py); no bcc.
"""

from __future__ import annotations

import binascii
import ctypes as ct
import json
import os
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TextIO

from planrunner import __version__
from planrunner.runtime.entry_store import EntryStore, default_dir, seal, unseal
from planrunner.runtime.kernel import bpf as kernel
from planrunner.runtime.ringbuf import possible_cpus
from planrunner.sha256 import sha256

FORMAT_VERSION = 2  # 2: maps may be pinned (MapDef.pin)
MAGIC = b"PRCACHE\0"

BPF_LD_IMM64 = 0x18  # BPF_LD | BPF_DW | BPF_IMM: two instruction slots
BPF_PSEUDO_MAP_FD = 1
# local storage the kernel creates only with BTF of an int key: created with
# storage_btf(); the runtime never reads it (per-task scratch of sleepable probes)
BTF_MAP_TYPES = frozenset({kernel.BPF_MAP_TYPE_TASK_STORAGE})
_INSN = struct.Struct("<BBhi")


class Uncacheable(Exception):
    """This compiled program cannot be stored (said why); the run goes on uncached."""


class CacheLoadError(Exception):
    """The kernel refused a map or function of a program image: `reason` is what it
    said, `log_tail` the verifier's last lines for a function. An image from the cache
    is then dropped and compiled again."""

    def __init__(self, msg: str, errno_: int = 0, reason: str = "",
                 log_tail: tuple[str, ...] = ()) -> None:
        super().__init__(msg)
        self.errno = errno_
        self.reason = reason or msg
        self.log_tail = log_tail


@dataclass(frozen=True, slots=True)
class MapDef:
    """One map of a compiled program, as the kernel reported it after bcc created it."""

    name: str
    map_type: int
    key_size: int
    value_size: int
    max_entries: int
    flags: int
    key_desc: str  # bcc's JSON description of the key type ("" when it has none)
    leaf_desc: str
    # a map shared through the BPF filesystem (BPF_TABLE_PINNED): a cached load opens
    # the map pinned there, as bcc does, and never creates one of its own
    pin: str = ""


@dataclass(frozen=True, slots=True)
class FuncDef:
    """One BPF function: its instructions and where map fds go in them."""

    name: str
    insns: bytes  # map fds zeroed
    relocs: tuple[tuple[int, int], ...]  # (instruction slot, index into maps)


@dataclass(frozen=True, slots=True)
class CompiledProgram:
    """What a cache entry holds: the maps and the functions of one compile."""

    license: str
    kern_version: int
    maps: tuple[MapDef, ...]
    funcs: tuple[FuncDef, ...]

    def map_index(self, name: str) -> int:
        for i, m in enumerate(self.maps):
            if m.name == name:
                return i
        raise KeyError(name)


# --- keying ---------------------------------------------------------------------------

def _stat_id(path: str) -> str:
    """Where a file really is and which version of it (a reinstall changes it)."""
    try:
        real = os.path.realpath(path)
        st = os.stat(real)
        return f"{real}:{st.st_size}:{st.st_mtime_ns}"
    except OSError:
        return f"{path}:missing"


def bcc_identity() -> str:
    """bcc's version and install, read without importing bcc (dlopen of LLVM)."""
    from importlib.util import find_spec

    try:
        spec = find_spec("bcc")
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        return "bcc:none"
    pkg = next(iter(spec.submodule_search_locations))
    version = "?"
    try:
        with open(os.path.join(pkg, "version.py"), encoding="utf-8") as fh:
            lines = fh.read().splitlines()
        for line in lines:
            if line.startswith("__version__"):
                version = line.split("=", 1)[1].strip().strip("'\"")
    except OSError:
        pass
    libs = [_stat_id(os.path.join(d, "libbcc.so.0"))
            for d in ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu",
                      "/usr/lib64", "/usr/lib", "/usr/local/lib")
            if os.path.exists(os.path.join(d, "libbcc.so.0"))]
    return "|".join([f"bcc:{version}", _stat_id(os.path.join(pkg, "libbcc.py")), *libs])


def kernel_identity() -> str:
    """The running kernel (release and build) and the headers bcc compiles against."""
    u = os.uname()
    return "|".join([u.release, u.version, u.machine,
                     _stat_id(f"/lib/modules/{u.release}/build")])


def cache_key(c_source: str, cflags: Sequence[str], kernel: str | None = None,
              bcc: str | None = None, version: str = __version__,
              sleepable: Sequence[str] = ()) -> str:
    """`sleepable`: the functions loaded BPF_F_SLEEPABLE (a load input beside the C)."""
    h = sha256()
    for part in (f"planrunner-compile-cache:{FORMAT_VERSION}", version,
                 kernel if kernel is not None else kernel_identity(),
                 bcc if bcc is not None else bcc_identity(), "\0".join(cflags),
                 "sleepable:" + ",".join(sorted(sleepable)), c_source):
        data = part.encode()
        h.update(struct.pack("<Q", len(data)))  # length-prefixed: no two splits collide
        h.update(data)
    return h.hexdigest()


# --- instructions ---------------------------------------------------------------------

def find_relocs(insns: bytes,
                map_of_fd: dict[int, int]) -> tuple[bytes, tuple[tuple[int, int], ...]]:
    """bcc's instructions (map fds patched in) -> (instructions with the fds zeroed,
    (slot, map index) of each). Raises Uncacheable on any other ld_imm64 relocation."""
    if len(insns) % 8:
        raise Uncacheable("instructions are not a whole number of slots")
    out = bytearray(insns)
    relocs = []
    slot, n = 0, len(insns) // 8
    while slot < n:
        code, regs, off, imm = _INSN.unpack_from(insns, slot * 8)
        if code == BPF_LD_IMM64:
            src = regs >> 4
            if src == BPF_PSEUDO_MAP_FD:
                if imm not in map_of_fd:
                    raise Uncacheable(f"slot {slot} refers to fd {imm}, not one of the maps")
                relocs.append((slot, map_of_fd[imm]))
                _INSN.pack_into(out, slot * 8, code, regs, off, 0)
            elif src != 0:
                raise Uncacheable(f"slot {slot} has an ld_imm64 of kind {src}")
            slot += 2
        else:
            slot += 1
    return bytes(out), tuple(relocs)


def relocate(func: FuncDef, fds: Sequence[int]) -> bytes:
    """The function's instructions with the maps' fds of this run patched in."""
    out = bytearray(func.insns)
    for slot, index in func.relocs:
        code, regs, off, _imm = _INSN.unpack_from(out, slot * 8)
        if code != BPF_LD_IMM64 or (regs >> 4) != BPF_PSEUDO_MAP_FD:
            raise CacheLoadError(f"{func.name}: slot {slot} is not a map load")
        _INSN.pack_into(out, slot * 8, code, regs, off, fds[index])
    return bytes(out)


# --- the file format ------------------------------------------------------------------

def encode(key: str, program: CompiledProgram) -> bytes:
    body = json.dumps({
        "key": key, "license": program.license, "kern_version": program.kern_version,
        "maps": [[m.name, m.map_type, m.key_size, m.value_size, m.max_entries, m.flags,
                  m.key_desc, m.leaf_desc, m.pin] for m in program.maps],
        "funcs": [[f.name, binascii.b2a_base64(f.insns, newline=False).decode(),
                   [list(r) for r in f.relocs]] for f in program.funcs],
    }, separators=(",", ":")).encode()
    return seal(MAGIC, FORMAT_VERSION, body)


def decode(key: str, blob: bytes) -> CompiledProgram:
    """Raises ValueError saying what is wrong with the entry."""
    body = unseal(blob, MAGIC, FORMAT_VERSION, "cache entry")
    try:
        d = json.loads(body)
        if d["key"] != key:
            raise ValueError("stored under another key")
        maps = tuple(MapDef(str(n), int(t), int(k), int(v), int(me), int(fl), str(kd),
                            str(ld), str(pin))
                     for n, t, k, v, me, fl, kd, ld, pin in d["maps"])
        funcs = []
        for name, insns, relocs in d["funcs"]:
            code = binascii.a2b_base64(insns, strict_mode=True)
            rel = tuple((int(s), int(i)) for s, i in relocs)
            if len(code) % 8 or any(not 0 <= i < len(maps) or not 0 <= s < len(code) // 8
                                    for s, i in rel):
                raise ValueError(f"function {name}: bad relocations")
            funcs.append(FuncDef(str(name), code, rel))
        return CompiledProgram(str(d["license"]), int(d["kern_version"]), maps, tuple(funcs))
    except (KeyError, TypeError, ValueError) as exc:  # JSONDecodeError is a ValueError
        raise ValueError(f"malformed body: {exc}") from None


# --- the cache -----------------------------------------------------------------------

class ProgramCache(EntryStore):
    """Compiled programs, `KEY.bpf`, in the entry store both caches share
    (runtime/entry_store.py: where, and which files are trusted)."""

    def path(self, key: str) -> str:
        return os.path.join(self.dir, f"{key}.bpf")

    def get(self, key: str) -> CompiledProgram | None:
        blob = self.read_entry(f"{key}.bpf")
        if blob is None:
            self.note(f"miss {key[:16]}")
            return None
        try:
            program = decode(key, blob)
        except ValueError as exc:
            self.discard(key, f"is corrupt ({exc})")
            return None
        self.note(f"hit {key[:16]} ({self.path(key)})")
        return program

    def put(self, key: str, program: CompiledProgram) -> None:
        self.write_entry(f"{key}.bpf", encode(key, program))

    def discard(self, key: str, why: str) -> None:
        self.discard_entry(f"{key}.bpf", why)


def open_cache(stderr: TextIO, enabled: bool = True) -> ProgramCache | None:
    return ProgramCache(default_dir(), stderr) if enabled else None


# --- loading without bcc ----------------------------------------------------------------

def storage_btf(value_size: int) -> bytes:
    """The smallest BTF a task-storage map's creation accepts: [1] int (the key the
    kernel requires), [2] char, [3] char[value_size] (the value: only its size matters
    to the kernel; planrunner's scratch structs hold no lock, timer or kptr)."""
    strings = b"\0int\0char\0"
    types = b"".join([
        struct.pack("<III", 1, 1 << 24, 4), struct.pack("<I", (1 << 24) | 32),  # int
        struct.pack("<III", 5, 1 << 24, 1), struct.pack("<I", 8),  # char
        struct.pack("<III", 0, 3 << 24, 0), struct.pack("<III", 2, 1, value_size),  # array
    ])
    header = struct.pack("<HBBIIIII", 0xEB9F, 1, 0, 24, 0, len(types), len(types),
                         len(strings))
    return header + types + strings


def map_info(fd: int) -> tuple[int, int, int, int, int]:
    """(type, key_size, value_size, max_entries, flags) of a map, as the kernel has it;
    Uncacheable when it will not say."""
    try:
        info = kernel.map_info(fd)
    except OSError as exc:
        raise Uncacheable(f"map info of fd {fd}: {exc.strerror}") from None
    return info.map_type, info.key_size, info.value_size, info.max_entries, info.flags


def same_map(fd: int, pin: str) -> bool:
    """Map fd `fd` is the map pinned at `pin`."""
    try:
        pinned = kernel.obj_get(pin)
    except OSError:
        return False
    try:
        return kernel.map_info(pinned).id == kernel.map_info(fd).id
    except OSError as exc:
        raise Uncacheable(f"map info: {exc.strerror}") from None
    finally:
        os.close(pinned)


def create_map(m: MapDef) -> int:
    """A new map as `m` defines it (task storage with its minimal BTF)."""
    if m.map_type in kernel.MAP_IN_MAP_TYPES:
        raise CacheLoadError(f"map {m.name}: type {m.map_type} needs an inner map")
    btf_fd = 0
    try:
        if m.map_type in BTF_MAP_TYPES:
            btf_fd = kernel.btf_load(storage_btf(m.value_size))
            return kernel.map_create(m.map_type, m.key_size, m.value_size, m.max_entries,
                                     m.flags, m.name, btf_fd, 1, 3)
        return kernel.map_create(m.map_type, m.key_size, m.value_size, m.max_entries,
                                 m.flags, m.name)
    except OSError as exc:
        what = "BTF for a map" if m.map_type in BTF_MAP_TYPES and not btf_fd else \
            f"map {m.name}"
        raise CacheLoadError(f"{what}: {exc.strerror}", exc.errno or 0) from None
    finally:
        if btf_fd > 0:  # the map holds its own reference
            os.close(btf_fd)


def _open_pinned(m: MapDef) -> int:
    """The map pinned at m.pin, checked to be the map the program was compiled for."""
    try:
        fd = kernel.obj_get(m.pin)
    except OSError as exc:
        raise CacheLoadError(f"map {m.name}: cannot open {m.pin}: {exc.strerror}") from None
    try:
        found = map_info(fd)
    except Uncacheable as exc:
        os.close(fd)
        raise CacheLoadError(str(exc)) from None
    if found[:4] != (m.map_type, m.key_size, m.value_size, m.max_entries):
        os.close(fd)
        raise CacheLoadError(f"map {m.name}: {m.pin} is another map ({found[:4]})")
    return fd


class LoadedProgram:
    """A program image's maps, created now (a pinned one opened), and its functions,
    loaded on demand: how every program is loaded, fresh from the compiler or cached."""

    def __init__(self, program: CompiledProgram) -> None:
        self.program = program
        self.map_fds: list[int] = []
        self.prog_fds: dict[str, int] = {}
        self._funcs = {f.name: f for f in program.funcs}
        try:
            for m in program.maps:
                self.map_fds.append(_open_pinned(m) if m.pin else create_map(m))
        except BaseException:
            self.close()
            raise

    def map_fd(self, name: str) -> int:
        return self.map_fds[self.program.map_index(name)]

    def has_func(self, name: str) -> bool:
        return name in self._funcs

    def map_def(self, name: str) -> MapDef:
        return self.program.maps[self.program.map_index(name)]

    def load_func(self, name: str, prog_type: int, attach_type: int | None = None,
                  prog_flags: int = 0) -> int:
        """The fd of function `name` loaded as `prog_type` (once; later calls return it).
        Raises CacheLoadError with the verifier's log when the kernel refuses it."""
        if name in self.prog_fds:
            return self.prog_fds[name]
        func = self._funcs.get(name)
        if func is None:
            raise CacheLoadError(f"no function {name} in the compiled program")
        code = relocate(func, self.map_fds)
        insns = ct.create_string_buffer(code, len(code))
        try:
            fd = kernel.prog_load(ct.addressof(insns), len(code),
                                  self.program.license.encode(), prog_type, prog_flags,
                                  attach_type if attach_type is not None else 0, name,
                                  kern_version=self.program.kern_version)
        except kernel.ProgLoadError as exc:
            tail = tuple(exc.log.strip().splitlines()[-3:])
            raise CacheLoadError(f"function {name}: {exc.strerror}: " + " / ".join(tail),
                                 exc.errno or 0, exc.strerror or "", tail) from None
        self.prog_fds[name] = fd
        return fd

    def update(self, name: str, key: bytes, value: bytes) -> None:
        m = self.map_def(name)
        if len(key) != m.key_size or len(value) != m.value_size:
            raise ValueError(f"map {name}: key/value of {len(key)}/{len(value)} bytes, "
                             f"expected {m.key_size}/{m.value_size}")
        try:
            kernel.map_update_elem(self.map_fd(name), key, value)
        except OSError as exc:
            raise OSError(exc.errno, f"update of map {name}: {exc.strerror}") from None

    def lookup_u64s(self, name: str, key: bytes) -> list[int] | None:
        """The value at `key` as u64s (one per possible CPU for a per-CPU map of u64
        values); None when the key is absent."""
        m = self.map_def(name)
        if len(key) != m.key_size:
            raise ValueError(f"map {name}: key of {len(key)} bytes, expected {m.key_size}")
        per_cpu = m.map_type in kernel.PERCPU_MAP_TYPES
        width = (m.value_size + 7) // 8 * 8 if per_cpu else m.value_size
        size = width * (possible_cpus() if per_cpu else 1)
        try:
            value = kernel.map_lookup_elem(self.map_fd(name), key, size)
        except OSError as exc:
            raise OSError(exc.errno, f"lookup in map {name}: {exc.strerror}") from None
        if value is None:
            return None
        return [v for (v,) in struct.iter_unpack("Q", value[:size - size % 8])]

    def close(self) -> None:
        fds: list[Any] = [*self.prog_fds.values(), *self.map_fds]
        self.prog_fds, self.map_fds = {}, []
        for fd in fds:
            try:
                os.close(fd)
            except OSError:
                pass
