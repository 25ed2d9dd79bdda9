"""Read a BPF ring buffer map directly: mmap its pages and parse records in Python.

Why: bcc's ring_buffer_poll calls a ctypes callback per record (~1 µs each, with the
GIL dance), which caps a Python consumer well below the kernel's rate. Mapping the
ring and walking it in batches costs one bytes slice per record.

Layout (kernel/bpf/ringbuf.c, the same contract libbpf's ringbuf.c relies on):
- offset 0 of the map fd: the consumer page (read/write), `consumer_pos` at byte 0;
- offset PAGE: the producer page (read-only), `producer_pos` at byte 0, followed by the
  data area of `size` bytes mapped twice in a row, so a record that wraps past the end
  is contiguous in the mapping;
- each record: an 8-byte header (u32 len with bit 31 = busy (not yet submitted) and
  bit 30 = discarded, then u32 page offset), the sample, padding to 8 bytes.
Positions only grow; `pos & (size - 1)` is the offset in the data area.

Ordering. The kernel publishes a record with a store-release of its length (busy bit
cleared) and reads consumer_pos with a load-acquire; a consumer must load producer_pos
and each length with acquire semantics and store consumer_pos with release semantics,
so that it never reads a sample before its length says it is complete, and the kernel
never reuses space whose bytes are still being copied out (libbpf's ringbuf.c:
smp_load_acquire / smp_store_release). Python has no fences. On x86-64 (TSO) every
aligned 8-byte load is an acquire and every store a release, so plain loads and stores
are enough there; on aarch64 and other weakly ordered CPUs they are not, so the reader
is used only where `ordered_host()` says so, and the backend (runtime/bcc_backend.py)
uses bcc's consumer, libbpf's ring_buffer with its barriers, everywhere else (slower
per record, but correct). Positions and lengths are host-endian, as the kernel writes
them. Positions go through a memoryview cast to 'Q': one aligned 8-byte load or store
each. Never `struct.pack_into` for the consumer position:
CPython zeroes the target (memset) before it writes the value, and a producer that
reads consumer_pos == 0 in that window sees a full ring and drops its record (1-15
records per million at 100k/s, with the ring 10% full). Pure stdlib: no bcc.
"""

from __future__ import annotations

import mmap
import os
import select
import struct

BUSY_BIT = 1 << 31
DISCARD_BIT = 1 << 30
HDR_SIZE = 8
# Ring bytes one read takes at most: a full 8 MiB ring decoded at once held ~25 MiB more
# in a 1M/s flood than reading it 1 MiB at a time (issue 17 round two).
READ_BYTES = 1 << 20
# Native format on purpose: CPython unpacks "<I" byte by byte, native "I" is one load.
_LEN = struct.Struct("I")


# Where plain aligned loads and stores are acquires and releases (total store order).
TSO_MACHINES = frozenset({"x86_64", "amd64", "AMD64"})


def ordered_host(machine: str | None = None) -> bool:
    """Whether this CPU orders memory strongly enough for RingReader (see above)."""
    return (machine or _machine()) in TSO_MACHINES


def _machine() -> str:
    return os.uname().machine  # platform.machine()'s answer, without importing platform


def possible_cpus(path: str = "/sys/devices/system/cpu/possible") -> int:
    """How many CPUs may ever run (ranges like `0-127,130`): each may hold back its
    share of the ring before a wakeup (templates/record_helpers.h). 1 when unknown."""
    try:
        with open(path, encoding="ascii") as fh:
            text = fh.read().strip()
    except OSError:
        return os.cpu_count() or 1
    count = 0
    for part in filter(None, text.split(",")):
        first, _, last = part.partition("-")
        count += int(last or first) - int(first) + 1
    return max(count, 1)


