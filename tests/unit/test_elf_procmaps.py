"""elf/procmaps.py: the maps parser on captured text, and this process's own objects."""

from __future__ import annotations

import os
import sys

import pytest

from planrunner.elf.procmaps import MappedObject, executable_objects, host_prefix, parse_maps
from planrunner.errors import ResolveError

MAPS = """\
55d0c6a00000-55d0c6a28000 r--p 00000000 fd:01 1835017                    /usr/bin/python3.11
55d0c6a28000-55d0c6cdb000 r-xp 00028000 fd:01 1835017                    /usr/bin/python3.11
7f1b2c000000-7f1b2c021000 rw-p 00000000 00:00 0
7f1b2d5a6000-7f1b2d6fb000 r-xp 00026000 103:02 2621475   /usr/lib/x86_64-linux-gnu/libc.so.6
7f1b2d800000-7f1b2d801000 r-xp 00000000 00:1f 77     /tmp/my lib (x).so (deleted)
7ffd1e3f2000-7ffd1e413000 rw-p 00000000 00:00 0                          [stack]
ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0                  [vsyscall]
"""


def test_parse_maps_fields() -> None:
    maps = parse_maps(MAPS)
    assert len(maps) == 7
    assert maps[1] == MappedObject("/usr/bin/python3.11", 0x55D0C6A28000, 0x55D0C6CDB000,
                                   0x28000, "r-xp", "fd:01", 1835017)
    assert maps[1].executable and not maps[0].executable
    assert maps[2].path == "" and maps[2].inode == 0
    assert maps[3].dev == "103:02" and maps[3].offset == 0x26000
    assert maps[5].path == "[stack]"


def test_paths_with_spaces_and_deleted_files() -> None:
    deleted = parse_maps(MAPS)[4]
    assert deleted.path == "/tmp/my lib (x).so"
    assert deleted.deleted


def test_malformed_line_raises() -> None:
    with pytest.raises(ValueError, match="malformed"):
        parse_maps("55d0c6a00000-55d0c6a28000 r--p\n")


def test_own_process_has_python_and_libc_mapped() -> None:
    objs = executable_objects(os.getpid())
    assert os.path.realpath(sys.executable) in {os.path.realpath(p) for p in objs}
    assert any(os.path.basename(p).startswith("libc.so") for p in objs)
    assert len(objs) == len(set(objs))
    assert all(not p.startswith("[") for p in objs)


def test_same_mount_namespace_needs_no_prefix() -> None:
    assert host_prefix(os.getpid()) == ""


def test_unknown_pid_is_a_resolve_error() -> None:
    with open("/proc/sys/kernel/pid_max") as fh:
        pid = int(fh.read()) + 1  # above pid_max: never a live process
    with pytest.raises(ResolveError, match=f"no process with pid {pid}"):
        executable_objects(pid)
