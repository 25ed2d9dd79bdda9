"""The maps timeline (stacks/timeline.py): which mappings a process had at a given time,
from fork/exec/mmap/exit records; and the kernel's records themselves
(runtime/task_events.py) for a real short-lived process."""

from __future__ import annotations

import os
import subprocess
import time

import pytest

from planrunner.runtime.task_events import TaskEvents
from planrunner.stacks.timeline import PROT_EXEC, PROT_READ, MapsTimeline, Mmap

RX = PROT_READ | PROT_EXEC
TRUE = "/usr/bin/true"


def _m(start: int, end: int, path: str, pgoff: int = 0) -> Mmap:
    return Mmap(start, end, pgoff, RX, os.makedev(8, 1), 42, path)


def _paths(tl: MapsTimeline, pid: int, t: int) -> list[tuple[int, int, str]] | None:
    mods = tl.modules(pid, t)
    return None if mods is None else [(m.start, m.end, m.path) for m in mods.mappings]


def test_an_exec_begins_an_image_that_the_exit_does_not_end_for_late_stacks() -> None:
    tl = MapsTimeline()
    tl.exec(10, 100)
    tl.mmap(10, 110, _m(0x1000, 0x2000, "/a"))
    tl.mmap(10, 120, _m(0x5000, 0x6000, "/liba.so"))
    tl.exit(10, 200)
    assert _paths(tl, 10, 115) == [(0x1000, 0x2000, "/a")]  # liba not mapped yet
    assert _paths(tl, 10, 150) == [(0x1000, 0x2000, "/a"), (0x5000, 0x6000, "/liba.so")]
    assert _paths(tl, 10, 90) is None  # before the exec: not known


def test_an_exec_after_the_stack_does_not_change_its_maps() -> None:
    tl = MapsTimeline()
    tl.exec(10, 100)
    tl.mmap(10, 110, _m(0x1000, 0x2000, "/a"))
    tl.exec(10, 300)
    tl.mmap(10, 310, _m(0x7000, 0x8000, "/b"))
    assert _paths(tl, 10, 250) == [(0x1000, 0x2000, "/a")]
    assert _paths(tl, 10, 350) == [(0x7000, 0x8000, "/b")]


def test_a_reused_pid_is_another_process_from_its_fork_on() -> None:
    tl = MapsTimeline()
    tl.exec(7, 100)
    tl.mmap(7, 110, _m(0x1000, 0x2000, "/old"))
    tl.exit(7, 150)
    tl.exec(3, 50)  # the parent of the new pid 7
    tl.mmap(3, 60, _m(0x9000, 0xA000, "/parent"))
    tl.fork(7, 3, 400)  # inherits the parent's maps
    assert _paths(tl, 7, 140) == [(0x1000, 0x2000, "/old")]
    assert _paths(tl, 7, 410) == [(0x9000, 0xA000, "/parent")]


def test_processes_running_before_tracing_and_lost_records_are_not_known() -> None:
    tl = MapsTimeline()
    tl.mmap(5, 100, _m(0x1000, 0x2000, "/dlopened.so"))  # no fork or exec seen
    assert tl.modules(5, 200) is None and not tl.knows(5)
    tl.fork(6, 5, 150)  # a child of an unknown image is unknown too
    assert tl.modules(6, 200) is None
    tl.exec(8, 100)
    tl.unsure(120)  # the kernel dropped records: the image may lack a mapping
    assert tl.modules(8, 200) is None
    tl.exec(8, 300)  # a new image after that is whole again
    assert _paths(tl, 8, 310) == []


def test_a_later_mapping_hides_the_part_of_an_earlier_one_it_covers() -> None:
    tl = MapsTimeline()
    tl.exec(9, 1)
    tl.mmap(9, 2, _m(0x1000, 0x5000, "/a"))
    tl.mmap(9, 3, _m(0x2000, 0x3000, "/b"))
    mods = tl.modules(9, 4)
    assert mods is not None
    got = [(m.start, m.end, m.path, m.file_offset) for m in mods.mappings]
    assert got == [(0x1000, 0x2000, "/a", 0), (0x2000, 0x3000, "/b", 0),
                   (0x3000, 0x5000, "/a", 0x2000)]


def test_images_that_ended_long_before_the_newest_record_are_forgotten() -> None:
    tl = MapsTimeline(keep_ns=1000)
    tl.exec(4, 100)
    tl.mmap(4, 110, _m(0x1000, 0x2000, "/a"))
    tl.exit(4, 120)
    assert tl.modules(4, 115) is not None
    tl.exec(5, 5000)  # much later
    assert tl.modules(4, 115) is None


def _task_events(tl: MapsTimeline) -> TaskEvents:
    try:
        return TaskEvents(tl)
    except OSError as exc:
        pytest.skip(f"perf_event_open of a dummy event is refused here: {exc}")


def test_the_kernel_reports_the_maps_of_a_process_that_has_exited() -> None:
    """/usr/bin/true runs and exits; its maps, read afterwards from the kernel's
    records, hold the program, libc and the loader, at the load addresses it had."""
    tl = MapsTimeline()
    events = _task_events(tl)
    try:
        proc = subprocess.Popen([TRUE])
        assert proc.wait() == 0
        after = time.monotonic_ns()
        events.drain()
    finally:
        events.close()
    assert tl.knows(proc.pid)
    mods = tl.modules(proc.pid, after)
    assert mods is not None
    names = {os.path.basename(m.path) for m in mods.mappings}
    assert {"true", "libc.so.6", "ld-linux-x86-64.so.2", "[vdso]"} <= names
    main = next(m for m in mods.mappings if m.path == TRUE)
    assert main.executable and main.bias is not None and main.build_id
    assert not os.path.exists(f"/proc/{proc.pid}/maps")  # reaped: nothing left to read


def test_a_seeded_process_is_known_from_the_start_and_gains_later_mappings() -> None:
    tl = MapsTimeline()
    tl.seed(12, [_m(0x1000, 0x2000, "/a")])
    tl.mmap(12, 500, _m(0x5000, 0x6000, "/dlopened.so"))
    assert tl.knows(12)
    assert _paths(tl, 12, 100) == [(0x1000, 0x2000, "/a")]
    assert _paths(tl, 12, 600) == [(0x1000, 0x2000, "/a"), (0x5000, 0x6000, "/dlopened.so")]


def test_processes_running_when_tracing_begins_are_read_from_proc() -> None:
    """A process started before the records were opened, and gone before its stacks
    are read, still has its maps: read from /proc when tracing began (as perf does)."""
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        time.sleep(0.1)  # exec'd and mapped
        tl = MapsTimeline()
        events = _task_events(tl)
        try:
            events.seed_running()
        finally:
            sleeper.kill()  # our own child, by its pid
            sleeper.wait()
            events.drain()
            events.close()
    finally:
        if sleeper.poll() is None:
            sleeper.kill()
    mods = tl.modules(sleeper.pid, time.monotonic_ns())
    assert mods is not None
    assert any(os.path.basename(m.path) == "sleep" and m.bias is not None
               for m in mods.mappings)
