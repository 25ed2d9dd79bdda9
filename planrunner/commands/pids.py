"""`--pid PID` as an argparse `type=` (`pid_list_arg`: PID[,PID...] for run, validate
and render; `pid_arg`: one, for list).

Refused, as usage errors (argparse exits 2, naming the option):
- 0 and negative numbers: BPF filters and bcc take them as "every process", so a
  typo would trace the whole machine;
- a pid with no process ("no process with pid N");
- a kernel thread (PF_KTHREAD, e.g. 2, kthreadd): it runs no user-space program, so
  nothing could ever fire and the run would silently trace nothing.
"""

from __future__ import annotations

import argparse

PF_KTHREAD = 0x00200000  # include/linux/sched.h
PROC = "/proc"


def pid_arg(text: str) -> int:
    """Parse and check a --pid value; raise argparse.ArgumentTypeError when unusable."""
    try:
        pid = int(text, 10)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a process id") from None
    if pid <= 0:
        raise argparse.ArgumentTypeError(
            f"{pid} is not a process id: give a positive pid (0 and negative numbers "
            "would mean every process)")
    stat = _read_stat(pid)
    if stat is None:
        raise argparse.ArgumentTypeError(f"no process with pid {pid}")
    comm, flags = stat
    if flags & PF_KTHREAD:
        raise argparse.ArgumentTypeError(
            f"pid {pid} ({comm}) is a kernel thread: it runs no user-space program to trace")
    return pid


def _read_stat(pid: int) -> tuple[str, int] | None:
    """(comm, flags) from /proc/PID/stat, or None when there is no such process."""
    try:
        with open(f"{PROC}/{pid}/stat", encoding="utf-8", errors="replace") as fh:
            text = fh.read()
    except (FileNotFoundError, ProcessLookupError):
        return None
    except OSError:  # e.g. /proc hidden (hidepid): let the command say what it can
        return ("?", 0)
    # `pid (comm) state ppid pgrp session tty_nr tpgid flags ...`; comm may hold ')'.
    head, _, tail = text.rpartition(")")
    comm = head.partition("(")[2]
    fields = tail.split()
    try:
        return comm, int(fields[6])
    except (IndexError, ValueError):
        return comm, 0


def pid_list_arg(text: str) -> list[int]:
    """A --pid value: one pid or a comma list (`--pid 12,34`), each checked by pid_arg."""
    parts = [p.strip() for p in text.split(",")]
    if not all(parts):
        raise argparse.ArgumentTypeError(
            f"'{text}' is not a process id or a comma list of them (e.g. --pid 12,34)")
    return [pid_arg(p) for p in parts]
