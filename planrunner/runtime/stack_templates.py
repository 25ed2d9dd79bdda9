"""Copy templates in user space (issue 28 item 5; render/stacks.py says what the BPF side
does with them, stacks/walk_template.py what one holds).

`Templates.offer` takes the walks of a copy just unwound, in every mode the program's
keys use, and writes their template into the BPF map when each mode gave one: the words
and frame pointer any of the walks used, under the copy's (tgid, length, ip, sp). Each
template gets an id of its own, which a light copy names. `Templates.walks` gives a
light copy the walks of its template, or None when they no longer hold: the process's
maps changed under a pc the walks went through (its key is then deleted from the BPF
map, so that the next sample sends a full copy again).

A template whose walk's first step holds for a span of pcs (stacks/walk_template.py
first_span) is also written under the key of each page of the span that no other
template holds yet (SPAN_PAGE), with the span's bounds: a sample elsewhere in the span
matches it as well, and sends its own pc with its Python frames.

Each template also has a class (`cls`, render/stacks.py): the id of the first template
of its process whose named frames (`offer`'s `shown`) were the same. BPF hashes a light
copy that has Python frames by its class, so samples of one stack under other
templates are one key, which the reader names once.

A key whose template keeps failing (two paths through one pc and sp, taking turns) is
written at most REWRITES times; after that its samples stay full copies.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from planrunner.render.contracts import (
    SPAN_PAGE,
    SPAN_PAGE_SHIFT,
    TEMPLATE_WORDS,
    UTMPL_KEY,
    UTMPL_VAL,
)
from planrunner.stacks.modules import ProcessModules
from planrunner.stacks.state import Unwound
from planrunner.stacks.walk_template import WalkTemplate

REWRITES = 4
# Templates remembered by id; past this all are forgotten (and deleted from the map).
KEPT = 1 << 14

_Key = tuple[int, int, int, int]  # pid, len, ip, sp
CLASSES_KEPT = 1 << 14
SPAN_PAGES = 8  # pages a span is written under at most, either side of its pc's


class TemplateSink(Protocol):
    def update_map(self, map_name: str, key: bytes, value: bytes) -> None: ...

    def delete_key(self, map_name: str, key: bytes) -> None: ...


@dataclass(slots=True)
class Template:
    """One template's walks (by mode) over the maps they were walked with."""

    tid: int
    key: _Key
    modules: ProcessModules
    walks: dict[str, Unwound]
    pages: tuple[_Key, ...] = ()  # the keys of its span's pages it was written under


class Templates:
    def __init__(self, sink: TemplateSink, map_name: str) -> None:
        self._sink = sink
        self._map = map_name
        self._next_id = 1
        self._by_id: dict[int, Template] = {}
        self._live: dict[_Key, int] = {}  # key -> the id the BPF map holds under it
        self._writes: dict[_Key, int] = {}
        self._classes: dict[tuple[int, object], int] = {}  # (pid, shown frames) -> id
        self.written = 0
        self.stale = 0

    def offer(self, modules: ProcessModules,
              walks: dict[str, tuple[Unwound, WalkTemplate | None]], shown: object,
              span: tuple[int, int] | None = None, hidden: bool = False) -> None:
        """The walks of one copy, in each mode the keys use; what its frames show when
        Python frames are merged in, as a hashable value; the pcs its walks hold for and
        whether Python frames hide its pc (see the module docstring)."""
        made = [t for _, t in walks.values() if t is not None]
        if not made or len(made) < len(walks):  # a mode gave none
            return
        first = made[0]
        key = (first.pid, first.length, first.pc, first.sp)
        if self._writes.get(key, 0) >= REWRITES:
            return
        words: dict[int, int] = {}
        fp: int | None = None
        for t in made:
            words.update(t.words)
            fp = t.fp if t.fp is not None else fp
        if len(words) > TEMPLATE_WORDS:
            return
        if len(self._by_id) >= KEPT:
            self._forget_all()
        tid = self._next_id
        self._next_id += 1
        if len(self._classes) >= CLASSES_KEPT:  # ids are never reused: no key is wrong
            self._classes.clear()
        cls = self._classes.setdefault((first.pid, shown), tid)
        offs = sorted(words)
        pad = [0] * (TEMPLATE_WORDS - len(offs))

        def value(lo: int, hi: int) -> bytes:
            return UTMPL_VAL.pack(tid, cls, fp or 0, lo, hi, int(fp is not None), len(offs),
                                  int(hidden), *[words[o] for o in offs], *pad, *offs, *pad)

        self._sink.update_map(self._map, UTMPL_KEY.pack(*key), value(first.pc, first.pc + 1))
        self._live[key] = tid
        pages = []
        near = _near(span, first.pc)
        if near is not None:
            lo, hi = near
            for page in range(lo >> SPAN_PAGE_SHIFT, ((hi - 1) >> SPAN_PAGE_SHIFT) + 1):
                pkey = (first.pid, first.length, SPAN_PAGE | page, first.sp)
                if pkey not in self._live:
                    self._sink.update_map(self._map, UTMPL_KEY.pack(*pkey), value(lo, hi))
                    self._live[pkey] = tid
                    pages.append(pkey)
        self._by_id[tid] = Template(tid, key, modules, {m: w for m, (w, _) in walks.items()},
                                    tuple(pages))
        self._writes[key] = self._writes.get(key, 0) + 1
        self.written += 1

    def walks(self, tid: int, modules: ProcessModules | None) -> dict[str, Unwound] | None:
        """The walks of template `tid` for a light copy over `modules` (its process's
        maps at its time), or None: no such template, or the maps changed under it."""
        t = self._by_id.get(tid)
        if t is None:
            return None
        if modules is not t.modules:
            if modules is None or not _same_code(t, modules):
                self._drop(t)
                return None
            t.modules = modules  # other mappings changed: the walks still hold
        return t.walks

    def _drop(self, t: Template) -> None:
        self.stale += 1
        del self._by_id[t.tid]
        for key in (t.key, *t.pages):
            if self._live.get(key) == t.tid:
                del self._live[key]
                self._sink.delete_key(self._map, UTMPL_KEY.pack(*key))

    def _forget_all(self) -> None:
        for key in self._live:
            self._sink.delete_key(self._map, UTMPL_KEY.pack(*key))
        self._live.clear()
        self._by_id.clear()


def _near(span: tuple[int, int] | None, pc: int) -> tuple[int, int] | None:
    """The part of `span` (holding `pc`) written under its pages: SPAN_PAGES either side
    of pc's; None when there is no span, or it is pc alone."""
    if span is None or not span[0] <= pc < span[1] or span[1] - span[0] <= 1:
        return None
    near = (pc >> SPAN_PAGE_SHIFT) - SPAN_PAGES
    return (max(span[0], near << SPAN_PAGE_SHIFT),
            min(span[1], (near + 2 * SPAN_PAGES + 1) << SPAN_PAGE_SHIFT))


def _same_code(t: Template, modules: ProcessModules) -> bool:
    """Whether every pc the walks went through lies in the same mapping in both maps
    (each step looks up its pc, or the return address less one)."""
    old = t.modules
    for walk in t.walks.values():
        for addr in walk.addrs:
            for a in (addr, addr - 1):
                if old.find(a) != modules.find(a):
                    return False
    return True
