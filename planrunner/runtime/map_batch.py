"""Reading a BPF map whole by its fd, with raw bpf() calls: BPF_MAP_LOOKUP_BATCH (and
BPF_MAP_LOOKUP_AND_DELETE_BATCH when the reader resets the map), key by key
(BPF_MAP_GET_NEXT_KEY, then BPF_MAP_LOOKUP_ELEM) where the kernel has no batch for the
map (an array has no delete batch, an older kernel none at all).

Why not bcc's tables: a name lookup in bcc (`BPF[name]`) walks every map of the module,
~2000 of them for 1000 sites (0.27 s of a 0.66 s stop), and a cached program's run
would import bcc only to read its maps. The backend (runtime/bcc_backend.py) looks each
map's fd up once by name after loading (`MapRef`); a stop then makes a syscall or two per
map and nothing else.

Layouts: the kernel copies `count` keys, then `count` values, back to back; a per-CPU
map's value is one slot per possible CPU, each round_up(value_size, 8) bytes
(`value_width`). `typed` turns what was read into ctypes keys and values
(runtime/map_types.py), as runtime/aggregates.py reads them. No bcc here.
"""

from __future__ import annotations

import ctypes as ct
import errno
import os
import struct
from dataclasses import dataclass
from functools import cache
from typing import Any

# MapElem: union bpf_attr for BPF_MAP_*_ELEM, and BPF_MAP_GET_NEXT_KEY (`value`: the
# next key's buffer)
from planrunner.runtime.compile_cache import PERCPU_MAP_TYPES
from planrunner.runtime.compile_cache import MapElem as ElemAttr
from planrunner.runtime.map_types import decode_desc, per_cpu_slot
from planrunner.runtime.ringbuf import possible_cpus as _read_possible
from planrunner.runtime.uprobe_links import bpf_syscall

BPF_MAP_LOOKUP_ELEM, BPF_MAP_UPDATE_ELEM, BPF_MAP_DELETE_ELEM = 1, 2, 3
BPF_MAP_GET_NEXT_KEY = 4
BPF_MAP_LOOKUP_BATCH, BPF_MAP_LOOKUP_AND_DELETE_BATCH = 24, 25
ENOTSUPP = 524  # the kernel's own "not supported" (not in errno), which bpf() leaks
# what a kernel says of a batch it has not got for this map (or at all)
_NO_BATCH = frozenset({errno.EINVAL, errno.EOPNOTSUPP, ENOTSUPP, errno.ENOSYS})
ARRAY_MAP_TYPES = frozenset({2, 6})  # entries cannot be deleted: zeroed instead
# Entries per batch call to begin with (doubled when a hash bucket holds more), fewer
# when they are big: a drain of stack copies (~16 KiB each) every turn would otherwise
# clear megabytes of buffer for a few entries.
FIRST_CHUNK = 256
CHUNK_BYTES = 256 * 1024


class BatchAttr(ct.Structure):
    """union bpf_attr's `batch` member (BPF_MAP_*_BATCH)."""

    _fields_ = [("in_batch", ct.c_uint64), ("out_batch", ct.c_uint64),
                ("keys", ct.c_uint64), ("values", ct.c_uint64),
                ("count", ct.c_uint32), ("map_fd", ct.c_uint32),
                ("elem_flags", ct.c_uint64), ("flags", ct.c_uint64)]


@cache
def possible_cpus() -> int:
    """CPUs that may ever run, read once (/sys/devices/system/cpu/possible)."""
    return _read_possible()


@dataclass(frozen=True, slots=True)
class MapRef:
    """One map of a loaded program, as the stop reads it: its fd (owned by the program),
    the kernel's definition, and the compiler's descriptions of its key and value."""

    name: str
    fd: int
    map_type: int
    key_size: int
    value_size: int
    max_entries: int
    key_desc: str = ""
    leaf_desc: str = ""

    @property
    def per_cpu(self) -> bool:
        return self.map_type in PERCPU_MAP_TYPES


def value_width(value_size: int, per_cpu: bool, cpus: int) -> int:
    """Bytes the kernel copies per value: one 8-byte aligned slot per possible CPU for a
    per-CPU map, the value as it is otherwise."""
    return (value_size + 7) // 8 * 8 * cpus if per_cpu else value_size


@dataclass(frozen=True, slots=True)
class Entries:
    """What one read returned: `count` keys and values, each packed back to back."""

    count: int
    keys: bytes
    values: bytes


def read_entries(ref: MapRef, delete: bool) -> Entries:
    """Every entry of the map now; with `delete`, each entry returned is removed with its
    read (one batch syscall per chunk where the kernel has it). Raises OSError."""
    width = value_width(ref.value_size, ref.per_cpu, possible_cpus())
    got = _batched(ref, width, delete)
    if got is None:
        got = _key_by_key(ref, width, delete)
    return got


