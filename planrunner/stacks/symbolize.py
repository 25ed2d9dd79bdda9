"""Addresses of one process -> Frames: `Symbolizer().symbolize(addrs, modules)`.

`modules` is a maps snapshot (modules.ProcessModules, or anything with `find(addr)`):
the process may have exited since, the files it mapped are read. addrs[0] is the pc at
the probe and the others are return addresses, looked up at address - 1 (the call
instruction: a call that ends a function, to a noreturn callee, returns past its end);
pass `first_is_pc=False` when addrs[0] is a return address too. Symbol tables
(symtab.ModuleSymbols) are cached per module identity (build-id, else path, dev, inode);
a file replaced on disk since the snapshot (other inode, or other dev and build-id) is
not trusted: only its build-id debug file is read. Names are demangled in one batch
per call (demangle.py). With `jit` (the process's perf map, perfmap.BoundPerfMap), an
address in no file, or in a file without a symbol for it, is named from the map: a
frame of kind "jit" in module `[jit]`, its offset from the JIT symbol's start.
A named native frame is kept by (mapping, lookup address, address) and given again
while the mapping's trust verdict is the one it was named with (a profile names the
same return addresses sample after sample); a frame without a symbol is not kept.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import replace

from planrunner.elf.reader import open_binary
from planrunner.errors import ResolveError
from planrunner.stacks.demangle import demangle
from planrunner.stacks.frame import Frame
from planrunner.stacks.modules import Mapping
from planrunner.stacks.symtab import DEBUG_ROOT, ModuleSymbols
from planrunner.stacks.unwind import JitLookup, MappingLookup

JIT_MODULE = "[jit]"

TRUST_S = 1.0
NAMED_KEPT = 1 << 17  # frames remembered by address (Symbolizer._named)


class Symbolizer:
    def __init__(self, debug_root: str = DEBUG_ROOT, demangle_names: bool = True) -> None:
        self.debug_root = debug_root
        self.demangle_names = demangle_names
        self._tables: dict[object, ModuleSymbols] = {}
        # mapping -> (same_file, when checked): asked per frame, a stat each (~7 us);
        # a file replaced under a running process is seen within TRUST_S
        self._trusted: dict[Mapping, tuple[bool, float]] = {}
        # (mapping, lookup, addr) -> (frame as returned, the trust it was named with): a
        # profile names the same return addresses sample after sample; an entry is used
        # only while its mapping's trust verdict (checked as before) is unchanged
        self._named: dict[tuple[Mapping, int, int], tuple[Frame, bool]] = {}

    def symbolize(self, addrs: Sequence[int], modules: MappingLookup,
                  first_is_pc: bool = True, jit: JitLookup | None = None) -> list[Frame]:
        frames: list[Frame] = []
        fresh: list[tuple[int, tuple[Mapping, int, int], bool]] = []  # (index, key, trust)
        named, now = self._named, time.monotonic()
        for i, addr in enumerate(addrs):
            lookup = addr if (i == 0 and first_is_pc) else addr - 1
            mapping = modules.find(lookup)
            if mapping is not None:
                trusted = self._trust(mapping, now)
                key = (mapping, lookup, addr)
                hit = named.get(key)
                if hit is not None and hit[1] == trusted:
                    frames.append(hit[0])
                    continue
                fresh.append((i, key, trusted))
            frame = self._frame(addr, lookup, mapping)
            if frame.symbol is None and jit is not None:
                frame = _jit_frame(addr, lookup, jit) or frame
            frames.append(frame)
        if self.demangle_names:
            pretty = demangle([f.symbol for f in frames if f.symbol and f.kind == "native"])
            if pretty:
                frames = [replace(f, symbol=pretty.get(f.symbol, f.symbol))
                          if f.symbol and f.kind == "native" else f for f in frames]
        if len(named) + len(fresh) > NAMED_KEPT:
            named.clear()
        for i, key, trusted in fresh:
            if frames[i].kind == "native" and frames[i].symbol is not None:
                # (a frame without a symbol may be named by a perf map that grows later)
                named[key] = (frames[i], trusted)
        return frames

    def trusted(self, mapping: Mapping) -> bool:
        """The file's trust verdict now (rechecked once TRUST_S has passed): what a
        caller that keeps named frames of its own compares."""
        return self._trust(mapping, time.monotonic())

    def _trust(self, mapping: Mapping, now: float) -> bool:
        """Whether the file at the mapping's path is still the one mapped (rechecked
        once TRUST_S has passed)."""
        known = self._trusted.get(mapping)
        if known is None or now - known[1] > TRUST_S:
            if len(self._trusted) >= 1 << 16:
                self._trusted.clear()
            known = self._trusted[mapping] = (same_file(mapping), now)
        return known[0]

    def table(self, mapping: Mapping) -> ModuleSymbols:
        trusted = self._trust(mapping, time.monotonic())
        key: object = (("build-id", mapping.build_id) if mapping.build_id
                       else (mapping.path, mapping.dev, mapping.inode))
        if not trusted:
            key = ("untrusted", key)
        table = self._tables.get(key)
        if table is None:
            table = self._tables[key] = ModuleSymbols.load(
                mapping.source if trusted else None, mapping.build_id, self.debug_root)
        return table

    def _frame(self, addr: int, lookup: int, mapping: Mapping | None) -> Frame:
        if mapping is None:
            return Frame(addr, None, addr, "")
        vaddr = mapping.to_vaddr(lookup)
        if vaddr is None:
            return Frame(addr, None, addr - mapping.start + mapping.file_offset, mapping.path,
                         mapping)
        hit = self.table(mapping).lookup(vaddr)
        if hit is None:
            return Frame(addr, None, vaddr + (addr - lookup), mapping.path, mapping)
        name, start = hit
        return Frame(addr, name, vaddr + (addr - lookup) - start, mapping.path, mapping)


def _jit_frame(addr: int, lookup: int, jit: JitLookup) -> Frame | None:
    symbol = jit.find(lookup)
    if symbol is None:
        return None
    return Frame(addr, symbol.name, addr - symbol.start, JIT_MODULE, kind="jit")


def same_file(mapping: Mapping) -> bool:
    """The file now at mapping.path is the one that was mapped: same dev and inode, or
    (overlayfs shows maps a device other than stat's) same inode and build-id."""
    if mapping.file:
        return True  # the kernel's vDSO: the same image in every process
    try:
        st = os.stat(mapping.path)
    except OSError:
        return False
    if st.st_ino != mapping.inode:
        return False
    if mapping.dev == 0 or st.st_dev == mapping.dev:
        return True
    try:
        return mapping.build_id is not None and open_binary(mapping.path).build_id == \
            mapping.build_id
    except ResolveError:
        return False
