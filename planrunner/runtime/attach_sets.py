"""Attaching uprobe sets (render/model.py `AttachSet`): one program at every function
of a set, as one uprobe_multi link per binary, each offset with its attach cookie (the
function's index in `RenderedProgram.func_names`, which the program reads back with
bpf_get_attach_cookie()).

Kept apart from the single-site strategies of attach.py: a set is one attach of many
offsets, not many attaches, and closing its one link takes every function off in one
RCU grace period.

The kernel refuses a whole link when it cannot probe one of its offsets (ENOTSUPP for
an instruction its uprobes cannot single-step: libc's `pthread_spin_lock` starts with
a `lock` prefix): a set over `c:*` would then attach nothing. The offsets are then
split in halves and each half attached alone, down to the single offsets the kernel
refuses, which are left out and named (about 2 * k * log2(n) links tried for k refused
offsets of n: 22 for libc's one of 1,880).

Without uprobe_multi links (Linux < 6.6, or a bcc that cannot load for them) a set is
refused, naming the way out: the fallback, a perf-event uprobe per function with a
BPF cookie on a perf_event link, would attach thousands of events one by one (the
slowness sets exist to remove), for kernels 5.15-6.5 only.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Sequence

from planrunner.errors import BackendError
from planrunner.probe_kinds import site_kind
from planrunner.render.model import AttachSet
from planrunner.runtime.kernel.bpf import (
    BPF_PROG_TYPE_KPROBE,
    BPF_TRACE_UPROBE_MULTI,
    ENOTSUPP,
    uprobe_multi_link,
)
from planrunner.runtime.uprobe_links import close_all

# What the kernel says of an offset it cannot probe: try the others without it.
_REFUSED_ONE = frozenset({ENOTSUPP, errno.EINVAL, errno.EILSEQ})


def no_multi_links(s: AttachSet) -> BackendError:
    return BackendError(
        f"probe set '{s.probe}' ({len(s.file_offsets)} functions) needs uprobe_multi "
        "links, which this kernel (or bcc) lacks", hints=(
            "Linux 6.6 or later attaches a set in one go; here, name the functions one "
            "by one (each is then a probe of its own)",
            "`planrunner doctor` shows what the kernel offers"))


class UprobeSets:
    """Sets as uprobe_multi links: loaded as kprobe programs for that attach type.
    `attach` returns (function, why) of the offsets the kernel would not take."""

    prog_type = BPF_PROG_TYPE_KPROBE
    attach_type: int | None = BPF_TRACE_UPROBE_MULTI

    def __init__(self) -> None:
        self._links: list[int] = []

    def attach(self, prog_fd: int, s: AttachSet, pid: int | None
               ) -> list[tuple[str, str]]:
        everything = list(range(len(s.file_offsets)))
        err = self._link(prog_fd, s, pid, everything)
        if err == 0:
            return []
        if err not in _REFUSED_ONE:
            raise BackendError(
                f"could not attach probe set '{s.probe}' ({len(s.file_offsets)} functions "
                f"of {s.binary.display}): {os.strerror(err) if err else 'error'}")
        refused: list[tuple[int, int]] = []
        self._split(prog_fd, s, pid, everything, err, refused)
        if len(refused) == len(everything):
            first = refused[0][1]
            raise BackendError(
                f"could not attach probe set '{s.probe}' ({len(s.file_offsets)} functions "
                f"of {s.binary.display}): the kernel refused every function "
                f"({_why(first)})")
        return [(s.functions[i], _why(e)) for i, e in refused]

    def _link(self, prog_fd: int, s: AttachSet, pid: int | None,
              which: Sequence[int]) -> int:
        """Attach the offsets `which` as one link; 0, or the kernel's errno."""
        try:
            link = uprobe_multi_link(prog_fd, s.binary.path,
                                     [s.file_offsets[i] for i in which], [0] * len(which),
                                     [s.cookies[i] for i in which],
                                     site_kind(s.kind).returns, pid)
        except OSError as exc:
            return exc.errno or errno.EINVAL
        self._links.append(link)
        return 0

    def _split(self, prog_fd: int, s: AttachSet, pid: int | None, which: list[int],
               why: int, refused: list[tuple[int, int]]) -> None:
        """Attach `which` (refused as a whole, `why`) by halves: (index, errno) of the
        offsets the kernel refuses alone go to `refused`."""
        if len(which) == 1:
            refused.append((which[0], why))
            return
        half = len(which) // 2
        for part in (which[:half], which[half:]):
            err = self._link(prog_fd, s, pid, part)
            if err in _REFUSED_ONE:
                self._split(prog_fd, s, pid, part, err, refused)
            elif err:
                raise BackendError(
                    f"could not attach probe set '{s.probe}' ({len(part)} functions of "
                    f"{s.binary.display}): {os.strerror(err)}")

    def detach_all(self) -> None:
        links, self._links = self._links, []
        close_all(links)


def _why(err: int) -> str:
    if err == ENOTSUPP:
        return "an instruction the kernel's uprobes cannot single-step"
    return os.strerror(err)
