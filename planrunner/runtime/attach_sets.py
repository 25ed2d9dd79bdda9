"""Attaching uprobe sets (render/model.py `AttachSet`): one program at every function
of a set, as one uprobe_multi link per binary, each offset with its attach cookie (the
function's index in `RenderedProgram.func_names`, which the program reads back with
bpf_get_attach_cookie()).

Kept apart from the single-site strategies of attach.py: a set is one attach of many
offsets, not many attaches, and closing its one link takes every function off in one
RCU grace period (~0.1 s for 2,000 functions, where 2,000 perf events took seconds).

Without uprobe_multi links (Linux < 6.6, or a bcc that cannot load for them) a set is
refused, naming the way out: the fallback, a perf-event uprobe per function with a
BPF cookie on a perf_event link, would attach thousands of events one by one (the
slowness sets exist to remove) for kernels 5.15-6.5 only.
"""

from __future__ import annotations

import os

from planrunner.errors import BackendError
from planrunner.render.model import AttachSet
from planrunner.runtime.uprobe_links import BPF_TRACE_UPROBE_MULTI, close_all, create_multi_link


def no_multi_links(s: AttachSet) -> BackendError:
    return BackendError(
        f"probe set '{s.probe}' ({len(s.file_offsets)} functions) needs uprobe_multi "
        "links, which this kernel (or bcc) lacks", hints=(
            "Linux 6.6 or later attaches a set in one go; here, name the functions one "
            "by one (each is then a probe of its own)",
            "`planrunner doctor` shows what the kernel offers"))


class UprobeSets:
    """Sets as uprobe_multi links: loaded as kprobe programs for that attach type."""

    prog_kind = "kprobe"
    attach_type: int | None = BPF_TRACE_UPROBE_MULTI

    def __init__(self) -> None:
        self._links: list[int] = []

    def attach(self, prog_fd: int, s: AttachSet, pid: int | None) -> None:
        link, err = create_multi_link(prog_fd, s.binary.path, s.file_offsets,
                                      [0] * len(s.file_offsets), s.cookies,
                                      s.kind == "uretprobe", pid)
        if link < 0:
            raise BackendError(
                f"could not attach probe set '{s.probe}' ({len(s.file_offsets)} functions "
                f"of {s.binary.display}): {os.strerror(err) if err else 'error'}")
        self._links.append(link)

    def detach_all(self) -> None:
        links, self._links = self._links, []
        close_all(links)
