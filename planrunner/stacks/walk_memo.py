"""Walks remembered by what they read (issue 28 item 5): a profile's samples of one
thread are new stack copies (a local changed, so BPF's hash of the copy did), but
from the probe's caller on they are mostly the same walk again. `WalkMemo.rest` gives
the walk from the caller's state (unwind.py's second frame) on, as an earlier walk
gave it, when everything that walk's result depended on is equal now:

- the key: the process's maps (the ProcessModules object itself: immutable, kept
  alive by the entry, so its id is not reused), the mode, the frames left, the
  caller's pc and sp;
- the values that were *used*: each word read from the stack copy and each register
  of the caller's state (callee-saved registers the first step restored or passed on,
  a frame pointer holding a local in code without frame pointers) is handed to the
  walk as a `_Watched` int that notes itself when it takes part in arithmetic, a
  comparison or an index; a value only copied from frame to frame (a callee-saved
  register no later step reads) is no dependency, which is what makes a hit likely;
- which reads fell inside the copy: the lowest and highest address read, and the
  addresses that were outside it (their None steered the walk).

A walk that asked the JIT lookup (a perf map grows) is not kept. Everything else a
step consults is fixed for a module (its CFI and frame-pointer verdict, by build-id).
A miss costs the walk plus the watching (~2x a plain walk); a hit, the checks.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

from planrunner.stacks.capture import ArchSpec, StackWindow
from planrunner.stacks.modules import ProcessModules
from planrunner.stacks.state import UnwindState

# Entries kept (a key's list counts one each); past this the memo starts again.
MAX_ENTRIES = 1 << 14
PER_KEY = 4  # walks kept per key (the newest first)

_Key = tuple[int, str, int, int, int]
Walk = Callable[[UnwindState, StackWindow], tuple[tuple[int, ...], str, bool]]


@dataclass(frozen=True, slots=True)
class _Entry:
    modules: ProcessModules  # kept alive: its id is in the key
    regs: tuple[tuple[int, int], ...]  # (register, value) the walk used
    words: tuple[tuple[int, int], ...]  # (address, word) the walk used
    outside: tuple[int, ...]  # addresses read that were outside the copy
    low: int  # the lowest and highest address read inside the copy (+ a word)
    high: int
    addrs: tuple[int, ...]
    stop: str

    def holds(self, regs: dict[int, int], window: StackWindow) -> bool:
        if self.high and (window.base > self.low or self.high > window.end):
            return False
        for reg, value in self.regs:
            if regs.get(reg) != value:
                return False
        read = window.read_word
        for addr, value in self.words:
            if read(addr) != value:
                return False
        return all(read(addr) is None for addr in self.outside)


class WalkMemo:
    def __init__(self) -> None:
        self._walks: dict[_Key, list[_Entry]] = {}
        self._size = 0
        self.hits = 0
        self.misses = 0

    def rest(self, state: UnwindState, modules: ProcessModules, window: StackWindow,
             arch: ArchSpec, mode: str, frames_left: int,
             walk: Walk) -> tuple[tuple[int, ...], str, bool]:
        """The addresses from `state` on, the stop reason and whether the JIT lookup was
        asked, as `walk` would give. (A hit compares each value the walk used with the
        state's and the window's: where those are watched themselves, as in
        walk_template.py, the comparison notes them as used.)"""
        sp = state.regs.get(arch.sp)
        if sp is None:
            return walk(state, window)
        key = (id(modules), mode, frames_left, state.pc, sp)
        entries = self._walks.get(key)
        if entries is not None:
            for entry in entries:
                if entry.modules is modules and entry.holds(state.regs, window):
                    self.hits += 1
                    return entry.addrs, entry.stop, False
        self.misses += 1
        seen = _Reads()
        watched_regs = {reg: (value if reg == arch.sp else _Watched(value, seen, reg, None))
                        for reg, value in state.regs.items()}
        # (the steps take any object with the window's members)
        addrs, stop, asked_jit = walk(UnwindState(state.pc, watched_regs, state.first),
                                      cast(StackWindow, _WatchedWindow(window, seen)))
        addrs = tuple(int(a) for a in addrs)
        if not asked_jit:
            self._keep(key, _Entry(modules, tuple(seen.regs.items()),
                                   tuple(seen.words.items()), tuple(seen.outside),
                                   seen.low, seen.high, addrs, stop))
        return addrs, stop, asked_jit

    def _keep(self, key: _Key, entry: _Entry) -> None:
        if self._size >= MAX_ENTRIES:
            self._walks.clear()
            self._size = 0
        entries = self._walks.setdefault(key, [])
        entries.insert(0, entry)
        self._size += 1
        if len(entries) > PER_KEY:
            entries.pop()
            self._size -= 1


class _Reads:
    """What one watched walk depended on."""

    def __init__(self) -> None:
        self.regs: dict[int, int] = {}
        self.words: dict[int, int] = {}
        self.outside: list[int] = []
        self.low = 0
        self.high = 0

    def read(self, addr: int, size: int) -> None:
        if not self.high or addr < self.low:
            self.low = addr
        self.high = max(self.high, addr + size)


class _WatchedWindow:
    """A StackWindow whose words are watched (see the module docstring)."""

    def __init__(self, window: StackWindow, seen: _Reads) -> None:
        self._window = window
        self._seen = seen
        self.base = window.base
        self.data = window.data
        self.word = window.word
        self.little_endian = window.little_endian

    @property
    def end(self) -> int:
        return self._window.end

    def contains(self, addr: int, size: int | None = None) -> bool:
        raise NotImplementedError("a step asked contains(): watch it too")

    def read_word(self, addr: int) -> int | None:
        addr = int(addr)  # (an address computed from a watched value noted it already)
        value = self._window.read_word(addr)
        if value is None:
            self._seen.outside.append(addr)
            return None
        self._seen.read(addr, self.word)
        return _Watched(value, self._seen, None, addr)


class _Watched(int):
    """An int that notes, once, that the walk used it (see the module docstring)."""

    _seen: _Reads
    _reg: int | None
    _addr: int | None

    def __new__(cls, value: int, seen: _Reads, reg: int | None,
                addr: int | None) -> _Watched:
        self = super().__new__(cls, value)
        self._seen, self._reg, self._addr = seen, reg, addr
        return self

    def _note(self) -> int:
        value = int.__int__(self)
        if self._reg is not None:
            self._seen.regs[self._reg] = value
        else:
            assert self._addr is not None
            self._seen.words[self._addr] = value
        return value


def _plain(x: Any) -> Any:
    return x._note() if isinstance(x, _Watched) else x


def _watching(name: str) -> Callable[..., Any]:
    method = getattr(int, name)

    def watched(self: _Watched, *args: Any) -> Any:
        return method(self._note(), *map(_plain, args))

    watched.__name__ = name
    return watched


# every use of an int's value; `is`, `is None` and being stored are no use
for _name in ("__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__",
              "__and__", "__rand__", "__or__", "__ror__", "__xor__", "__rxor__",
              "__mod__", "__rmod__", "__floordiv__", "__rfloordiv__", "__truediv__",
              "__rtruediv__", "__divmod__", "__rdivmod__", "__pow__", "__rpow__",
              "__lshift__", "__rlshift__", "__rshift__", "__rrshift__", "__neg__",
              "__pos__", "__abs__", "__invert__", "__lt__", "__le__", "__gt__", "__ge__",
              "__eq__", "__ne__", "__hash__", "__bool__", "__index__", "__int__",
              "__float__", "__trunc__", "__floor__", "__ceil__", "__round__",
              "__format__", "__repr__", "__str__", "to_bytes", "bit_length"):
    setattr(_Watched, _name, _watching(_name))
