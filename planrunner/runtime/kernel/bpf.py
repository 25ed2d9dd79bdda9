"""bpf(2): each command planrunner issues, with its member of union bpf_attr as a ctypes
structure (the fields up to the last one set; the kernel reads the rest as zero).

    map_create, btf_load, obj_get, obj_pin, map_info        maps and pins
    map_lookup_elem, map_update_elem, map_delete_elem,
    map_get_next_key, map_lookup_batch                      map contents
    prog_load                                               programs (ProgLoadError: the log)
    uprobe_multi_link                                       BPF_LINK_CREATE, uprobe_multi
    raw_tracepoint_open                                     BPF_RAW_TRACEPOINT_OPEN

Why raw: bcc 0.26's `load_func` passes no program flags (no BPF_F_SLEEPABLE) and
cannot load a cached program's instructions; bcc's tables walk every map on a name
lookup; and a run whose program comes from the cache never imports bcc. Results and
errors follow runtime/kernel/__init__.py: a value, None for an expected absence, or
OSError.
"""

from __future__ import annotations

import ctypes as ct
import errno
import os
from collections.abc import Sequence
from dataclasses import dataclass

from planrunner.runtime.kernel import fail, syscall, syscall_status

# commands
BPF_MAP_CREATE, BPF_MAP_LOOKUP_ELEM, BPF_MAP_UPDATE_ELEM, BPF_MAP_DELETE_ELEM = 0, 1, 2, 3
BPF_MAP_GET_NEXT_KEY, BPF_PROG_LOAD, BPF_OBJ_PIN, BPF_OBJ_GET = 4, 5, 6, 7
BPF_OBJ_GET_INFO_BY_FD = 15
BPF_BTF_LOAD = 18
BPF_MAP_LOOKUP_BATCH, BPF_MAP_LOOKUP_AND_DELETE_BATCH = 24, 25
BPF_RAW_TRACEPOINT_OPEN = 17
BPF_LINK_CREATE = 28

# map types
BPF_MAP_TYPE_HASH = 1
BPF_MAP_TYPE_ARRAY = 2
BPF_MAP_TYPE_PERCPU_ARRAY = 6
BPF_MAP_TYPE_RINGBUF = 27
# local storage the kernel creates only with BTF of an int key
BPF_MAP_TYPE_TASK_STORAGE = 29
PERCPU_MAP_TYPES = frozenset({5, 6, 10, 21})  # percpu hash, array, lru hash, cgroup
ARRAY_MAP_TYPES = frozenset({BPF_MAP_TYPE_ARRAY, BPF_MAP_TYPE_PERCPU_ARRAY})
MAP_IN_MAP_TYPES = frozenset({12, 13})  # array and hash of maps: need an inner map fd

# program types, attach types and flags
BPF_PROG_TYPE_KPROBE, BPF_PROG_TYPE_TRACEPOINT, BPF_PROG_TYPE_PERF_EVENT = 2, 5, 7
BPF_PROG_TYPE_RAW_TRACEPOINT = 17
BPF_TRACE_UPROBE_MULTI = 48
BPF_F_UPROBE_MULTI_RETURN = 1
BPF_F_SLEEPABLE = 1 << 4
BPF_F_NO_PREALLOC = 1  # a map flag: elements allocated as they are added

ENOTSUPP = 524  # the kernel's own "not supported" (not in errno), which bpf() leaks
LOG_SIZE = 1 << 22  # the verifier's log on a failed load, for the error message


def bpf(cmd: int, attr: ct.Structure) -> int:
    """bpf(cmd, &attr, sizeof attr): the fd or 0 it returns; OSError otherwise."""
    return syscall("bpf", cmd, ct.byref(attr), ct.sizeof(attr))


def _bpf_unless(absent: int, cmd: int, attr: ct.Structure) -> bool:
    """bpf(cmd, &attr, sizeof attr): True when it succeeded, False when it failed with
    `absent` (an outcome the caller expects: no exception is made for it each time);
    OSError otherwise."""
    ret, err = syscall_status("bpf", cmd, ct.byref(attr), ct.sizeof(attr))
    if ret >= 0:
        return True
    if err == absent:
        return False
    raise fail(err)


# --- maps ---------------------------------------------------------------------------

class MapCreateAttr(ct.Structure):
    """BPF_MAP_CREATE, up to btf_value_type_id."""

    _fields_ = [("map_type", ct.c_uint32), ("key_size", ct.c_uint32),
                ("value_size", ct.c_uint32), ("max_entries", ct.c_uint32),
                ("map_flags", ct.c_uint32), ("inner_map_fd", ct.c_uint32),
                ("numa_node", ct.c_uint32), ("map_name", ct.c_char * 16),
                ("map_ifindex", ct.c_uint32), ("btf_fd", ct.c_uint32),
                ("btf_key_type_id", ct.c_uint32), ("btf_value_type_id", ct.c_uint32)]


