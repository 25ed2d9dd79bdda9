"""Whether every --pid process has ended, asked on every loop turn (runtime/session.py):
a pidfd each, polled without waiting (it is readable once its process has exited, a
zombie included), instead of reading /proc/PID/stat every turn (~5% of a profile
run's loop on one process, issue 28 item 5). Where pidfd_open is refused (a kernel
before 5.3, a seccomp filter) the process's stat is read as before; a process already
gone when the watch begins has ended."""

from __future__ import annotations

import errno
import os
import select
from collections.abc import Sequence

from planrunner.elf.procmaps import stat_fields


def alive(pid: int) -> bool:
    """The process exists and is not a zombie (an unreaped child still has /proc/PID)."""
    fields = stat_fields(pid)
    return fields is not None and bool(fields) and fields[0] not in (b"Z", b"X")


class ExitWatch:
    def __init__(self, pids: Sequence[int]) -> None:
        self._poller = select.poll()
        self._fds: dict[int, int] = {}  # pidfd -> pid
        self._by_stat: list[int] = []
        for pid in pids:
            try:
                fd = os.pidfd_open(pid)
            except OSError as exc:
                if exc.errno != errno.ESRCH:  # (ESRCH: gone already)
                    self._by_stat.append(pid)
                continue
            self._fds[fd] = pid
            self._poller.register(fd, select.POLLIN)

    def all_ended(self) -> bool:
        if self._fds:
            for fd, _events in self._poller.poll(0):
                self._poller.unregister(fd)
                os.close(fd)
                del self._fds[fd]
        if self._by_stat:
            self._by_stat = [p for p in self._by_stat if alive(p)]
        return not self._fds and not self._by_stat

    def fds(self) -> list[int]:
        """The pidfds still open (readable when their process ends)."""
        return list(self._fds)

    @property
    def looks_at_stat(self) -> bool:
        """Some process has no pidfd: its end is seen only by looking."""
        return bool(self._by_stat)

    def close(self) -> None:
        for fd in self._fds:
            os.close(fd)
        self._fds.clear()
