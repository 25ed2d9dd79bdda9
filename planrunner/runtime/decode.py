"""Decode ring-buffer records into print records (dicts), in batches.

One struct.Struct per RecordLayout (render/layout.py) unpacks a whole record at once.
Per output, a decode function is generated once from the layout (straight-line Python:
one unpack, one dict display, no per-field loop or call for ints), so the hot path
costs under a microsecond per record; a batch of one output's records runs through
a generated loop (`decode_all`), not a call per record. Record keys enter the generated
source only as repr() literals; nothing else of the plan does.
The `time` string is a per-millisecond prefix (built once per run of records in the
same millisecond, from a per-second cache of the date part) plus the last three digits
from a table; `comm` comes from a small cache (a process has few thread names).
Pure: no bcc. Strings the kernel could not read (a page not yet faulted in, on a kernel
without sleepable uprobes) are read again from /proc/PID/mem, later than the probe fired:
the process may have written another value there meanwhile, so such a record names them
in `reread` (a list of keys, like `truncated`). A NULL pointer is None.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable, Sequence
from typing import cast

from planrunner.clock import wall_offset_ns
from planrunner.records import Record
from planrunner.render.contracts import PR_HDR
from planrunner.render.layout import STR_NULL, STR_OK, STR_TRUNCATED, RecordLayout
from planrunner.render.model import NEWPID_OUTPUT, PrintOutput, StackMaps
from planrunner.runtime.stacks import StackResolver

# struct pr_hdr's output and pid members, read alone (render/contracts.py PR_HDR)
_OUTPUT_ID, _OUTPUT_AT = struct.Struct(PR_HDR.member_format("output")), PR_HDR.offset("output")
_PID, _PID_AT = struct.Struct(PR_HDR.member_format("pid")), PR_HDR.offset("pid")
_CACHE_MAX = 4096
# the time string's last digits by table: "000".."999", and with the "Z" after them
_MILLIS = tuple(f"{n:03d}" for n in range(1000))
_MICROS_Z = tuple(f"{n:03d}Z" for n in range(1000))


def reread_user_string(pid: int, ptr: int, size: int) -> bytes | None:
    """Read a NUL-terminated string of the live process `pid` from user space."""
    try:
        with open(f"/proc/{pid}/mem", "rb", buffering=0) as mem:
            mem.seek(ptr)
            data = mem.read(size)
    except (OSError, ValueError, OverflowError):
        return None
    return data.split(b"\0", 1)[0]


class _Caches:
    """Per-second ISO date prefixes and decoded comm names."""

    def __init__(self) -> None:
        self.seconds: dict[int, str] = {}
        self.comms: dict[bytes, str] = {}

    def second(self, sec: int) -> str:
        if len(self.seconds) > _CACHE_MAX:  # records come in time order: old ones are done
            self.seconds.clear()
        from datetime import UTC, datetime  # noqa: PLC0415 - not before attaching

        text = datetime.fromtimestamp(sec, UTC).strftime("%Y-%m-%dT%H:%M:%S.")
        self.seconds[sec] = text
        return text

    def comm(self, raw: bytes) -> str:
        if len(self.comms) > _CACHE_MAX:
            self.comms.clear()
        text = raw.split(b"\0", 1)[0].decode("utf-8", "backslashreplace")
        self.comms[raw] = text
        return text


def _source(layout: RecordLayout) -> str:
    """The generated decode functions for one layout (see the module docstring):
    `decode(raw)` for one record and `decode_all(batch)` for a batch, one body."""
    names = ["ts", "_out", "pid", "tid", "comm_raw"]
    entries: list[str] = []
    post: list[str] = []
    index = {f.member: n for n, f in enumerate(layout.fields)}
    tail = layout.last_string if layout.variable else None
    for f in layout.in_memory:  # unpacked in record order, shown in plan order
        n = index[f.member]
        if f is tail:  # as long as the record is (a variable layout's last string)
            names += [f"p{n}", f"s{n}"]
        else:
            names += [f"p{n}", f"s{n}", f"b{n}"] if f.kind == "str" else [f"v{n}"]
    for n, f in enumerate(layout.fields):
        key = repr(f.key)
        if f.kind == "stack" and f.stack_kind == "kernel":
            entries.append(f"{key}: kstack(kmap, v{n}, {f.limit})")
        elif f.kind == "stack":
            entries.append(f"{key}: ustack(umap, pid, v{n}, {f.limit}, ts)")
        elif f.kind == "ucopy":
            entries.append(f"{key}: ucopy(v{n}, {f.limit}, {f.unwind!r}, {f.python})")
        elif f.kind == "usym":  # an address of the record's process
            entries.append(f"{key}: usym(pid, v{n}, ts)")
        elif f.kind == "str":
            entries.append(f"{key}: (b{n}.split(b'\\0', 1)[0].decode('utf-8', "
                           f"'backslashreplace') if s{n} == {STR_OK} else "
                           f"slow_string(pid, p{n}, s{n}, b{n}, {f.size}))")
            # one comparison when the string was read whole (the common case)
            post += [f"if s{n} != {STR_OK}:",
                     f"    if s{n} == {STR_TRUNCATED}: rec.setdefault('truncated', [])"
                     f".append({key})",
                     # the kernel failed and /proc/PID/mem answered: memory as it was later
                     f"    if s{n} < 0 and rec[{key}] is not None: "
                     f"rec.setdefault('reread', []).append({key})"]
        else:
            entries.append(f"{key}: bool(v{n})" if f.kind == "bool" else f"{key}: v{n}")
    body = [
        f"{', '.join(names)}, = unpack(raw)",
        *([f"b{index[tail.member]} = raw[{layout.prefix_size}:]"] if tail else []),
        "us = (ts + offset) // 1000",
        "ms = us // 1000",
        # records come in time order: at a high rate many share their millisecond, whose
        # prefix (date, time, first three digits of the fraction) is built once
        "if ms != last_ms:",
        "    last_ms, sec = ms, ms // 1000",
        "    prefix = (seconds_get(sec) or second(sec)) + MILLIS[ms - sec * 1000]",
        "rec = {'time': prefix + MICROS_Z[us % 1000],",
        "       'ts_ns': ts, 'pid': pid, 'tid': tid,",
        "       'comm': comms_get(comm_raw) or comm(comm_raw),",
        "       'probe': probe, 'output': name" + "".join(", " + e for e in entries) + "}",
        *post,
    ]
    lines = ["def decode(raw):", "    last_ms = prefix = None",
             *[f"    {b}" for b in body], "    return rec",
             # a loop here rather than map(decode, batch): no call per record
             "def decode_all(batch):", "    out = []", "    append = out.append",
             "    last_ms = prefix = None", "    for raw in batch:",
             *[f"        {b}" for b in body], "        append(rec)", "    return out"]
    return "\n".join(lines) + "\n"


class Decoder:
    """Turns raw record bytes into print records for every print output of a program."""

    def __init__(self, prints: Iterable[PrintOutput], stacks: StackResolver | None = None,
                 stack_maps: StackMaps | None = None) -> None:
        # monotonic -> wall clock offset, taken once (bpf_ktime_get_ns is CLOCK_MONOTONIC)
        self.offset_ns = wall_offset_ns()
        self.unreadable = 0
        self.stacks = stacks or StackResolver(None)
        self.stack_maps = stack_maps or StackMaps()
        self._caches = _Caches()
        generated = {p.layout.output_id: self._decoder(p) for p in prints}
        self._by_id: dict[int, Callable[[bytes], Record | None]] = {
            output_id: one for output_id, (one, _) in generated.items()}
        if self.stack_maps.seen:  # a process to snapshot now, before it exits
            self._by_id[NEWPID_OUTPUT] = self._new_process
        self._only = (next(iter(generated.values()))[1]
                      if len(generated) == 1 and not self.stack_maps.seen else None)

    def decode(self, raw: bytes) -> Record | None:
        (output_id,) = _OUTPUT_ID.unpack_from(raw, _OUTPUT_AT)
        fn = self._by_id.get(output_id)
        return fn(raw) if fn else None

    def _new_process(self, raw: bytes) -> None:
        self.stacks.announced(_PID.unpack_from(raw, _PID_AT)[0])

    def decode_batch(self, batch: Sequence[bytes]) -> list[Record]:
        only = self._only
        if only is not None:  # one print output: every record is its (the common case)
            # (set only without stack announcements: then no decoder answers None)
            return only(batch)
        by_id = self._by_id
        unpack_id, at = _OUTPUT_ID.unpack_from, _OUTPUT_AT
        out = []
        for raw in batch:
            fn = by_id.get(unpack_id(raw, at)[0])
            if fn is not None and (rec := fn(raw)) is not None:
                out.append(rec)
        return out

    def _decoder(self, out: PrintOutput) -> tuple[Callable[[bytes], Record],
                                                  Callable[[Sequence[bytes]], list[Record]]]:
        caches = self._caches
        namespace: dict[str, object] = {
            # a variable record is its prefix and as much of its last string as it holds
            "unpack": (struct.Struct(out.layout.prefix_format).unpack_from
                       if out.layout.variable else
                       struct.Struct(out.layout.struct_format).unpack),
            "offset": self.offset_ns, "probe": out.probe, "name": out.name,
            "MILLIS": _MILLIS, "MICROS_Z": _MICROS_Z,
            "seconds_get": caches.seconds.get, "second": caches.second,
            "comms_get": caches.comms.get, "comm": caches.comm,
            "STR_OK": STR_OK, "STR_TRUNCATED": STR_TRUNCATED,
            "slow_string": self._slow_string,
            "kstack": self.stacks.kernel, "ustack": self.stacks.user_ids,
            "ucopy": self.stacks.user_copy, "usym": self.stacks.user_symbol,
            "kmap": (self.stack_maps.kernel or ("", 0))[0],
            "umap": (self.stack_maps.user or ("", 0))[0],
        }
        exec(compile(_source(out.layout), f"<decode {out.name}>", "exec"), namespace)  # noqa: S102
        # both defined by _source
        return (cast(Callable[[bytes], Record], namespace["decode"]),
                cast(Callable[[Sequence[bytes]], list[Record]], namespace["decode_all"]))

    def _slow_string(self, pid: int, ptr: int, status: int, data: bytes, size: int
                     ) -> str | None:
        """A string that is NULL, unreadable in the kernel, or truncated; `size`: its
        buffer's bytes (a variable record holds fewer)."""
        if status == STR_NULL:
            return None
        if status < 0:  # the kernel could not read it: try again from user space
            again = reread_user_string(pid, ptr, size - 1) if ptr else None
            if again is None:
                self.unreadable += 1
                return None
            return again.decode("utf-8", "backslashreplace")
        return data.split(b"\0", 1)[0].decode("utf-8", "backslashreplace")
