"""runtime/semaphores.py and runtime/late_libraries.py without the kernel's tracing:
addresses from maps, the poke fallback on a real child process (its memory through
/proc/PID/mem), pid-reuse guard, the crash state file and its recovery, and the maps
watcher that notices late libraries. Also the tracefs format parser and the
/proc/PID/root path resolution the executor relies on."""

from __future__ import annotations

import json
import mmap
import os
import subprocess
import sys
import time

import pytest

from planrunner.elf.procmaps import parse_maps, read_maps, start_time
from planrunner.runtime import semaphores as S
from planrunner.runtime.late_libraries import MapsWatcher, _lowest
from planrunner.targets import _real
from planrunner.tracefs import parse_format

MAPS = """\
55d0c0000000-55d0c0001000 r--p 00000000 fd:01 1234 /opt/app
55d0c0001000-55d0c0002000 r-xp 00001000 fd:01 1234 /opt/app
55d0c0003000-55d0c0005000 rw-p 00002000 fd:01 1234 /opt/app
7f0000000000-7f0000001000 r-xp 00000000 fd:01 999 /opt/libx.so
"""


def test_runtime_address_by_inode_and_file_offset():
    maps = parse_maps(MAPS)
    dev = os.makedev(0xFD, 0x01)
    assert S.runtime_address(maps, (dev, 1234), 0x2010) == 0x55D0C0003010
    assert S.runtime_address(maps, (dev, 1234), 0x1000) == 0x55D0C0001000
    assert S.runtime_address(maps, (dev, 1234), 0x9000) is None
    assert S.runtime_address(maps, (os.makedev(8, 1), 1234), 0x2010) is None  # other dev
    assert S.runtime_address(maps, (dev, 999), 0x10) == 0x7F0000000010


def test_maps_watcher_reports_new_and_remapped_binaries():
    dev = os.makedev(0xFD, 0x01)
    w = MapsWatcher(1, {(dev, 999): "libx.so", (dev, 1234): "app"})
    want = w._want
    assert w._update(_lowest(want, ())) == []
    first = w._update(_lowest(want, parse_maps(MAPS.splitlines()[0] + "\n")))
    assert [(m.display, m.start) for m in first] == [("app", 0x55D0C0000000)]
    second = w._update(_lowest(want, parse_maps(MAPS)))
    assert [(m.display, m.start) for m in second] == [("libx.so", 0x7F0000000000)]
    assert w._update(_lowest(want, parse_maps(MAPS))) == []  # nothing new
    w._update(_lowest(want, parse_maps(MAPS.splitlines()[0] + "\n")))  # dlclose()
    again = w._update(_lowest(want, parse_maps(MAPS)))
    assert [m.display for m in again] == ["libx.so"]  # dlopen() again counts


# A child holding a u16 "semaphore" in a file it maps, as a binary's .probes section is
# (semaphores are always file-backed); prints its address.
CHILD = """
import ctypes, mmap, sys
fh = open(sys.argv[1], "r+b")
mm = mmap.mmap(fh.fileno(), 4096, flags=mmap.MAP_PRIVATE)
sem = ctypes.c_uint16.from_buffer(mm, 0x10)
sem.value = 7
print(ctypes.addressof(sem), flush=True)
sys.stdin.readline()
print(sem.value, flush=True)
"""


@pytest.fixture
def child(tmp_path):
    data = tmp_path / "child-sem.bin"
    data.write_bytes(bytes(4096))
    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(data)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    addr = int(proc.stdout.readline())
    yield proc, addr
    if proc.poll() is None:
        proc.kill()
    proc.wait()


def _needs_mem_access(pid: int) -> None:
    try:
        with open(f"/proc/{pid}/mem", "r+b", buffering=0):
            pass
    except OSError as exc:
        pytest.skip(f"cannot write /proc/PID/mem here: {exc}")


def test_add_and_pid_reuse_guard(child):
    proc, addr = child
    _needs_mem_access(proc.pid)
    start = start_time(proc.pid)
    assert start is not None
    mapping = S.mapping_at(read_maps(proc.pid), addr)
    assert mapping is not None and mapping[1] != 0 and mapping[2] == 0x10
    gen = S.exec_generation(proc.pid)
    assert gen is not None and len(gen) == 32
    assert S._add(proc.pid, start, addr, +1, mapping, gen) == 8
    assert S.read_semaphore(proc.pid, addr) == 8
    assert S._add(proc.pid, start + 1, addr, -1, mapping, gen) is None  # "another" process
    assert S._add(proc.pid, start, addr, -100, mapping, gen) == 0  # clamped at 0
    proc.stdin.write("\n")
    proc.stdin.flush()
    assert proc.stdout.readline().strip() == "0"


