"""Read a BPF ring buffer map through libbpf's consumer, where RingReader may not.

Why: runtime/ringbuf.py's RingReader reads the ring's pages with plain loads and stores,
which are acquires and releases only on CPUs with total store order (x86-64). Elsewhere
(aarch64, …), and on a kernel that will not map the ring, records are taken by libbpf's
`ring_buffer` (its loads and stores carry the barriers), reached through the small C
library Debian's bcc ships beside libbcc (`libbcc_bpf.so.0`: libbpf with bcc's
`bpf_*_ringbuf` entry points; no LLVM, no bcc Python module). It calls back once per
record (~1 µs each with the GIL), so it is the slower reader, used only where needed or
when `PLANRUNNER_RING=libbpf` asks for it (to test and compare the two).

The same interface as RingReader: read(limit), wait(timeout_ms), discard(), close().
"""

from __future__ import annotations

import ctypes as ct
import os
from functools import cache
from typing import Any

from planrunner.errors import BackendUnavailable

RING_ENV = "PLANRUNNER_RING"
LIBRARY = "libbcc_bpf.so.0"
# int (*ring_buffer_sample_fn)(void *ctx, void *data, size_t size)
_SAMPLE_FN = ct.CFUNCTYPE(ct.c_int, ct.c_void_p, ct.c_void_p, ct.c_size_t)
# a callback's answer that stops libbpf's consume loop (any value below 0; the record
# it was given is consumed): the batch asked for is full
_STOP = -1
# records one wait may take (ring_buffer__poll consumes all there are; the ring's size
# bounds them anyway)
_ANY = 1 << 62


def wants_libbpf() -> bool:
    """PLANRUNNER_RING=libbpf: read through libbpf even where RingReader could."""
    return os.environ.get(RING_ENV, "").strip().lower() == "libbpf"


@cache
def _lib() -> Any:
    try:
        lib = ct.CDLL(LIBRARY, use_errno=True)
    except OSError as exc:
        raise BackendUnavailable(
            f"this CPU's ring buffer is read through libbpf, and {LIBRARY} did not load "
            f"({exc})", hints=("install Debian's libbpfcc (python3-bpfcc depends on it)",)
        ) from None
    vp = ct.c_void_p
    lib.bpf_new_ringbuf.restype, lib.bpf_new_ringbuf.argtypes = vp, [ct.c_int, _SAMPLE_FN, vp]
    lib.bpf_poll_ringbuf.restype, lib.bpf_poll_ringbuf.argtypes = ct.c_int, [vp, ct.c_int]
    lib.bpf_consume_ringbuf.restype, lib.bpf_consume_ringbuf.argtypes = ct.c_int, [vp]
    lib.bpf_free_ringbuf.restype, lib.bpf_free_ringbuf.argtypes = None, [vp]
    return lib


class LibbpfRing:
    """Consumer of one BPF ring buffer map through libbpf, given its fd."""

    def __init__(self, map_fd: int) -> None:
        self._lib = _lib()
        self._batch: list[bytes] = []
        self._limit = 0
        self._discarding = False
        self._discarded = 0
        self._callback = _SAMPLE_FN(self._on_record)  # kept alive as long as the ring
        ring = self._lib.bpf_new_ringbuf(map_fd, self._callback, None)
        if not ring:
            err = ct.get_errno()
            raise OSError(err, f"libbpf could not open the ring buffer: {os.strerror(err)}")
        self._ring: int | None = ring

    def _on_record(self, _ctx: Any, data: Any, size: int) -> int:
        if self._discarding:
            self._discarded += 1  # counted, not copied
            return 0
        self._batch.append(ct.string_at(data, size))
        return _STOP if len(self._batch) >= self._limit else 0

    def wait(self, timeout_ms: int) -> None:
        """Sleep until the kernel wakes readers or timeout_ms passes; libbpf's poll
        takes what is there then, which the next `read` returns first."""
        if timeout_ms > 0 and self._ring is not None:
            self._limit = _ANY
            self._lib.bpf_poll_ringbuf(self._ring, timeout_ms)

    def read(self, limit: int) -> list[bytes]:
        """Up to `limit` submitted records, oldest first."""
        if self._ring is not None and len(self._batch) < limit:
            self._limit = limit
            self._lib.bpf_consume_ringbuf(self._ring)
        batch, self._batch = self._batch[:limit], self._batch[limit:]
        return batch

    def discard(self) -> int:
        """Release every submitted record unread; how many there were."""
        count, self._batch = len(self._batch), []
        if self._ring is not None:
            self._discarding, self._discarded = True, 0
            try:
                self._lib.bpf_consume_ringbuf(self._ring)
            finally:
                self._discarding = False
            count += self._discarded
        return count

    def close(self) -> None:
        if self._ring is not None:
            self._lib.bpf_free_ringbuf(self._ring)
            self._ring = None
