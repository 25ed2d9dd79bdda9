"""What a session does besides reading records, once at start and once per loop turn:
semaphores raised by hand (poke mode), libraries the --pid process maps late, and the
test hook that simulates a crash inside planrunner.

Test hook: PLANRUNNER_TEST_CRASH_AFTER_ATTACH=SECONDS makes the loop raise RuntimeError
that long after everything is attached (0 = on the first turn). It exists so tests can
prove that a crash still detaches every probe and restores every semaphore; it does
nothing when unset.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from typing import TextIO

from planrunner.render.model import AttachSite
from planrunner.runtime.late_libraries import DevIno, MapsWatcher, file_key
from planrunner.runtime.semaphores import Poker, recover_stale

CRASH_ENV = "PLANRUNNER_TEST_CRASH_AFTER_ATTACH"


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
        self._crash_at: float | None = None
        self._seen_at_start: set[DevIno] = set()

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
        delay = os.environ.get(CRASH_ENV)
        if delay:
            self._crash_at = time.monotonic() + float(delay)

    def turn(self) -> None:
        if self._crash_at is not None and time.monotonic() >= self._crash_at:
            raise RuntimeError(f"simulated crash inside the loop ({CRASH_ENV} test hook)")
        if self.watcher is None:
            return
        for m in self.watcher.poll():
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
        if self.poker is not None:
            self.poker.restore()


def recover(stderr: TextIO) -> None:
    """Undo what a crashed poke-mode run left raised (see runtime/semaphores.py)."""
    lowered = recover_stale()
    if lowered:
        stderr.write(f"restored {lowered} semaphore{'s' if lowered != 1 else ''} a previous "
                     "planrunner run left raised\n")


class Turns:
    """The backend as the session loop sees it: each poll first does a turn of upkeep."""

    def __init__(self, prog: object, upkeep: Upkeep) -> None:
        self._prog = prog
        self._upkeep = upkeep
        self._detached = False

    def poll(self, timeout_ms: int) -> object:
        if not self._detached:
            self._upkeep.turn()
        return self._prog.poll(timeout_ms)  # type: ignore[attr-defined]

    def detach_all(self) -> None:
        """Semaphores raised by hand go down while the probes are still on (no hit is
        missed), then every probe goes; what fired is all in the ring buffer then."""
        self._detached = True
        try:
            self._upkeep.finish()
        finally:
            self._prog.detach_all()  # type: ignore[attr-defined]

    def __getattr__(self, name: str) -> object:
        return getattr(self._prog, name)