class RingReader:
    """Consumer of one BPF ring buffer map, given its fd and data size in bytes."""

    def __init__(self, map_fd: int, size: int) -> None:
        if size <= 0 or size & (size - 1):
            raise ValueError(f"ring buffer size {size} is not a power of two")
        page = mmap.PAGESIZE
        self.size = size
        self.mask = size - 1
        self._fd = map_fd
        self._cons = mmap.mmap(map_fd, page, mmap.MAP_SHARED,
                               mmap.PROT_READ | mmap.PROT_WRITE, offset=0)
        try:
            self._prod = mmap.mmap(map_fd, page + 2 * size, mmap.MAP_SHARED,
                                   mmap.PROT_READ, offset=page)
        except OSError:
            self._cons.close()
            raise
        # word [0] of each: consumer_pos (we store it), producer_pos (the kernel does)
        self._cons_pos = memoryview(self._cons).cast("Q")
        self._prod_pos = memoryview(self._prod).cast("Q")
        self._base = page  # the data area starts one page into the producer mapping
        self._poller = select.poll()
        self._poller.register(map_fd, select.POLLIN)

    def pending_bytes(self) -> int:
        return self._prod_pos[0] - self._cons_pos[0]

    def wait(self, timeout_ms: int) -> None:
        """Sleep until the kernel wakes readers or timeout_ms passes (0: do not sleep).
        poll() asks the map for readiness on every call, so data already there returns
        at once even though most records are submitted without a wakeup."""
        if timeout_ms > 0:
            try:
                self._poller.poll(timeout_ms)
            except InterruptedError:  # a signal: the caller checks its stop flag
                pass

    def read(self, limit: int, max_bytes: int = READ_BYTES) -> list[bytes]:
        """Take up to `limit` submitted records, and about `max_bytes` of ring (oldest
        first), and release their space. The byte bound keeps what one read copies out
        of a large ring small: the caller reads again for the rest."""
        cons = self._cons_pos[0]
        prod = self._prod_pos[0]
        if cons >= prod:
            return []
        prod = min(prod, cons + max_bytes)
        data, mask, base = self._prod, self.mask, self._base + HDR_SIZE
        size_of = _LEN.unpack_from
        out: list[bytes] = []
        append = out.append
        n = 0
        while cons < prod and n < limit:
            off = (cons & mask) + base
            length = size_of(data, off - HDR_SIZE)[0]
            if length & BUSY_BIT:
                break  # reserved, not yet submitted: later records wait behind it
            sample = length & ~(BUSY_BIT | DISCARD_BIT)
            if not length & DISCARD_BIT:
                append(data[off:off + sample])  # one copy, straight from the mmap
                n += 1
            cons += (sample + HDR_SIZE + 7) & ~7
        self._cons_pos[0] = cons  # one store: the kernel may read it at any moment
        return out

    def discard(self) -> int:
        """Release every submitted record unread (oldest first, up to one still being
        written); how many there were. Walks the headers only: no copy."""
        cons = self._cons_pos[0]
        prod = self._prod_pos[0]
        data, mask, base = self._prod, self.mask, self._base
        size_of = _LEN.unpack_from
        n = 0
        while cons < prod:
            length = size_of(data, (cons & mask) + base)[0]
            if length & BUSY_BIT:
                break
            if not length & DISCARD_BIT:
                n += 1
            cons += ((length & ~(BUSY_BIT | DISCARD_BIT)) + HDR_SIZE + 7) & ~7
        self._cons_pos[0] = cons  # one store, as in `read`
        return n

    def close(self) -> None:
        if not self._prod.closed:
            self._poller.unregister(self._fd)
            self._cons_pos.release()  # the mmaps refuse to close while exported
            self._prod_pos.release()
            self._prod.close()
            self._cons.close()


def map_fd_size(map_fd: int) -> int:
    """The data size of a ring buffer map from /proc/self/fdinfo (max_entries)."""
    with open(f"/proc/self/fdinfo/{map_fd}", encoding="ascii") as fh:
        for line in fh:
            if line.startswith("max_entries:"):
                return int(line.split()[1])
    raise OSError(f"fd {map_fd} has no max_entries in fdinfo")


def open_reader(map_fd: int) -> RingReader:
    return RingReader(map_fd, map_fd_size(map_fd))


