"""What a session does besides reading records, once at start (`start`), once per loop
turn (`turn`, an explicit step of runtime/session.py's loop) and at the end (`finish`):
semaphores raised by hand (poke mode) and libraries the --pid process maps late.

Imports render/model.py and runtime/ modules only.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TextIO

from planrunner.render.model import AttachSite
from planrunner.runtime.late_libraries import DevIno, MapsWatcher, file_key
from planrunner.runtime.semaphores import Poker, recover_stale


class Upkeep:
    def __init__(self, sites: Iterable[AttachSite], pid: int | None, mode: str,
                 stderr: TextIO, announce: bool) -> None:
        self.pid = pid
        self.stderr = stderr
        self.announce = announce  # --pid: say when a plan library is mapped late
        self.names: dict[DevIno, str] = {}
        self.site_count: dict[DevIno, int] = {}
        self.semaphores: dict[DevIno, set[int]] = {}
        for site in sites:
            if site.binary is None:
                continue
            key = file_key(site.binary.path)
            if key is None:
                continue
            self.names[key] = site.binary.display
            self.site_count[key] = self.site_count.get(key, 0) + 1
            if site.ref_ctr_offset:
                self.semaphores.setdefault(key, set()).add(site.ref_ctr_offset)
        self.poker = Poker(pid) if mode == "poke" and pid and self.semaphores else None
        self.unraised = mode == "poke" and not pid and bool(self.semaphores)
        self.watcher = MapsWatcher(pid, self.names) if pid and self.names else None
        self._seen_at_start: set[DevIno] = set()
        # the plan's binaries the process was seen mapping (runtime/silence.py), counted
        # once it is the traced program: a -c command after its exec (`counting` set by
        # the session then), not the copy of planrunner before it
        self.counting = pid is not None and announce
        self.mapped_ever: set[DevIno] = set()
        self.looked = False  # its maps were read at least once while counting

    def start(self) -> None:
        """After attaching, before a -c child runs: raise what is mapped now."""
        if self.unraised:
            self.stderr.write(
                "warning: this kernel has no uprobe reference counters: probes gated by "
                "a semaphore fire only where something raises it; use --pid PID to have "
                "planrunner raise it in that process\n")
        if self.watcher is not None:
            for m in self.watcher.poll():
                self._seen_at_start.add(m.key)
                self._raise(m.key)

    def turn(self) -> None:
        if self.watcher is None:
            return
        new = self.watcher.poll()
        if self.counting and self.watcher.readable:
            self.looked = True
            self.mapped_ever |= self.watcher.mapped()
        for m in new:
            raised = self._raise(m.key)
            if self.announce and m.key not in self._seen_at_start:
                n = self.site_count[m.key]
                extra = f", {raised} semaphore{'s' if raised != 1 else ''} raised" \
                    if raised else ""
                self.stderr.write(f"{m.display} mapped by process {self.pid} at "
                                  f"{m.start:#x}: {n} probe site{'s' if n != 1 else ''} "
                                  f"active{extra}\n")
                self.stderr.flush()

    def _raise(self, key: DevIno) -> int:
        if self.poker is None or key not in self.semaphores:
            return 0
        return self.poker.raise_sites((key, off) for off in sorted(self.semaphores[key]))

    def finish(self) -> None:
        """Lower what was raised by hand (idempotent). Call it while the probes are
        still on, so that no hit in between is missed."""
        if self.poker is not None:
            self.poker.restore()


def recover(stderr: TextIO) -> None:
    """Undo what a crashed poke-mode run left raised (see runtime/semaphores.py)."""
    lowered = recover_stale()
    if lowered:
        stderr.write(f"restored {lowered} semaphore{'s' if lowered != 1 else ''} a previous "
                     "planrunner run left raised\n")