def test_state_file_lets_a_later_run_undo_a_crashed_one(child, tmp_path):
    proc, addr = child
    _needs_mem_access(proc.pid)
    start = start_time(proc.pid)
    mapping = S.mapping_at(read_maps(proc.pid), addr)
    gen = S.exec_generation(proc.pid)
    assert S._add(proc.pid, start, addr, +1, mapping, gen) == 8
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True).stdout.strip()
    (tmp_path / f"semaphores-{dead}.json").write_text(json.dumps({
        "owner": int(dead), "owner_start": 1,
        "raised": [{"pid": proc.pid, "start": start, "addr": addr,
                    "mapping": list(mapping), "generation": gen}]}))
    alive = tmp_path / f"semaphores-{proc.pid}.json"  # its owner runs: not touched
    alive.write_text(json.dumps({"owner": proc.pid, "owner_start": start,
                                 "raised": [{"pid": proc.pid, "start": start,
                                             "addr": addr}]}))
    assert S.recover_stale(str(tmp_path)) == 1
    assert S.read_semaphore(proc.pid, addr) == 7
    assert not (tmp_path / f"semaphores-{dead}.json").exists()
    assert alive.exists()


def test_no_write_when_another_file_or_no_identity_is_mapped_there(child):
    """What an exec() looks like from here: same pid and start time, other memory."""
    proc, addr = child
    _needs_mem_access(proc.pid)
    start = start_time(proc.pid)
    dev, ino, off = S.mapping_at(read_maps(proc.pid), addr)
    gen = S.exec_generation(proc.pid)
    assert S._add(proc.pid, start, addr, +1, (dev, ino + 1, off), gen) is None  # other inode
    assert S._add(proc.pid, start, addr, +1, (dev, ino, off + 2), gen) is None  # other offset
    assert S._add(proc.pid, start, addr, +1, ("ff:ff", ino, off), gen) is None  # other device
    assert S._add(proc.pid, start, addr, +1, None, gen) is None  # not recorded: never written
    other = format(int(gen, 16) ^ 1, "032x")  # another exec of the same program
    assert S._add(proc.pid, start, addr, +1, (dev, ino, off), other) is None
    assert S._add(proc.pid, start, addr, +1, (dev, ino, off), None) is None  # not recorded
    assert S.read_semaphore(proc.pid, addr) == 7


def test_the_exec_generation_changes_at_an_exec_of_the_same_program():
    """Same pid, same start time, same program (sh exec()s sh): another generation, and
    the same one read twice in between."""
    proc = subprocess.Popen(["/bin/sh", "-c", 'echo ready; read x; exec /bin/sh -c "read y"'],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        _needs_mem_access(proc.pid)
        before = S.exec_generation(proc.pid)
        assert before is not None and before == S.exec_generation(proc.pid)
        cmdline = open(f"/proc/{proc.pid}/cmdline", "rb").read()
        assert proc.stdin is not None
        proc.stdin.write("\n")
        proc.stdin.flush()
        for _ in range(500):  # until the exec is done
            if open(f"/proc/{proc.pid}/cmdline", "rb").read() != cmdline:
                break
            time.sleep(0.01)
        after = S.exec_generation(proc.pid)
        assert after is not None and after != before
        assert start_time(proc.pid) is not None
    finally:
        proc.kill()
        proc.wait()


def test_mapping_at_is_none_for_anonymous_memory():
    maps = parse_maps("7f0000000000-7f0000001000 rw-p 7f0000000 00:00 0 \n"
                      "55d0c0000000-55d0c0001000 rw-p 00002000 fd:01 1234 /usr/bin/app\n")
    assert S.mapping_at(maps, 0x7F0000000010) is None
    assert S.mapping_at(maps, 0x55D0C0000010) == ("fd:01", 1234, 0x2010)
    assert S.mapping_at(maps, 0x1000) is None


def test_stale_entry_whose_mapping_changed_is_left_alone(child, tmp_path):
    proc, addr = child
    _needs_mem_access(proc.pid)
    start = start_time(proc.pid)
    dev, ino, off = S.mapping_at(read_maps(proc.pid), addr)
    gen = S.exec_generation(proc.pid)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True).stdout.strip()
    (tmp_path / f"semaphores-{dead}.json").write_text(json.dumps({
        "owner": int(dead), "owner_start": 1,
        "raised": [{"pid": proc.pid, "start": start, "addr": addr,
                    "mapping": [dev, ino + 1, off], "generation": gen},
                   {"pid": proc.pid, "start": start, "addr": addr,  # another exec's
                    "mapping": [dev, ino, off], "generation": "00" * 16},
                   {"pid": proc.pid, "start": start, "addr": addr,  # older files
                    "mapping": [dev, ino, off]},
                   {"pid": proc.pid, "start": start, "addr": addr}]}))
    assert S.recover_stale(str(tmp_path)) == 0
    assert S.read_semaphore(proc.pid, addr) == 7
    assert not (tmp_path / f"semaphores-{dead}.json").exists()