def obj_name(name: str) -> bytes:
    """What bcc and libbpf pass as a map or program name: at most 15 bytes of
    [A-Za-z0-9_.]."""
    return "".join(c for c in name if c.isalnum() or c in "_.").encode()[:15]


def map_create(map_type: int, key_size: int, value_size: int, max_entries: int,
               flags: int = 0, name: str = "", btf_fd: int = 0, btf_key_type_id: int = 0,
               btf_value_type_id: int = 0) -> int:
    """A new map's fd. On a kernel before memcg accounting (5.11) maps count against
    RLIMIT_MEMLOCK: an EPERM raises it, as bcc does, and tries once more."""
    attr = MapCreateAttr(map_type=map_type, key_size=key_size, value_size=value_size,
                         max_entries=max_entries, map_flags=flags, map_name=obj_name(name),
                         btf_fd=btf_fd, btf_key_type_id=btf_key_type_id,
                         btf_value_type_id=btf_value_type_id)
    try:
        return bpf(BPF_MAP_CREATE, attr)
    except PermissionError:
        import resource  # noqa: PLC0415 - that old kernel only

        try:
            resource.setrlimit(resource.RLIMIT_MEMLOCK,
                               (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
        except (ValueError, OSError):
            raise fail(errno.EPERM) from None
        return bpf(BPF_MAP_CREATE, attr)


class BtfLoadAttr(ct.Structure):
    _fields_ = [("btf", ct.c_uint64), ("btf_log_buf", ct.c_uint64), ("btf_size", ct.c_uint32),
                ("btf_log_size", ct.c_uint32), ("btf_log_level", ct.c_uint32)]


def btf_load(blob: bytes) -> int:
    """The fd of BTF `blob` loaded."""
    buf = ct.create_string_buffer(blob, len(blob))
    return bpf(BPF_BTF_LOAD, BtfLoadAttr(btf=ct.addressof(buf), btf_size=len(blob)))


class ObjAttr(ct.Structure):
    """BPF_OBJ_PIN / BPF_OBJ_GET."""

    _fields_ = [("pathname", ct.c_uint64), ("bpf_fd", ct.c_uint32),
                ("file_flags", ct.c_uint32)]


def obj_get(path: str) -> int:
    """An fd of the object pinned at `path`."""
    buf = ct.create_string_buffer(os.fsencode(path))
    return bpf(BPF_OBJ_GET, ObjAttr(pathname=ct.addressof(buf)))


def obj_pin(fd: int, path: str) -> None:
    """Pin object `fd` at `path` (EEXIST: something is there)."""
    buf = ct.create_string_buffer(os.fsencode(path))
    bpf(BPF_OBJ_PIN, ObjAttr(pathname=ct.addressof(buf), bpf_fd=fd))


class InfoByFdAttr(ct.Structure):
    _fields_ = [("bpf_fd", ct.c_uint32), ("info_len", ct.c_uint32), ("info", ct.c_uint64)]


class _MapInfoStruct(ct.Structure):
    """struct bpf_map_info, the fields planrunner reads (and room for the rest)."""

    _fields_ = [("type", ct.c_uint32), ("id", ct.c_uint32), ("key_size", ct.c_uint32),
                ("value_size", ct.c_uint32), ("max_entries", ct.c_uint32),
                ("map_flags", ct.c_uint32), ("name", ct.c_char * 16),
                ("_rest", ct.c_uint8 * 64)]


@dataclass(frozen=True, slots=True)
class MapInfo:
    """A map as the kernel has it."""

    map_type: int
    id: int
    key_size: int
    value_size: int
    max_entries: int
    flags: int

    @property
    def shape(self) -> tuple[int, int, int, int]:
        """(type, key size, value size, max entries): what a reader depends on."""
        return self.map_type, self.key_size, self.value_size, self.max_entries


def map_info(fd: int) -> MapInfo:
    """BPF_OBJ_GET_INFO_BY_FD of map `fd` (EINVAL and the like when it is no map)."""
    info = _MapInfoStruct()
    bpf(BPF_OBJ_GET_INFO_BY_FD,
        InfoByFdAttr(bpf_fd=fd, info_len=ct.sizeof(info), info=ct.addressof(info)))
    return MapInfo(int(info.type), int(info.id), int(info.key_size), int(info.value_size),
                   int(info.max_entries), int(info.map_flags))


# --- map contents -------------------------------------------------------------------

class ElemAttr(ct.Structure):
    """BPF_MAP_*_ELEM and BPF_MAP_GET_NEXT_KEY (`value`: the next key's buffer)."""

    _fields_ = [("map_fd", ct.c_uint32), ("_pad", ct.c_uint32), ("key", ct.c_uint64),
                ("value", ct.c_uint64), ("flags", ct.c_uint64)]


def map_lookup_elem(fd: int, key: bytes, value_size: int) -> bytes | None:
    """The `value_size` bytes at `key` (a per-CPU map: every possible CPU's slot, each
    rounded up to 8 bytes; the caller sizes it); None when the key is absent."""
    kbuf, vbuf = ct.create_string_buffer(key, len(key)), ct.create_string_buffer(value_size)
    found = _bpf_unless(errno.ENOENT, BPF_MAP_LOOKUP_ELEM,
                        ElemAttr(map_fd=fd, key=ct.addressof(kbuf), value=ct.addressof(vbuf)))
    return vbuf.raw if found else None


def map_update_elem(fd: int, key: bytes, value: bytes, flags: int = 0) -> None:
    kbuf = ct.create_string_buffer(key, len(key))
    vbuf = ct.create_string_buffer(value, len(value))
    bpf(BPF_MAP_UPDATE_ELEM, ElemAttr(map_fd=fd, key=ct.addressof(kbuf),
                                      value=ct.addressof(vbuf), flags=flags))


def map_delete_elem(fd: int, key: bytes) -> None:
    """Remove `key` (ENOENT: it was not there)."""
    kbuf = ct.create_string_buffer(key, len(key))
    bpf(BPF_MAP_DELETE_ELEM, ElemAttr(map_fd=fd, key=ct.addressof(kbuf)))


def map_get_next_key(fd: int, key: bytes | None, key_size: int) -> bytes | None:
    """The key after `key` (None: the first); None after the last."""
    kbuf = ct.create_string_buffer(key, key_size) if key is not None else None
    nxt = ct.create_string_buffer(key_size)
    found = _bpf_unless(errno.ENOENT, BPF_MAP_GET_NEXT_KEY,
                        ElemAttr(map_fd=fd, key=ct.addressof(kbuf) if kbuf else 0,
                                 value=ct.addressof(nxt)))
    return nxt.raw if found else None


class BatchAttr(ct.Structure):
    """union bpf_attr's `batch` member (BPF_MAP_*_BATCH)."""

    _fields_ = [("in_batch", ct.c_uint64), ("out_batch", ct.c_uint64),
                ("keys", ct.c_uint64), ("values", ct.c_uint64),
                ("count", ct.c_uint32), ("map_fd", ct.c_uint32),
                ("elem_flags", ct.c_uint64), ("flags", ct.c_uint64)]


Buffer = ct.Array[ct.c_char]


def map_lookup_batch(fd: int, keys: Buffer, values: Buffer, count: int,
                     in_batch: Buffer | None, out_batch: Buffer,
                     delete: bool) -> tuple[int, bool]:
    """BPF_MAP_LOOKUP_BATCH (BPF_MAP_LOOKUP_AND_DELETE_BATCH with `delete`) of up to
    `count` entries into `keys` and `values`, from the position `in_batch` (None: the
    start), the next position written to `out_batch`: (entries copied, whether the map
    may hold more). ENOSPC: a hash bucket holds more than `count`; EINVAL, EOPNOTSUPP,
    ENOTSUPP or ENOSYS: no batch for this map here."""
    attr = BatchAttr(in_batch=ct.addressof(in_batch) if in_batch is not None else 0,
                     out_batch=ct.addressof(out_batch), keys=ct.addressof(keys),
                     values=ct.addressof(values), count=count, map_fd=fd)
    # ENOENT: these were the last (every read ends so)
    more = _bpf_unless(errno.ENOENT,
                       BPF_MAP_LOOKUP_AND_DELETE_BATCH if delete else BPF_MAP_LOOKUP_BATCH, attr)
    return int(attr.count), more


# --- programs -----------------------------------------------------------------------

class ProgLoadAttr(ct.Structure):
    """BPF_PROG_LOAD, up to expected_attach_type."""

    _fields_ = [("prog_type", ct.c_uint32), ("insn_cnt", ct.c_uint32),
                ("insns", ct.c_uint64), ("license", ct.c_uint64),
                ("log_level", ct.c_uint32), ("log_size", ct.c_uint32),
                ("log_buf", ct.c_uint64), ("kern_version", ct.c_uint32),
                ("prog_flags", ct.c_uint32), ("prog_name", ct.c_char * 16),
                ("prog_ifindex", ct.c_uint32), ("expected_attach_type", ct.c_uint32)]


class ProgLoadError(OSError):
    """The kernel refused a program; `log`: the tail of the verifier's log ("" when not
    asked for)."""

    def __init__(self, err: int, log: str) -> None:
        super().__init__(err, os.strerror(err))
        self.log = log


# The verifier gives up with EAGAIN when a signal is pending (a profiler stopping us, a
# Ctrl-C being delivered): the same bytes load on a second try, as libbpf retries them.
PROG_LOAD_ATTEMPTS = 5


def prog_load(insns: int, size: int, license_: bytes, prog_type: int, flags: int,
              attach_type: int, name: str, log: bool = True,
              kern_version: int = 0) -> int:
    """The fd of the `size` bytes of instructions at address `insns` loaded; raises
    ProgLoadError, with the verifier's log when `log` (the load is then made again
    with a log: the first try costs no log buffer). EAGAIN is tried again."""
    lic = ct.create_string_buffer(license_)
    attr = ProgLoadAttr(prog_type=prog_type, insn_cnt=size // 8, insns=insns,
                        license=ct.addressof(lic), kern_version=kern_version,
                        prog_flags=flags, prog_name=name.encode()[:15],
                        expected_attach_type=attach_type)
    for _ in range(PROG_LOAD_ATTEMPTS):
        try:
            return bpf(BPF_PROG_LOAD, attr)
        except OSError as exc:
            err = exc.errno or errno.EIO
        if err != errno.EAGAIN:
            break
    if not log:
        raise ProgLoadError(err, "")
    buf = ct.create_string_buffer(LOG_SIZE)
    attr.log_level, attr.log_size, attr.log_buf = 1, LOG_SIZE, ct.addressof(buf)
    try:
        os.close(bpf(BPF_PROG_LOAD, attr))  # cannot happen for the same bytes; never leak it
    except OSError:
        pass
    raise ProgLoadError(err, buf.value.decode("utf-8", "replace")[-2000:])


# --- links --------------------------------------------------------------------------

class UprobeMultiLinkAttr(ct.Structure):
    """BPF_LINK_CREATE with its uprobe_multi member."""

    _fields_ = [("prog_fd", ct.c_uint32), ("target_fd", ct.c_uint32),
                ("attach_type", ct.c_uint32), ("flags", ct.c_uint32),
                ("path", ct.c_uint64), ("offsets", ct.c_uint64),
                ("ref_ctr_offsets", ct.c_uint64), ("cookies", ct.c_uint64),
                ("cnt", ct.c_uint32), ("multi_flags", ct.c_uint32), ("pid", ct.c_uint32),
                ("_pad", ct.c_uint32 * 17)]


def uprobe_multi_link(prog_fd: int, path: str, offsets: Sequence[int],
                      ref_ctr_offsets: Sequence[int], cookies: Sequence[int] | None,
                      retprobe: bool, pid: int | None) -> int:
    """One uprobe_multi link putting `prog_fd` (loaded with attach type
    BPF_TRACE_UPROBE_MULTI) on every file offset of `offsets` in `path` at once (all
    uprobes, or all uretprobes when `retprobe`): `ref_ctr_offsets[i]` is offset i's
    semaphore (0: none), raised by the kernel while the link lives, and `cookies[i]`
    (None: all 0) the value bpf_get_attach_cookie() returns when offset i fires; `pid`
    limits it to one process (None: every process mapping the file). The link lasts
    until its fd is closed; closing it removes every site together, with one RCU
    grace period for all."""
    count = len(offsets)
    if count == 0 or len(ref_ctr_offsets) != count or (
            cookies is not None and len(cookies) != count):
        raise fail(errno.EINVAL)
    cpath = ct.create_string_buffer(os.fsencode(path))
    offs = (ct.c_uint64 * count)(*offsets)
    refs = (ct.c_uint64 * count)(*ref_ctr_offsets)
    cooks = (ct.c_uint64 * count)(*cookies) if cookies is not None else None
    attr = UprobeMultiLinkAttr(prog_fd=prog_fd, attach_type=BPF_TRACE_UPROBE_MULTI,
                               path=ct.addressof(cpath), offsets=ct.addressof(offs),
                               ref_ctr_offsets=ct.addressof(refs),
                               cookies=ct.addressof(cooks) if cooks is not None else 0,
                               cnt=count,
                               multi_flags=BPF_F_UPROBE_MULTI_RETURN if retprobe else 0,
                               pid=pid or 0)
    return bpf(BPF_LINK_CREATE, attr)


class RawTracepointOpenAttr(ct.Structure):
    """BPF_RAW_TRACEPOINT_OPEN."""

    _fields_ = [("name", ct.c_uint64), ("prog_fd", ct.c_uint32), ("_pad", ct.c_uint32)]


def raw_tracepoint_open(prog_fd: int, event: str) -> int:
    """Attach `prog_fd` (a BPF_PROG_TYPE_RAW_TRACEPOINT program) to kernel event `event`
    (its name alone: sched_process_exit): the fd, attached until it is closed."""
    name = ct.create_string_buffer(event.encode())
    return bpf(BPF_RAW_TRACEPOINT_OPEN,
               RawTracepointOpenAttr(name=ct.addressof(name), prog_fd=prog_fd))
