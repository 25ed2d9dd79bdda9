"""Command lines of traced processes, read once per pid and kept after the process exits
(a table keyed by `pid` shows them, like ps; a process that ran for a moment is still
named in the interval that counted it, if it was alive when the interval was read).

`/proc/PID/cmdline` holds the arguments NUL-separated; they are joined with spaces
(a trailing NUL dropped). An empty one (a kernel thread, or a zombie whose memory is
gone) gives ``[comm]``, as ps shows it. A pid without /proc entry gives None, kept too:
a pid is reused only after the kernel wraps around pid_max, far longer than a run's
intervals mostly last, so that is accepted rather than re-read each interval.
"""

from __future__ import annotations

from collections.abc import Callable

MAX_LEN = 4096  # the kernel gives one page of arguments; a table shows far less


def read_cmdline(pid: int, proc: str = "/proc") -> str | None:
    try:
        with open(f"{proc}/{pid}/cmdline", "rb") as fh:
            raw = fh.read(MAX_LEN)
    except OSError:
        return None
    text = raw.rstrip(b"\0").replace(b"\0", b" ").decode("utf-8", "backslashreplace")
    if text:
        return text
    try:
        with open(f"{proc}/{pid}/comm", "rb") as fh:
            comm = fh.read().strip().decode("utf-8", "backslashreplace")
    except OSError:
        return None
    return f"[{comm}]"


class Cmdlines:
    """pid -> command line, each read once (`read` is for tests)."""

    def __init__(self, read: Callable[[int], str | None] = read_cmdline) -> None:
        self._read = read
        self._known: dict[int, str | None] = {}

    def __call__(self, pid: int) -> str | None:
        if pid not in self._known:
            self._known[pid] = self._read(pid)
        return self._known[pid]
