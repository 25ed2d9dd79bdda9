"""Decode ring-buffer records into print records (dicts), in batches.

One struct.Struct per RecordLayout (render/layout.py) unpacks a whole record at once;
per-output decoders are built once, so the hot path is one unpack and one dict build.
Pure: no bcc. Strings the kernel could not read (a page not yet faulted in) are read
again from /proc/PID/mem; a NULL pointer is None.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable, Iterable

from planrunner.records import iso_utc_ns
from planrunner.render.layout import STR_NULL, STR_TRUNCATED, RecordLayout
from planrunner.render.model import PrintOutput

Record = dict[str, object]
_OUTPUT_ID = struct.Struct("<I")


def reread_user_string(pid: int, ptr: int, size: int) -> bytes | None:
    """Read a NUL-terminated string of the live process `pid` from user space."""
    try:
        with open(f"/proc/{pid}/mem", "rb", buffering=0) as mem:
            mem.seek(ptr)
            data = mem.read(size)
    except (OSError, ValueError, OverflowError):
        return None
    return data.split(b"\0", 1)[0]


class Decoder:
    """Turns raw record bytes into print records for every print output of a program."""

    def __init__(self, prints: Iterable[PrintOutput]) -> None:
        # monotonic -> wall clock offset, taken once (bpf_ktime_get_ns is CLOCK_MONOTONIC)
        self.offset_ns = time.time_ns() - time.monotonic_ns()
        self.unreadable = 0
        self._by_id: dict[int, Callable[[bytes], Record]] = {
            p.layout.output_id: self._decoder(p) for p in prints}

    def decode(self, raw: bytes) -> Record | None:
        (output_id,) = _OUTPUT_ID.unpack_from(raw, 8)
        fn = self._by_id.get(output_id)
        return fn(raw) if fn else None

    def decode_batch(self, batch: Iterable[bytes]) -> list[Record]:
        out = []
        by_id = self._by_id
        for raw in batch:
            fn = by_id.get(_OUTPUT_ID.unpack_from(raw, 8)[0])
            if fn is not None:
                out.append(fn(raw))
        return out

    def _decoder(self, out: PrintOutput) -> Callable[[bytes], Record]:
        layout: RecordLayout = out.layout
        unpack = struct.Struct(layout.struct_format).unpack_from
        probe, name = out.probe, out.name
        plan: list[tuple[str, str, int]] = []  # (key, kind, first tuple index)
        i = 6
        for f in layout.fields:
            plan.append((f.key, f.kind, i))
            i += 3 if f.kind == "str" else 1
        has_str = any(kind == "str" for _k, kind, _i in plan)
        offset = self.offset_ns

        def decode(raw: bytes) -> Record:
            v = unpack(raw)
            ts = v[0]
            rec: Record = {
                "time": iso_utc_ns(ts + offset), "ts_ns": ts, "pid": v[2], "tid": v[3],
                "comm": v[5].split(b"\0", 1)[0].decode("utf-8", "backslashreplace"),
                "probe": probe, "output": name,
            }
            if not has_str:
                for key, kind, j in plan:
                    rec[key] = bool(v[j]) if kind == "bool" else v[j]
                return rec
            truncated = []
            for key, kind, j in plan:
                if kind != "str":
                    rec[key] = bool(v[j]) if kind == "bool" else v[j]
                    continue
                rec[key] = self._string(v[2], v[j], v[j + 1], v[j + 2])
                if v[j + 1] == STR_TRUNCATED:
                    truncated.append(key)
            if truncated:
                rec["truncated"] = truncated
            return rec

        return decode

    def _string(self, pid: int, ptr: int, status: int, data: bytes) -> str | None:
        if status == STR_NULL:
            return None
        if status < 0:  # the kernel could not read it: try again from user space
            again = reread_user_string(pid, ptr, len(data) - 1) if ptr else None
            if again is None:
                self.unreadable += 1
                return None
            return again.decode("utf-8", "backslashreplace")
        return data.split(b"\0", 1)[0].decode("utf-8", "backslashreplace")
