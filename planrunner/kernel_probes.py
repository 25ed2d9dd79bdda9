"""Kernel function probes (kprobe, kretprobe, fentry, fexit): not offered, and why.

planrunner traces user space (usdt, uprobe, uretprobe) and kernel tracepoints. A plan or
a `list` pattern naming a kernel function probe gets this answer instead of a
did-you-mean towards 'uprobe', with what to use instead and, when tracefs shows it,
that this kernel has no kprobes at all.
"""

from __future__ import annotations

KINDS = ("kprobe", "kretprobe", "fentry", "fexit", "kfunc", "kretfunc")
PREFIXES = tuple(f"{kind}:" for kind in KINDS)  # as typed to `list` or `new`


def kernel_function_message(kind: str, kprobes: bool | None = None
                            ) -> tuple[str, tuple[str, ...]]:
    """(message, hints) for a `kind` probe; `kprobes` None: look at tracefs."""
    if kprobes is None:
        from planrunner.tracefs import find_root, has_kprobes

        kprobes = has_kprobes(find_root())
    message = (f"'{kind}' probes (kernel functions) are not offered: planrunner traces "
               "user space (usdt, uprobe, uretprobe) and kernel tracepoints")
    hints = []
    if not kprobes:
        hints.append("this kernel has no kprobes either (no kprobe_events in tracefs: "
                     "CONFIG_KPROBE_EVENTS is off)")
    hints.append("for a kernel event use a tracepoint, e.g. tracepoint: "
                 "syscalls:sys_enter_openat (`planrunner list --tracepoints 'syscalls:*'`)")
    hints.append("for a function of a program or library use uprobe: TARGET:SYMBOL")
    return message, tuple(hints)