def first_chunk(ref: MapRef, width: int) -> int:
    """Entries the first batch call asks for (values of `width` bytes)."""
    return max(1, min(FIRST_CHUNK, ref.max_entries, CHUNK_BYTES // (ref.key_size + width)))


def _batched(ref: MapRef, width: int, delete: bool) -> Entries | None:
    """The batch read; None when the kernel has no batch for this map."""
    cmd = BPF_MAP_LOOKUP_AND_DELETE_BATCH if delete else BPF_MAP_LOOKUP_BATCH
    chunk = first_chunk(ref, width)
    token = max(ref.key_size, 8)  # a hash map's position is a u32 bucket, an array's a key
    in_buf, out_buf = ct.create_string_buffer(token), ct.create_string_buffer(token)
    keys_buf = ct.create_string_buffer(ref.key_size * chunk)
    values_buf = ct.create_string_buffer(width * chunk)
    keys, values, count = [], [], 0
    first = True
    while True:
        attr = BatchAttr(in_batch=0 if first else ct.addressof(in_buf),
                         out_batch=ct.addressof(out_buf), keys=ct.addressof(keys_buf),
                         values=ct.addressof(values_buf), count=chunk, map_fd=ref.fd)
        ret, err = bpf_syscall(cmd, attr)
        n = int(attr.count) if ret == 0 or err == errno.ENOENT else 0
        if ret < 0 and err == errno.ENOSPC and n == 0:  # a bucket bigger than the chunk
            chunk *= 2
            keys_buf = ct.create_string_buffer(ref.key_size * chunk)
            values_buf = ct.create_string_buffer(width * chunk)
            continue
        if ret < 0 and err != errno.ENOENT:
            if first and err in _NO_BATCH:
                return None
            raise OSError(err, f"batch read of map {ref.name}: {os.strerror(err)}")
        if n:
            keys.append(keys_buf.raw[:n * ref.key_size])
            values.append(values_buf.raw[:n * width])
            count += n
        if ret < 0:  # ENOENT: nothing after this chunk
            return Entries(count, b"".join(keys), b"".join(values))
        ct.memmove(in_buf, out_buf, token)
        first = False


def _key_by_key(ref: MapRef, width: int, delete: bool) -> Entries:
    """Every key first (a deletion while walking would restart a hash map's walk), then
    each value; a deleted array entry is zeroed (arrays keep every key)."""
    found = []
    key = ct.create_string_buffer(ref.key_size)
    nxt = ct.create_string_buffer(ref.key_size)
    at = 0  # NULL: the first key
    while True:
        ret, err = bpf_syscall(BPF_MAP_GET_NEXT_KEY, ElemAttr(
            map_fd=ref.fd, key=at, value=ct.addressof(nxt)))
        if ret < 0:
            if err == errno.ENOENT:
                break
            raise OSError(err, f"walk of map {ref.name}: {os.strerror(err)}")
        found.append(nxt.raw)
        ct.memmove(key, nxt, ref.key_size)
        at = ct.addressof(key)
    keys, values = [], []
    value = ct.create_string_buffer(width)
    zero = ct.create_string_buffer(width)
    for raw in found:
        kbuf = ct.create_string_buffer(raw, ref.key_size)
        elem = ElemAttr(map_fd=ref.fd, key=ct.addressof(kbuf), value=ct.addressof(value))
        ret, err = bpf_syscall(BPF_MAP_LOOKUP_ELEM, elem)
        if ret < 0:
            if err == errno.ENOENT:  # deleted since the walk
                continue
            raise OSError(err, f"lookup in map {ref.name}: {os.strerror(err)}")
        keys.append(raw)
        values.append(value.raw)
        if delete:
            _delete(ref, kbuf, zero)
    return Entries(len(keys), b"".join(keys), b"".join(values))


def _delete(ref: MapRef, kbuf: Any, zero: Any) -> None:
    if ref.map_type in ARRAY_MAP_TYPES:
        bpf_syscall(BPF_MAP_UPDATE_ELEM, ElemAttr(map_fd=ref.fd, key=ct.addressof(kbuf),
                                                  value=ct.addressof(zero)))
    else:
        bpf_syscall(BPF_MAP_DELETE_ELEM, ElemAttr(map_fd=ref.fd, key=ct.addressof(kbuf)))


def lookup(ref: MapRef, key: bytes) -> bytes | None:
    """The value (all CPUs' slots, for a per-CPU map) at `key`; None when absent."""
    width = value_width(ref.value_size, ref.per_cpu, possible_cpus())
    kbuf, vbuf = ct.create_string_buffer(key, len(key)), ct.create_string_buffer(width)
    ret, err = bpf_syscall(BPF_MAP_LOOKUP_ELEM, ElemAttr(
        map_fd=ref.fd, key=ct.addressof(kbuf), value=ct.addressof(vbuf)))
    if ret < 0:
        if err == errno.ENOENT:
            return None
        raise OSError(err, f"lookup in map {ref.name}: {os.strerror(err)}")
    return vbuf.raw


def delete(ref: MapRef, key: bytes) -> None:
    """Remove `key` (absent: nothing to do)."""
    kbuf = ct.create_string_buffer(key, len(key))
    bpf_syscall(BPF_MAP_DELETE_ELEM, ElemAttr(map_fd=ref.fd, key=ct.addressof(kbuf)))


def u64_total(values: bytes) -> int:
    """The sum of `values` read as u64s (a per-CPU counter's slots, entries after
    entries)."""
    total: int = sum(v for (v,) in struct.iter_unpack("<Q", values[:len(values) // 8 * 8]))
    return total


def typed(ref: MapRef, entries: Entries) -> list[tuple[Any, Any]]:
    """(key, value) ctypes pairs of what was read: the key as the compiler described it,
    the value too, or, for a per-CPU map, an array of one such value per possible CPU
    (runtime/aggregates.py reads each slot)."""
    if not entries.count:
        return []
    key_t, value_t = decode_desc(ref.key_desc), decode_desc(ref.leaf_desc)
    if ref.per_cpu:
        value_t = per_cpu_slot(value_t) * possible_cpus()
    if ct.sizeof(key_t) != ref.key_size or ct.sizeof(value_t) * entries.count != \
            len(entries.values):
        raise ValueError(f"map {ref.name}: its described types ({ct.sizeof(key_t)}, "
                         f"{ct.sizeof(value_t)} bytes) are not the kernel's "
                         f"({ref.key_size}, {ref.value_size} bytes)")
    keys = (key_t * entries.count).from_buffer_copy(entries.keys)
    values = (value_t * entries.count).from_buffer_copy(entries.values)
    return list(zip(keys, values, strict=True))