def test_poker_records_then_restores(tmp_path):
    """Poker on this process: a u16 in a file-backed mapping it can find by inode."""
    data = tmp_path / "sem.bin"
    data.write_bytes(b"\0" * 4096)
    with open(data, "r+b") as fh:
        mm = mmap.mmap(fh.fileno(), 4096)
        st = os.stat(data)
        _needs_mem_access(os.getpid())
        poker = S.Poker(os.getpid(), str(tmp_path))
        assert poker.raise_sites([((st.st_dev, st.st_ino), 0x10)]) == 1
        assert poker.raise_sites([((st.st_dev, st.st_ino), 0x10)]) == 0  # once only
        assert mm[0x10] == 1
        state = json.loads(open(poker.state_path).read())
        assert state["owner"] == os.getpid() and len(state["raised"]) == 1
        dev = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}"
        assert state["raised"][0]["mapping"] == [dev, st.st_ino, 0x10]
        assert state["raised"][0]["generation"] == S.exec_generation(os.getpid())
        poker.restore()
        assert mm[0x10] == 0
        assert not os.path.exists(poker.state_path)
        mm.close()


def test_semaphore_mode_switch(monkeypatch):
    monkeypatch.setenv(S.MODE_ENV, "poke")
    assert S.semaphore_mode() == "poke"
    monkeypatch.delenv(S.MODE_ENV)
    assert S.semaphore_mode() == ("refctr" if S.kernel_has_ref_ctr() else "poke")


FORMAT = """name: sched_process_exec
format:
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;

\tfield:__data_loc char[] filename;\toffset:8;\tsize:4;\tsigned:0;
\tfield:pid_t pid;\toffset:12;\tsize:4;\tsigned:1;
\tfield:char comm[16];\toffset:16;\tsize:16;\tsigned:0;
\tfield:const char * name;\toffset:32;\tsize:8;\tsigned:0;
\tfield:unsigned long args[6];\toffset:40;\tsize:48;\tsigned:0;
"""


def test_parse_format_names_and_strings():
    got = {f.name: (f.offset, f.size, f.signed, f.is_string, f.array_len)
           for f in parse_format(FORMAT).own_fields}
    assert got == {
        "filename": (8, 4, False, True, 0),  # was named 'char' before the fix
        "pid": (12, 4, True, False, 0),
        "comm": (16, 16, False, True, 16),
        "name": (32, 8, False, False, 0),  # a pointer: str(name) reads it
        "args": (40, 48, False, False, 0),
    }


def test_real_resolves_links_inside_proc_pid_root(tmp_path):
    """Under /proc/PID/root a link is followed inside that root, and the result keeps
    the /proc/PID/root prefix (os.path.realpath would leave it for a host path)."""
    pid = os.getpid()
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "prog-1.0").write_text("x")
    (tmp_path / "bin" / "prog").symlink_to("prog-1.0")
    (tmp_path / "abs").symlink_to(tmp_path / "bin")
    root = f"/proc/{pid}/root"
    assert _real(f"{root}{tmp_path}/bin/prog", pid) == f"{root}{tmp_path}/bin/prog-1.0"
    assert _real(f"{root}{tmp_path}/abs/prog", pid) == f"{root}{tmp_path}/bin/prog-1.0"
    assert _real(f"{root}{tmp_path}/abs/../bin/./prog", pid) == \
        f"{root}{tmp_path}/bin/prog-1.0"
    assert _real(f"{tmp_path}/bin/prog", None) == f"{tmp_path}/bin/prog-1.0"
