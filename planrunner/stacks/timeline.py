"""Every process's executable mappings over time, from the kernel's mmap, exec, fork
and exit records (runtime/task_events.py reads them), as `perf` keeps them.

A process's history is a list of *images*: one begins at a fork (the parent's mappings
at that time, inherited) or an exec (none: the new program maps its own), and lasts
until the next image of the same pid begins; mmap records add mappings to the current
image, a later mapping over an earlier range hiding it. `modules(pid, time)` is the
image current at `time` with the mappings made by then, as a `ProcessModules` (for a
stack without a time, `modules_holding(pid, addrs)`: the image holding them): a stack
is unwound over the maps it ran with, even after its process has exited, exec'd or
unloaded a library, and never over another process that reused its pid (a new pid
life begins with a fork record).

A forked child shares what it inherited with its siblings: the children forked between
two of a parent's mmaps (a postmaster's backends, php-fpm's workers) hold one tuple of
mappings and one ProcessModules between them, not a copy each.

An image is *known* when it began with a fork of a known image, with an exec after
tracing started, or was seeded from /proc/PID/maps when tracing began (`seed`); the
images of processes first seen through a bare mmap are not, nor any image current when
the kernel dropped records (its ring was full): `modules` returns None for those and
the reader falls back on the /proc snapshot (modules.ProcessRegistry) for them, until
the processes are read from /proc again after the loss (`reseed`). Images that
ended more than `keep_ns` before the newest record are forgotten (a late stack of one
is then unwound from the fallback).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from planrunner.elf.procmaps import MappedObject
from planrunner.stacks.modules import ProcessModules, build_modules

PROT_READ, PROT_WRITE, PROT_EXEC = 1, 2, 4
KEEP_NS = 60_000_000_000


@dataclass(frozen=True, slots=True)
class Mmap:
    """One PERF_RECORD_MMAP2 (an executable mapping)."""

    start: int
    end: int
    pgoff: int
    prot: int
    dev: int  # os.makedev(major, minor)
    inode: int
    path: str

    def as_mapped_object(self) -> MappedObject:
        perms = "".join(c if self.prot & bit else "-" for c, bit in
                        (("r", PROT_READ), ("w", PROT_WRITE), ("x", PROT_EXEC))) + "p"
        major, minor = os.major(self.dev), os.minor(self.dev)
        return MappedObject(self.path, self.start, self.end, self.pgoff, perms,
                            f"{major:x}:{minor:x}", self.inode)


@dataclass(eq=False, slots=True)
class _Inherited:
    """Mappings a process began with (a parent's at the fork, or /proc's when tracing
    began), shared by every image that began with them: a postmaster's hundred
    backends, forked while it mapped nothing new, hold one tuple and one ProcessModules."""

    maps: tuple[Mmap, ...]
    built: ProcessModules | None = None  # without a pid: no one process's


_NOTHING = _Inherited(())


@dataclass(slots=True)
class _Image:
    """One process image (from exec or fork to exit or exec) and its mmaps over time."""

    begin: int  # ns; 0 for an image already running when tracing began
    known: bool
    inherited: _Inherited = _NOTHING
    maps: list[tuple[int, Mmap]] = field(default_factory=list)  # its own (time, mmap)
    ended: int | None = None  # ns of the exit or exec that ended it
    _built: dict[int, ProcessModules] = field(default_factory=dict)  # n own -> modules
    _handed: dict[int, _Inherited] = field(default_factory=dict)  # n own -> to children

    def own_by(self, time: int) -> int:
        """How many of its own mappings were made by `time` (they are in time order)."""
        return sum(1 for t, _ in self.maps if t <= time)

    def handed(self, n: int) -> _Inherited:
        """Its mappings with the first `n` of its own, for a child forked then (one
        value for every child forked between the same two mmaps)."""
        if n == 0:
            return self.inherited
        got = self._handed.get(n)
        if got is None:
            got = self._handed[n] = _Inherited(
                self.inherited.maps + tuple(m for _, m in self.maps[:n]))
        return got


class MapsTimeline:
    """See the module docstring."""

    def __init__(self, keep_ns: int = KEEP_NS) -> None:
        self.keep_ns = keep_ns
        self._images: dict[int, list[_Image]] = {}
        self._newest = 0

    # -- records, in time order ---------------------------------------------------------

    def fork(self, pid: int, ppid: int, time: int) -> None:
        parent = self._current(ppid)
        if parent is None:  # never seen: a child of an unknown image is unknown
            self._begin(pid, _Image(time, False))
        else:
            self._begin(pid, _Image(time, parent.known, parent.handed(parent.own_by(time))))

    def exec(self, pid: int, time: int) -> None:
        self._begin(pid, _Image(time, True))

    def seed(self, pid: int, maps: Sequence[Mmap]) -> None:
        """A process running when tracing began, with the mappings /proc/PID/maps showed
        then (read after the records were enabled, as perf synthesizes them): known from
        the start; later records apply on top."""
        if pid not in self._images:
            self._images[pid] = [_Image(0, True, _Inherited(tuple(maps)))]

    def reseed(self, pid: int, maps: Sequence[Mmap], time: int) -> None:
        """After records were lost (`unsure`): `pid`'s mappings as /proc/PID/maps showed
        them at `time` (read after every record older than `time` was applied), a known
        image from then on, so that it and the children it forks later are known again;
        an image known already (begun by an exec or fork since the loss) is kept."""
        image = self._current(pid)
        if image is None or not image.known:
            self._begin(pid, _Image(time, True, _Inherited(tuple(maps))))

    def mmap(self, pid: int, time: int, m: Mmap) -> None:
        self._tick(time)
        image = self._current(pid)
        if image is None:  # a process running since before tracing began
            image = _Image(0, False)
            self._images[pid] = [image]
        image.maps.append((time, m))

    def exit(self, pid: int, time: int) -> None:
        self._tick(time)
        image = self._current(pid)
        if image is not None and image.ended is None:
            image.ended = time

    def unsure(self, time: int) -> None:
        """The kernel dropped records before `time`: no current image is known whole."""
        for images in self._images.values():
            if images[-1].ended is None:
                images[-1].known = False

    # -- queries ------------------------------------------------------------------------

    def modules(self, pid: int, time: int) -> ProcessModules | None:
        """The maps of `pid` at `time` (ns, CLOCK_MONOTONIC), None when not known."""
        image = None
        for candidate in self._images.get(pid, ()):
            if candidate.begin <= time:
                image = candidate
        if image is None or not image.known:
            return None
        return self._build(pid, image, image.own_by(time))

    def modules_holding(self, pid: int, addrs: Sequence[int]) -> ProcessModules | None:
        """For a stack without a time (an aggregation key): the newest known image of
        `pid` whose mappings hold the most of `addrs` (all of them, normally); None when
        no known image holds any."""
        best, best_hits = None, 0
        for image in reversed(self._images.get(pid, ())):
            if not image.known:
                continue
            modules = self._build(pid, image, len(image.maps))
            hits = sum(1 for a in addrs if modules.find(a) is not None)
            if hits == len(addrs) and addrs:
                return modules
            if hits > best_hits:
                best, best_hits = modules, hits
        return best

    def knows(self, pid: int) -> bool:
        """The current image of `pid` is known (see the module docstring)."""
        image = self._current(pid)
        return image is not None and image.known

    # -- internals ----------------------------------------------------------------------

    @staticmethod
    def _build(pid: int, image: _Image, n: int) -> ProcessModules:
        """The image's inherited mappings and its first `n` own as ProcessModules
        (cached; with none of its own, the ones its siblings share)."""
        if n == 0:
            shared = image.inherited
            if shared.built is None:
                shared.built = build_modules(_visible(list(shared.maps)))
            return shared.built
        built = image._built.get(n)
        if built is None:
            own = [m for _, m in image.maps[:n]]
            built = build_modules(_visible([*image.inherited.maps, *own]), pid)
            image._built[n] = built
        return built

    def _current(self, pid: int) -> _Image | None:
        images = self._images.get(pid)
        return images[-1] if images else None

    def _begin(self, pid: int, image: _Image) -> None:
        self._tick(image.begin)
        images = self._images.setdefault(pid, [])
        if images and images[-1].ended is None:
            images[-1].ended = image.begin
        images.append(image)

    def _tick(self, time: int) -> None:
        """Forget images that ended long before the newest record."""
        if time - self._newest < self.keep_ns // 4:
            return
        self._newest = time
        horizon = time - self.keep_ns
        for pid in list(self._images):
            kept = [i for i in self._images[pid] if i.ended is None or i.ended >= horizon]
            if kept:
                self._images[pid] = kept
            else:
                del self._images[pid]


def _visible(maps: list[Mmap]) -> tuple[MappedObject, ...]:
    """What is left of each mapping where no later one covers it (munmap is not
    reported: a mapping stays until something else is mapped there)."""
    out: list[Mmap] = []
    for m in maps:
        kept = []
        for o in out:
            if o.end <= m.start or o.start >= m.end:
                kept.append(o)
                continue
            if o.start < m.start:
                kept.append(replace(o, end=m.start))
            if o.end > m.end:
                kept.append(replace(o, start=m.end, pgoff=o.pgoff + (m.end - o.start)))
        kept.append(m)
        out = kept
    return tuple(o.as_mapped_object() for o in out)
