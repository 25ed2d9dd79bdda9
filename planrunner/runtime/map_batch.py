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
(runtime/map_types.py), as runtime/aggregates.py reads them. The calls themselves are
runtime/kernel/bpf.py's. No bcc here.
"""

from __future__ import annotations

import ctypes as ct
import errno
import os
import struct
from dataclasses import dataclass
from functools import cache
from typing import Any

from planrunner.runtime.kernel.bpf import (
    ARRAY_MAP_TYPES,
    ENOTSUPP,
    PERCPU_MAP_TYPES,
    map_delete_elem,
    map_get_next_key,
    map_lookup_batch,
    map_lookup_elem,
    map_update_elem,
)
from planrunner.runtime.map_types import decode_desc, per_cpu_slot
from planrunner.runtime.ringbuf import possible_cpus as _read_possible

# what a kernel says of a batch it has not got for this map (or at all)
_NO_BATCH = frozenset({errno.EINVAL, errno.EOPNOTSUPP, ENOTSUPP, errno.ENOSYS})
# (ARRAY_MAP_TYPES: entries cannot be deleted, so they are zeroed instead)
# Entries per batch call to begin with (doubled when a hash bucket holds more), fewer
# when they are big: a drain of stack copies (~16 KiB each) every turn would otherwise
# clear megabytes of buffer for a few entries.
FIRST_CHUNK = 256
CHUNK_BYTES = 256 * 1024


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
    chunk = first_chunk(ref, width)
    token = max(ref.key_size, 8)  # a hash map's position is a u32 bucket, an array's a key
    in_buf, out_buf = ct.create_string_buffer(token), ct.create_string_buffer(token)
    keys_buf = ct.create_string_buffer(ref.key_size * chunk)
    values_buf = ct.create_string_buffer(width * chunk)
    keys, values, count = [], [], 0
    first = True
    while True:
        try:
            n, more = map_lookup_batch(ref.fd, keys_buf, values_buf, chunk,
                                       None if first else in_buf, out_buf, delete)
        except OSError as exc:
            err = exc.errno or errno.EIO
            if err == errno.ENOSPC:  # a bucket bigger than the chunk
                chunk *= 2
                keys_buf = ct.create_string_buffer(ref.key_size * chunk)
                values_buf = ct.create_string_buffer(width * chunk)
                continue
            if first and err in _NO_BATCH:
                return None
            raise OSError(err, f"batch read of map {ref.name}: {os.strerror(err)}") from None
        if n:
            keys.append(keys_buf.raw[:n * ref.key_size])
            values.append(values_buf.raw[:n * width])
            count += n
        if not more:  # ENOENT: nothing after this chunk
            return Entries(count, b"".join(keys), b"".join(values))
        ct.memmove(in_buf, out_buf, token)
        first = False


def _key_by_key(ref: MapRef, width: int, delete: bool) -> Entries:
    """Every key first (a deletion while walking would restart a hash map's walk), then
    each value; a deleted array entry is zeroed (arrays keep every key)."""
    found: list[bytes] = []
    at: bytes | None = None  # the first key
    while True:
        try:
            nxt = map_get_next_key(ref.fd, at, ref.key_size)
        except OSError as exc:
            raise OSError(exc.errno, f"walk of map {ref.name}: {exc.strerror}") from None
        if nxt is None:
            break
        found.append(nxt)
        at = nxt
    keys, values = [], []
    zero = bytes(width)
    for raw in found:
        value = _lookup(ref, raw, width)
        if value is None:  # deleted since the walk
            continue
        keys.append(raw)
        values.append(value)
        if delete:
            _delete(ref, raw, zero)
    return Entries(len(keys), b"".join(keys), b"".join(values))


def _delete(ref: MapRef, key: bytes, zero: bytes) -> None:
    try:
        if ref.map_type in ARRAY_MAP_TYPES:
            map_update_elem(ref.fd, key, zero)
        else:
            map_delete_elem(ref.fd, key)
    except OSError:  # gone meanwhile, or not ours to reset: read again next time
        pass


def _lookup(ref: MapRef, key: bytes, width: int) -> bytes | None:
    try:
        return map_lookup_elem(ref.fd, key, width)
    except OSError as exc:
        raise OSError(exc.errno, f"lookup in map {ref.name}: {exc.strerror}") from None


def lookup(ref: MapRef, key: bytes) -> bytes | None:
    """The value (all CPUs' slots, for a per-CPU map) at `key`; None when absent."""
    return _lookup(ref, key, value_width(ref.value_size, ref.per_cpu, possible_cpus()))


def delete(ref: MapRef, key: bytes) -> None:
    """Remove `key` (absent: nothing to do)."""
    try:
        map_delete_elem(ref.fd, key)
    except OSError:
        pass


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
