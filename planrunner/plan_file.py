"""The bytes of a plan file, read once and bounded: `run` keys its cache on them and
hands the same bytes to the loader (a plan read twice could differ between the reads).
Outside plan/, whose package imports the plan model: a warm run reads the plan without it.

Only a regular file is a plan: a FIFO would block open() until a writer comes (and give
its bytes once), /dev/zero never ends; they are refused unopened (NotAPlanFile)."""

from __future__ import annotations

import os
import stat

MAX_PLAN_BYTES = 2 * 1024 * 1024

_KINDS = ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"),
          (stat.S_ISDIR, "a directory"))


class PlanTooLarge(Exception):
    pass


class NotAPlanFile(Exception):
    """`path` is no regular file; args: (path, what it is: "a FIFO (named pipe)", ...)."""


def read_plan_bytes(path: str) -> bytes:
    """The bytes of `path`, at most MAX_PLAN_BYTES + 1 of them ever read; PlanTooLarge
    when over MAX_PLAN_BYTES (a sparse 3 GB file is not read at all), NotAPlanFile when
    `path` (after symlinks) is no regular file. OSError passes through."""
    _check_kind(path, os.stat(path))
    # O_NONBLOCK: should a FIFO replace the file after the stat, open() must not wait
    # for a writer; the fstat below then refuses it. Regular files ignore the flag.
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    with open(fd, "rb") as fh:
        st = os.fstat(fd)
        _check_kind(path, st)
        if st.st_size > MAX_PLAN_BYTES:
            raise PlanTooLarge(path)
        data = fh.read(MAX_PLAN_BYTES + 1)  # /proc files say size 0: read bounded
    if len(data) > MAX_PLAN_BYTES:
        raise PlanTooLarge(path)
    return data


def _check_kind(path: str, st: os.stat_result) -> None:
    if not stat.S_ISREG(st.st_mode):
        raise NotAPlanFile(path, next((name for test, name in _KINDS if test(st.st_mode)),
                                      "not a regular file"))
